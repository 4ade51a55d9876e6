package inprocess

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// measure makes one single run of target through this package's drivers
// and fails t unless it ran and verified.
func measure(t *testing.T, target string, clients, sessions int, size string, full time.Duration, cpuProfile string) *harness.Result {
	t.Helper()
	def, err := throughput.Single{Target: target, Clients: clients, Sessions: sessions, Size: size}.Def()
	if err != nil {
		t.Fatal(err)
	}
	sizer, err := harness.ParseSize(size)
	if err != nil {
		t.Fatal(err)
	}
	o := &throughput.Options{Dir: t.TempDir(), Size: sizer, Duration: benchtest.RunFor(full), Verify: true,
		CPUProfile: cpuProfile, Profiles: 1, Others: NewDriver, Log: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc, err := o.Run(ctx, def, 0, rand.New(rand.NewPCG(7, 0)))
	if err != nil {
		t.Fatal(err)
	}
	r := sc.Results[0]
	if r.Error != "" || r.Verified == nil || !*r.Verified {
		t.Fatalf("%s run: error %q, verify %q", target, r.Error, r.VerifyError)
	}
	return r
}

func TestInProcTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes files for a second")
	}
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	r := measure(t, throughput.TargetInProc, 3, 3, "dist:agent", time.Second, profile)
	if r.Entries == 0 || r.StoredEntries != r.Entries || r.Syncs == 0 {
		t.Errorf("in-process: %d acknowledged, %d stored, %d syncs", r.Entries, r.StoredEntries, r.Syncs)
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("no CPU profile written: %v", err)
	}
}

func TestEchoTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	t.Parallel()
	r := measure(t, throughput.TargetEcho, 3, 1, "1KiB", 500*time.Millisecond, "")
	if r.Target != throughput.TargetEcho || r.Entries == 0 || !strings.HasPrefix(r.CPUOf, "echo server") {
		t.Fatalf("echo run: %+v", r)
	}
	// (f): the same, and the server's file holds every acknowledged entry.
	if r := measure(t, throughput.TargetEchoSync, 3, 1, "1KiB", 500*time.Millisecond, ""); r.Target != throughput.TargetEchoSync || r.Entries == 0 {
		t.Fatalf("echo-sync run: %+v", r)
	}
}

// TestCeilingTarget: the engine alone holds every acknowledged entry, and
// counts its syncs.
func TestCeilingTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes files for a second")
	}
	t.Parallel()
	r := measure(t, throughput.TargetCeiling, 4, 2, "1KiB", 500*time.Millisecond, "")
	if r.Target != throughput.TargetCeiling || r.Entries == 0 || r.Syncs == 0 || r.EntriesPerSync <= 0 {
		t.Fatalf("ceiling run: %+v", r)
	}
}
