package bench

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestClaim checks how an --entries budget is shared out in calls of
// several entries: whole calls, then what is left, then nothing.
func TestClaim(t *testing.T) {
	var b atomic.Int64
	b.Store(120)
	var got []int
	for {
		n := claim(&b, 50)
		if n == 0 {
			break
		}
		got = append(got, n)
	}
	if len(got) != 3 || got[0] != 50 || got[1] != 50 || got[2] != 20 {
		t.Fatalf("claims %v, want [50 50 20]", got)
	}
	if n := claim(&b, 50); n != 0 {
		t.Fatalf("claim after the budget is spent: %d", n)
	}
	b.Store(3)
	if n := claim(&b, 1); n != 1 {
		t.Fatalf("claim of one: %d", n)
	}
}

// TestBatchedAppends runs --batch against a real sessiond, with the Go
// client's streams and with unary calls: each measured call carries the
// batch (the last one what the budget leaves), sessiond's counters agree,
// and the transcript holds every acknowledged entry. No figure is judged.
func TestBatchedAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := buildSessiond(t)
	for _, unary := range []bool{false, true} {
		cfg := Config{
			Sessiond: bin, Dir: t.TempDir(), Verify: true, Baselines: false,
			Clients: 1, Sessions: 1, Size: "1KiB", Entries: 120, Batch: 50, UnaryAppend: unary,
			Seed: 7, Log: io.Discard,
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out strings.Builder
		rep, err := Run(ctx, cfg, &out)
		cancel()
		if err != nil {
			t.Fatalf("unary %v: Run: %v\n%s", unary, err, out.String())
		}
		if err := rep.Failed(); err != nil {
			t.Fatalf("unary %v: %v\n%s", unary, err, out.String())
		}
		r := rep.Scenarios[0].Results[0]
		if r.Batch != 50 || !strings.Contains(r.Label, "50 entries per Append") || strings.Contains(r.Label, "unary") != unary {
			t.Errorf("unary %v: batch %d, label %q", unary, r.Batch, r.Label)
		}
		if r.Entries != 120 || r.Bytes != 120*1025 || r.TotalAcked != 121 {
			t.Errorf("unary %v: %d entries (%d bytes) measured, %d acknowledged in all; want 120 and 121", unary, r.Entries, r.Bytes, r.TotalAcked)
		}
		if r.Appends != 3 || r.StoredEntries != 120 {
			t.Errorf("unary %v: sessiond counted %d appends storing %d entries, want 3 and 120", unary, r.Appends, r.StoredEntries)
		}
		if r.Verified == nil || !*r.Verified {
			t.Errorf("unary %v: not verified: %s", unary, r.VerifyError)
		}
	}
	for _, bad := range []Config{
		{Batch: 50, Baselines: true},
		{Batch: 50, Target: TargetInProc},
		{Batch: 50, Suite: true},
	} {
		bad.Log = io.Discard
		if _, err := Run(context.Background(), bad, io.Discard); err == nil || !strings.Contains(err.Error(), "batch") {
			t.Errorf("Run(%+v): %v, want a --batch error", bad, err)
		}
	}
}
