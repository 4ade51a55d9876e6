package fleet

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestTallyFleet: offered, achieved and backlog from the calls' times, for
// a punctual daemon and for one that falls behind.
func TestTallyFleet(t *testing.T) {
	p := newFleetPlan(4, 10, 3, time.Second, rand.New(rand.NewPCG(1, 2)))
	for s, ph := range p.phases {
		if ph < 0 || ph >= time.Second {
			t.Fatalf("session %d: phase %v outside the first period", s, ph)
		}
	}
	if p.window() != 10*time.Second || p.due(2, 3) != p.phases[2]+3*time.Second {
		t.Fatalf("window %v, due(2,3) %v", p.window(), p.due(2, 3))
	}
	// Punctual: each batch sent when due, acknowledged 2 ms later.
	calls := make([][]fleetCall, p.sessions)
	for s := range calls {
		for k := range p.rounds {
			d := p.due(s, k)
			calls[s] = append(calls[s], fleetCall{due: d, sent: d, acked: d + 2*time.Millisecond, done: true})
		}
	}
	tl := tallyFleet(p, calls)
	if tl.batches != 40 || tl.offered != 12 || tl.backlog != 0 || tl.latency.P99 != 2000 || tl.late.Max != 0 {
		t.Errorf("punctual: %+v", tl)
	}
	// Every batch acknowledged, the last at most 2 ms past the window.
	if tl.acked != 40 || tl.achieved > 12 || tl.achieved < 12*10/10.002 || tl.drain > 2*time.Millisecond {
		t.Errorf("punctual: %d batches acknowledged, achieved %v, drain %v", tl.acked, tl.achieved, tl.drain)
	}
	// Behind: every call takes 1.5 periods, so each session sends its
	// batches back to back and ends ~5 s late.
	for s := range calls {
		var free time.Duration
		for k := range calls[s] {
			c := &calls[s][k]
			c.sent = max(c.due, free)
			c.acked = c.sent + 1500*time.Millisecond
			free = c.acked
		}
	}
	calls[0][9].done = false // and one never answered
	tl = tallyFleet(p, calls)
	if tl.backlog < 4 || tl.achieved >= 0.99*tl.offered || tl.drain < 4*time.Second || tl.late.Max < 4e6 || tl.acked != 39 {
		t.Errorf("behind: %+v", tl)
	}
	// 39 batches over the window and the drain.
	if want := 39 * 3 / (10*time.Second + tl.drain).Seconds(); math.Abs(tl.achieved-want) > 1e-9 {
		t.Errorf("behind: achieved %v, want %v", tl.achieved, want)
	}
	if tl.latency.P50 != 1.5e6 {
		t.Errorf("behind: latency %+v, want 1.5 s per call", tl.latency)
	}
}

// TestFleetScenario runs the fleet at a tiny scale against a real sessiond
// and checks that what it reports holds together and that every
// acknowledged entry is in its transcript. It judges no figure.
func TestFleetScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: dir, Scale: 0.004, Verify: true, Seed: 3, Log: io.Discard}
	sc, err := Run(ctx, env)
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	const sessions, rounds = 4, 3 // 1000 and 60 at scale 0.004, at least 3 rounds
	if !strings.Contains(sc.Title, "4 sessions") || !strings.Contains(sc.Title, "for 3 s") || !strings.Contains(sc.Title, "over 4 connections") {
		t.Errorf("title %q", sc.Title)
	}
	rows := map[string][]string{}
	for _, r := range sc.Table.Rows {
		rows[strings.SplitN(r[0], ":", 2)[0]] = r
	}
	// Offered: every batch due in the window.
	if v := rows["offered"]; v == nil || benchtest.Float(t, v[1]) != float64(sessions*fleetBatch) {
		t.Errorf("offered row %q, want %d entries/s", v, sessions*fleetBatch)
	}
	if v := rows["Status"]; v == nil || !strings.HasPrefix(v[1], strconv.Itoa(sessions*rounds)+" / ") {
		t.Errorf("Status row %q, want %d appends", v, sessions*rounds)
	}
	if v := rows["backlog"]; v == nil || v[1] != "0" {
		t.Errorf("backlog row %q", v)
	}
	want := map[string]struct {
		limit   float64
		atLeast bool
	}{
		"keeps up: achieved >= 99% of offered":           {99, true},
		"keeps up: no backlog 1 s after the window":      {0, false},
		"p99 append latency <= 10 ms":                    {10, false},
		"appends per fsync >= 4":                         {4, true},
		"daemon CPU <= 15% of one core":                  {15, false},
		"open file descriptors <= 100 (gRPC's included)": {100, false},
	}
	if len(sc.Checks) != len(want) {
		t.Fatalf("checks %+v", sc.Checks)
	}
	for _, c := range sc.Checks {
		w, ok := want[c.Target]
		if !ok || c.Limit != w.limit || c.AtLeast != w.atLeast {
			t.Errorf("check %+v", c)
		}
		// Figures that cannot be otherwise, whatever the machine: each
		// append synced at most once, a sync for at most every append,
		// some latency, descriptors open, no more achieved than offered.
		switch c.Unit {
		case "appends":
			if c.Value <= 0 || c.Value > float64(sessions*rounds) {
				t.Errorf("%s: %v", c.Target, c.Value)
			}
		case "ms", "fds":
			if c.Value <= 0 {
				t.Errorf("%s: %v", c.Target, c.Value)
			}
		case "%":
			if c.Value < 0 || (c.AtLeast && c.Value > 100) {
				t.Errorf("%s: %v", c.Target, c.Value)
			}
		}
	}
	if !strings.Contains(strings.Join(sc.Notes, "\n"), "Verified: yes: 4 sessions") {
		t.Errorf("notes %q", sc.Notes)
	}

	// Independently of the scenario's own check: each transcript holds the
	// warm-up batch and every round's, whole 1 KiB lines.
	canon, _ := filepath.Glob(filepath.Join(dir, "daemon", "root", "projects", "*", "*.jsonl"))
	if len(canon) != sessions {
		t.Fatalf("%d transcripts, want %d", len(canon), sessions)
	}
	for _, p := range canon {
		if n := benchtest.CheckLines(t, p, fleetEntry); n != (rounds+1)*fleetBatch {
			t.Errorf("%s: %d lines, want %d", p, n, (rounds+1)*fleetBatch)
		}
	}
}
