package throughput

import (
	"fmt"
	"strings"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// The throughput scenarios of the suite (C clients appending 1 KiB entries
// as fast as they are acknowledged) and their targets. The targets compare
// sessiond with rows measured in the same run: the naive writer (a), the
// echo server (e), the least durable gRPC daemon (f), and sessiond itself
// under another spread of sessions. Rows that no target reads are kept for
// information (labelled so): they say where the time goes.

// Limits of the throughput scenarios' targets.
const (
	// parallelOverNaive: 64 clients on 64 sessions at least this many
	// times the naive writer's rate.
	parallelOverNaive = 1.5
	// cpuOverEcho: sessiond's CPU per stored entry at most this many times
	// the echo server's CPU per call, both with 64 clients.
	cpuOverEcho = 2.0
	// sequentialOverF: one client's p50 at most this many times that of
	// (f), the least any durable gRPC daemon costs.
	sequentialOverF = 1.1
	// sessionsOverOne: 1,000 clients on 1,000 sessions at least this share
	// (%) of 1,000 clients on one session.
	sessionsOverOne = 80.0
)

// scaledCount is n scaled by scale (<= 0: 1), at least least.
func scaledCount(n, least int, scale float64) int {
	if scale <= 0 {
		scale = 1
	}
	return max(int(float64(n)*scale), least)
}

func Suite(inproc bool, scale float64) []Def {
	base := func(c int) []runSpec {
		return []runSpec{
			{"a", "(a) O_APPEND+fsync per entry", TargetNaive, c, c},
			{"b", "(b) O_APPEND, no fsync", TargetNoSync, c, c},
			{"c", "(c) the shared log alone, 1 session", TargetCeiling, c, 1},
		}
	}
	with := func(rs []runSpec, more ...runSpec) []runSpec { return append(rs, more...) }
	// --scale shrinks the client counts (tests run every row at a tiny
	// scale); the labels say the counts used.
	pc, sc := scaledCount(64, 2, scale), scaledCount(1000, 4, scale)
	par := with(base(pc),
		runSpec{"e", "(e) gRPC round trip alone: echo server, no disk", TargetEcho, pc, 1},
		runSpec{"d", fmt.Sprintf("sessiond, %d clients -> 1 session", pc), harness.TargetDaemon, pc, 1},
		runSpec{"d64", fmt.Sprintf("sessiond, %d clients -> %d sessions", pc, pc), harness.TargetDaemon, pc, pc},
		runSpec{"c64", fmt.Sprintf("(c) the shared log alone, %d sessions (info)", pc), TargetCeiling, pc, pc})
	seq := with(base(1),
		runSpec{"e", "(e) gRPC round trip alone: echo server, no disk (info)", TargetEcho, 1, 1},
		runSpec{"f", "(f) echo server + write + fdatasync per request", TargetEchoSync, 1, 1},
		runSpec{"g", "(g) (f) without gRPC: plain socket, write + fdatasync, 1-byte answer (info)", TargetRawSync, 1, 1},
		runSpec{"d", "sessiond, 1 client", harness.TargetDaemon, 1, 1},
		// Diagnosis of the gap between (f) and (g): the same runs with
		// the client's CPU kept from going idle (keepAwake).
		runSpec{"fA", "(f) with the client's CPU kept awake (info)", TargetEchoSync, 1, 1},
		runSpec{"dA", "sessiond, 1 client, the client's CPU kept awake (info)", harness.TargetDaemon, 1, 1})
	ses := with(base(sc),
		runSpec{"cJ", fmt.Sprintf("(c) %d journals, one committer each (info)", sc), TargetCeiling, sc, sc},
		runSpec{"d1", fmt.Sprintf("sessiond, %d clients -> 1 session", sc), harness.TargetDaemon, sc, 1},
		runSpec{"d", fmt.Sprintf("sessiond, %d clients -> %d sessions", sc, sc), harness.TargetDaemon, sc, sc})
	if inproc {
		par = with(par, runSpec{"w", fmt.Sprintf("writer in-process, %d -> 1 (no gRPC)", pc), TargetInProc, pc, 1})
		seq = with(seq, runSpec{"w", "writer in-process, 1 client (no gRPC)", TargetInProc, 1, 1})
		ses = with(ses, runSpec{"w", fmt.Sprintf("writer in-process, %d -> %d (no gRPC)", sc, sc), TargetInProc, sc, sc})
	}
	return []Def{
		{Name: ScenarioParallel, Title: fmt.Sprintf("%d clients, 1 KiB entries, durable", pc), runs: par, checks: parallelChecks},
		{Name: ScenarioSequential, Title: "one client, sequential appends, 1 KiB", runs: seq, checks: sequentialChecks, awake: map[string]bool{"fA": true, "dA": true}},
		{Name: ScenarioSessions, Title: fmt.Sprintf("%d sessions written at once vs one session, %d clients, 1 KiB", sc, sc), runs: ses, checks: sessionsChecks},
	}
}

// parallelChecks: many clients on their own sessions are never slower than
// on one session and clearly faster than naive writers, and what sessiond
// spends per entry is within 2x of what the transport alone spends per
// call. The naive writer and the transport are the yardsticks because
// a ratio to the ceiling (c) would judge the disk's merging of concurrent
// fsyncs and gRPC on two cores rather than sessiond.
func parallelChecks(by map[string]*harness.Result) []harness.Check {
	var cs []harness.Check
	d, d64, a := by["d"], by["d64"], by["a"]
	if harness.Measured(d, d64) {
		ch := harness.NewCheck(fmt.Sprintf("%d clients -> %d sessions >= %d clients -> 1 session", d64.Clients, d64.Sessions, d.Clients),
			d64.EntriesPerSec/d.EntriesPerSec*100, 100, "%", true)
		ch.Note = fmt.Sprintf("%s vs %s entries/s", harness.FmtNum(d64.EntriesPerSec), harness.FmtNum(d.EntriesPerSec))
		cs = append(cs, ch)
	}
	if harness.Measured(d64, a) {
		ch := harness.NewCheck(fmt.Sprintf("%d clients -> %d sessions >= %.1fx (a)", d64.Clients, d64.Sessions, parallelOverNaive),
			d64.EntriesPerSec/a.EntriesPerSec, parallelOverNaive, "x", true)
		ch.Note = fmt.Sprintf("(a) %s entries/s", harness.FmtNum(a.EntriesPerSec))
		if c := by["c"]; harness.Measured(c) {
			ch.Note += fmt.Sprintf("; the ceiling (c) reaches %.2fx (a)", c.EntriesPerSec/a.EntriesPerSec)
		}
		cs = append(cs, ch)
	}
	if e := by["e"]; harness.Measured(d, e) && ServerCPU(d) && ServerCPU(e) {
		ch := harness.NewCheck(fmt.Sprintf("sessiond CPU per stored entry (%d clients -> 1 session) <= %.0fx the echo server's per call", d.Clients, cpuOverEcho),
			d.CPUPerEntryUS/e.CPUPerEntryUS, cpuOverEcho, "x", false)
		ch.Note = fmt.Sprintf("sessiond %.1f us per entry (%.1f s for %d entries), echo server (e) %.1f us per call (%.1f s for %d calls)",
			d.CPUPerEntryUS, d.CPUSeconds, d.Entries, e.CPUPerEntryUS, e.CPUSeconds, e.Entries)
		if harness.Measured(d64) && ServerCPU(d64) {
			ch.Note += fmt.Sprintf("; %d -> %d sessions: %.1f us per entry, %.2fx", d64.Clients, d64.Sessions, d64.CPUPerEntryUS, d64.CPUPerEntryUS/e.CPUPerEntryUS)
		}
		cs = append(cs, ch)
	}
	return cs
}

// ServerCPU reports whether r's CPU figure is its server process's own
// (sessiond's or the echo server's), not the bench process's.
func ServerCPU(r *harness.Result) bool {
	return r.CPUPerEntryUS > 0 && (strings.HasPrefix(r.CPUOf, "sessiond") || strings.HasPrefix(r.CPUOf, "echo"))
}

// sequentialChecks: one client waits no longer than on the least durable
// gRPC daemon, (f), plus 10%: a limit drawn from the ceiling (c) would
// judge gRPC's thread wake-ups on this VM, which (f) pays too.
func sequentialChecks(by map[string]*harness.Result) []harness.Check {
	d, f := by["d"], by["f"]
	if !harness.Measured(d, f) {
		return nil
	}
	ch := harness.NewCheck(fmt.Sprintf("sessiond p50 <= %.1fx (f) p50", sequentialOverF), d.Latency.P50, f.Latency.P50*sequentialOverF, "us", false)
	ch.Note = fmt.Sprintf("(f), the least durable gRPC daemon, p50 %.0f us", f.Latency.P50)
	if c := by["c"]; harness.Measured(c) {
		ch.Note += fmt.Sprintf("; (c) single-sync p50 %.0f us", c.Latency.P50)
	}
	if e := by["e"]; harness.Measured(e) {
		ch.Note += fmt.Sprintf("; the gRPC round trip alone, (e), p50 %.0f us", e.Latency.P50)
	}
	if g := by["g"]; harness.Measured(g) {
		ch.Note += fmt.Sprintf("; (f) without gRPC, (g), p50 %.0f us", g.Latency.P50)
	}
	if fA, dA := by["fA"], by["dA"]; harness.Measured(fA, dA) {
		ch.Note += fmt.Sprintf("; with the client's CPU kept awake, (f) p50 %.0f us and sessiond p50 %.0f us", fA.Latency.P50, dA.Latency.P50)
	}
	return []harness.Check{ch}
}

// sessionsChecks: spreading the clients over as many sessions costs at most
// a fifth of the rate on one session.
func sessionsChecks(by map[string]*harness.Result) []harness.Check {
	d, d1 := by["d"], by["d1"]
	if !harness.Measured(d, d1) {
		return nil
	}
	ch := harness.NewCheck(fmt.Sprintf("%d sessions >= %.0f%% of 1 session", d.Sessions, sessionsOverOne), d.EntriesPerSec/d1.EntriesPerSec*100, sessionsOverOne, "%", true)
	ch.Note = fmt.Sprintf("%s vs %s entries/s", harness.FmtNum(d.EntriesPerSec), harness.FmtNum(d1.EntriesPerSec))
	return []harness.Check{ch}
}
