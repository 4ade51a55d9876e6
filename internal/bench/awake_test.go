package bench

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	d, ok := selfCPU()
	if !ok {
		t.Fatal("getrusage failed")
	}
	return d
}

// TestKeepAwake: the spinner burns CPU while it runs (that is its whole
// effect) and is gone once stop returns.
func TestKeepAwake(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	c0 := cpuTime(t)
	stop := keepAwake()
	// The test itself sleeps: nearly all of the CPU used is the spinner's.
	// On an idle machine 30ms takes about 30ms. The spinner gives way to
	// every other thread, so on a machine loaded by the rest of the suite
	// (make test runs the packages and fuzzing side by side) it may get a
	// few percent of a CPU: it has 10 s to use 30ms.
	start := time.Now()
	var used time.Duration
	for used = cpuTime(t) - c0; used < 30*time.Millisecond && time.Since(start) < 10*time.Second; used = cpuTime(t) - c0 {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	stop()
	if used < 30*time.Millisecond {
		t.Fatalf("the process used %v of CPU in %v with the spinner on", used, took)
	}
	t.Logf("the spinner used %v of CPU in %v", used, took)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines after stop, %d before", n, goroutines)
	}
}

// TestSequentialScenario runs the sequential scenario for a moment against
// a real sessiond: every run verified, and only the diagnosis runs measured
// with the client kept awake, their figures in the target's note.
func TestSequentialScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := buildSessiond(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out strings.Builder
	rep, err := Run(ctx, Config{Suite: true, Scenarios: []string{ScenarioSequential}, Sessiond: bin, Dir: t.TempDir(),
		Duration: runFor(200 * time.Millisecond), Verify: true, Seed: 5, Log: io.Discard}, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if err := rep.Failed(); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	sc := rep.Scenarios[0]
	ids := map[string]bool{}
	for _, r := range sc.Results {
		ids[r.ID] = true
		if r.Entries == 0 || r.Verified == nil || !*r.Verified {
			t.Errorf("run %s: %d entries, verified %v", r.ID, r.Entries, r.Verified)
		}
		if want := r.ID == "fA" || r.ID == "dA"; r.ClientAwake != want {
			t.Errorf("run %s: client kept awake %v, want %v", r.ID, r.ClientAwake, want)
		}
	}
	for _, id := range []string{"a", "b", "c", "e", "f", "g", "d", "fA", "dA"} {
		if !ids[id] {
			t.Errorf("no run %s", id)
		}
	}
	if len(sc.Checks) != 1 || !strings.Contains(sc.Checks[0].Note, "kept awake, (f) p50") {
		t.Fatalf("checks %+v", sc.Checks)
	}
}
