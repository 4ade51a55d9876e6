package throughput

import (
	"math"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestThroughputChecks: the targets of the throughput scenarios, from
// results made up so each passes or fails by a known margin.
func TestThroughputChecks(t *testing.T) {
	res := func(id string, clients, sessions int, rate, p50, cpuUS float64, cpuOf string) *harness.Result {
		return &harness.Result{ID: id, Clients: clients, Sessions: sessions, Entries: uint64(rate * 10), EntriesPerSec: rate,
			Latency: harness.Latency{P50: p50}, CPUPerEntryUS: cpuUS, CPUSeconds: cpuUS * rate * 10 / 1e6, CPUOf: cpuOf}
	}
	by := map[string]*harness.Result{
		"a":   res("a", 64, 64, 20000, 400, 0, ""),
		"c":   res("c", 64, 1, 100000, 500, 0, ""),
		"e":   res("e", 64, 1, 60000, 900, 14, "echo server pid 1"),
		"d":   res("d", 64, 1, 26000, 2000, 39, "sessiond pid 2"),
		"d64": res("d64", 64, 64, 31000, 3000, 20, "sessiond pid 2"),
	}
	cs := parallelChecks(by)
	if len(cs) != 3 {
		t.Fatalf("checks %+v", cs)
	}
	wantP := []struct {
		target       string
		value, limit float64
		pass         bool
	}{
		{"64 clients -> 64 sessions >= 64 clients -> 1 session", 31000.0 / 26000 * 100, 100, true},
		{"64 clients -> 64 sessions >= 1.5x (a)", 1.55, 1.5, true},
		{"sessiond CPU per stored entry (64 clients -> 1 session) <= 2x the echo server's per call", 39.0 / 14, 2, false},
	}
	for i, w := range wantP {
		c := cs[i]
		if c.Target != w.target || math.Abs(c.Value-w.value) > 1e-9 || c.Limit != w.limit || c.Pass != w.pass {
			t.Errorf("check %d: %+v, want %+v", i, c, w)
		}
	}
	if !strings.Contains(cs[1].Note, "(c) reaches 5.00x (a)") || !strings.Contains(cs[2].Note, "64 -> 64 sessions: 20.0 us per entry") {
		t.Errorf("notes %q, %q", cs[1].Note, cs[2].Note)
	}
	// The bench process's own CPU is no server's: no CPU target then.
	by["e"].CPUOf = "bench process (load generator included)"
	if cs := parallelChecks(by); len(cs) != 2 {
		t.Errorf("CPU of the bench process judged: %+v", cs)
	}
	delete(by, "d64")
	if cs := parallelChecks(by); len(cs) != 0 {
		t.Errorf("without the 64-session run: %+v", cs)
	}

	seq := map[string]*harness.Result{"d": res("d", 1, 1, 2500, 374, 0, ""), "f": res("f", 1, 1, 2600, 340, 0, "")}
	cs = sequentialChecks(seq)
	if len(cs) != 1 || math.Abs(cs[0].Limit-374) > 1e-9 || cs[0].Value != 374 || !cs[0].Pass || cs[0].AtLeast {
		t.Errorf("sequential: %+v", cs)
	}
	seq["d"].Latency.P50 = 375
	if cs = sequentialChecks(seq); cs[0].Pass {
		t.Errorf("sequential, 375 us against 1.1 x 340: %+v", cs)
	}

	ses := map[string]*harness.Result{"d": res("d", 1000, 1000, 7900, 0, 0, ""), "d1": res("d1", 1000, 1, 10000, 0, 0, "")}
	cs = sessionsChecks(ses)
	if len(cs) != 1 || cs[0].Target != "1000 sessions >= 80% of 1 session" || cs[0].Pass || math.Abs(cs[0].Value-79) > 1e-9 {
		t.Errorf("sessions: %+v", cs)
	}
}
