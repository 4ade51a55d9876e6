package throughput

import (
	"runtime"
	"testing"
	"time"
)

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	d, ok := SelfCPU()
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
