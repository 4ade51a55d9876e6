package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// TestRunAgainstRealDaemon runs the tool's code path for a short while
// against a real sessiond and checks that what it reports is consistent
// with what is on disk. It measures nothing: no figure is compared with a
// target here.
func TestRunAgainstRealDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	dir := t.TempDir()
	const clients, sessions = 4, 2
	cfg := Config{
		Sessiond: bin, Dir: dir, Keep: true, Verify: true, Baselines: true,
		Clients: clients, Sessions: sessions, Size: "1KiB", Duration: benchtest.RunFor(1500 * time.Millisecond),
		Seed: 42, Log: io.Discard,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	rep, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if err := rep.Failed(); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if !rep.Daemon.Started || rep.Daemon.Pid == 0 || rep.Daemon.Root == "" {
		t.Fatalf("daemon info %+v", rep.Daemon)
	}
	if len(rep.Scenarios) != 1 {
		t.Fatalf("%d scenarios, want 1", len(rep.Scenarios))
	}
	byTarget := map[string][]*harness.Result{}
	for _, r := range rep.Scenarios[0].Results {
		byTarget[r.Target] = append(byTarget[r.Target], r)
		// Common consistency.
		if r.Entries == 0 || r.Seconds <= 0 || r.EntriesPerSec <= 0 || r.MBPerSec <= 0 {
			t.Errorf("%s: nothing measured: %+v", r.Label, r)
		}
		if r.Bytes != r.Entries*1025 {
			t.Errorf("%s: %d bytes for %d entries of 1 KiB", r.Label, r.Bytes, r.Entries)
		}
		l := r.Latency
		if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max && l.Mean > 0) {
			t.Errorf("%s: latencies inconsistent: %+v", r.Label, l)
		}
		if r.WarmupEntries != clients || r.TotalAcked != r.Entries+r.WarmupEntries {
			t.Errorf("%s: %d acknowledged in all, %d measured, %d warm-up", r.Label, r.TotalAcked, r.Entries, r.WarmupEntries)
		}
		if r.Verified == nil || !*r.Verified {
			t.Errorf("%s: not verified: %s", r.Label, r.VerifyError)
		}
		if r.Target != harness.TargetDaemon && r.RatioToNaive == 0 {
			t.Errorf("%s: no ratio to (a)", r.Label)
		}
	}
	for _, tg := range []string{throughput.TargetNaive, throughput.TargetNoSync, throughput.TargetCeiling, harness.TargetDaemon} {
		if len(byTarget[tg]) == 0 {
			t.Fatalf("no %s run in %v", tg, rep.Scenarios[0].Results)
		}
	}

	// sessiond's own counters agree with what the clients saw.
	d := byTarget[harness.TargetDaemon][0]
	if d.Clients != clients || d.Sessions != sessions {
		t.Errorf("daemon run: %d clients, %d sessions", d.Clients, d.Sessions)
	}
	if d.StoredEntries != d.Entries || d.Appends != d.Entries {
		t.Errorf("daemon: %d entries acknowledged, Status says %d stored in %d appends", d.Entries, d.StoredEntries, d.Appends)
	}
	if d.Syncs == 0 || d.Syncs > d.Entries || d.EntriesPerSync < 1 {
		t.Errorf("daemon: %d syncs for %d entries (batch %.2f)", d.Syncs, d.Entries, d.EntriesPerSync)
	}
	// The CPU figure comes in clock ticks (10 ms): a short run on a
	// loaded machine may take less than one, so only a run long enough
	// for several (about 50 us of CPU per entry) must show some.
	if !strings.HasPrefix(d.CPUOf, "sessiond pid") || d.CPUSeconds < 0 || d.CPUSeconds == 0 && d.Entries >= 2000 || d.PeakRSSBytes <= 0 {
		t.Errorf("daemon process figures: cpu %v s of %q, peak RSS %d", d.CPUSeconds, d.CPUOf, d.PeakRSSBytes)
	}
	for _, c := range byTarget[throughput.TargetCeiling] {
		if c.StoredEntries != c.Entries || c.Syncs == 0 || c.Syncs > c.Entries {
			t.Errorf("%s: %d acknowledged, %d journaled in %d syncs", c.Label, c.Entries, c.StoredEntries, c.Syncs)
		}
	}

	// Independently of the tool's own verify: the canonical files hold
	// every acknowledged entry, whole lines of the right size.
	canon, _ := filepath.Glob(filepath.Join(rep.Daemon.Root, "projects", "*", "*.jsonl"))
	if len(canon) != sessions {
		t.Fatalf("%d canonical files, want %d: %v", len(canon), sessions, canon)
	}
	var lines uint64
	for _, p := range canon {
		lines += benchtest.CheckLines(t, p, 1024)
	}
	if lines != d.TotalAcked {
		t.Errorf("canonical files hold %d entries, %d acknowledged", lines, d.TotalAcked)
	}

	// The baselines' files: one per client, whole 1 KiB lines, as many as
	// acknowledged.
	for _, tg := range []string{throughput.TargetNaive, throughput.TargetNoSync} {
		r := byTarget[tg][0]
		files, _ := filepath.Glob(filepath.Join(dir, "*-"+r.ID, "client-*.jsonl"))
		if len(files) != clients {
			t.Fatalf("%s: %d files, want %d", r.Label, len(files), clients)
		}
		var n uint64
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			k := benchtest.CheckLines(t, f, 1024)
			if uint64(fi.Size()) != k*1025 {
				t.Errorf("%s: %d bytes for %d lines of 1 KiB", f, fi.Size(), k)
			}
			n += k
		}
		if n != r.TotalAcked {
			t.Errorf("%s: files hold %d lines, %d acknowledged", r.Label, n, r.TotalAcked)
		}
	}
	if !strings.Contains(out.String(), "sessiond, 4 clients -> 2 sessions") {
		t.Errorf("table lacks the sessiond run:\n%s", out.String())
	}
}
