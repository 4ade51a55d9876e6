package fleet

import (
	"fmt"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

func ms(us float64) string { return fmt.Sprintf("%.2f", us/1e3) }

// report fills sc's table, targets and notes from r.
func (f *fleetRun) report(sc *harness.Scenario, r *fleetResult, verified string) {
	sc.Table = f.table(r)
	sc.Checks = append(sc.Checks, f.checks(r)...)
	sc.Notes = append(sc.Notes, f.notes(verified)...)
}

func (f *fleetRun) table(r *fleetResult) *harness.Table {
	plan, t := f.plan, r.t
	tb := &harness.Table{Columns: []string{"measurement", "value", "detail"}}
	add := func(what, v, detail string) { tb.Rows = append(tb.Rows, []string{what, v, detail}) }
	add("offered: entries/s", fmt.Sprintf("%.0f", t.offered), fmt.Sprintf("%d batches of %d x %d B in %.0f s (%.0f appends/s)",
		t.batches, plan.batch, fleetEntry, plan.window().Seconds(), float64(t.batches)/plan.window().Seconds()))
	add("achieved: entries/s acknowledged", fmt.Sprintf("%.0f", t.achieved), fmt.Sprintf("%.2f%% of offered (over the window, or until the last acknowledgement if later)", t.achieved/t.offered*100))
	add("backlog: batches unacknowledged 1 period after the window", fmt.Sprint(t.backlog), fmt.Sprintf("last acknowledgement %.1f ms after the window closed", t.drain.Seconds()*1e3))
	add("append latency per call p50 / p90 / p99 / max, ms", fmt.Sprintf("%s / %s / %s / %s", ms(t.latency.P50), ms(t.latency.P90), ms(t.latency.P99), ms(t.latency.Max)),
		fmt.Sprintf("%d calls, from the call to its acknowledgement", t.batches))
	add("senders behind schedule p99 / max, ms", fmt.Sprintf("%s / %s", ms(t.late.P99), ms(t.late.Max)),
		"a call's start after its due time (the bench's own timers, or the previous call still in flight)")
	add("Status: appends / journal syncs", fmt.Sprintf("%d / %d", r.dAppends, r.dSyncs), fmt.Sprintf("%.2f appends per sync, %.2f entries per sync; %d compactions",
		r.perSync(), float64(r.dEntries)/float64(r.dSyncs), r.after.comps-r.before.comps))
	add("daemon CPU, % of one core", fmt.Sprintf("%.1f", r.cpuPct()), fmt.Sprintf("%.2f s of utime+stime in %.1f s; %.0f us per append",
		r.cpu().Seconds(), r.wall().Seconds(), r.cpu().Seconds()*1e6/float64(r.dAppends)))
	add("daemon open descriptors, max", fmt.Sprint(r.maxFDs), fmt.Sprintf("/proc/%d/fd counted %d times (every %v); %d before the sessions existed, %d after the warm-up, %d after the window",
		f.pid, r.samples, fleetSample, f.idleFDs, r.before.fds, r.after.fds))
	if r.memOK {
		add("daemon RSS / peak since start, MiB", fmt.Sprintf("%.1f / %.1f", float64(r.rss)/(1<<20), float64(r.hwm)/(1<<20)), "")
	}
	return tb
}

func (f *fleetRun) checks(r *fleetResult) []harness.Check {
	t := r.t
	keep := harness.NewCheck(fmt.Sprintf("keeps up: achieved >= %.0f%% of offered", fleetKeepUpPct), t.achieved/t.offered*100, fleetKeepUpPct, "%", true)
	keep.Note = fmt.Sprintf("%.0f of %.0f entries/s", t.achieved, t.offered)
	backlog := harness.NewCheck("keeps up: no backlog 1 s after the window", float64(t.backlog), fleetBacklogLimit, "batches", false)
	backlog.Note = fmt.Sprintf("last acknowledgement %.1f ms after the window", t.drain.Seconds()*1e3)
	p99 := harness.NewCheck(fmt.Sprintf("p99 append latency <= %.0f ms", fleetP99MS), t.latency.P99/1e3, fleetP99MS, "ms", false)
	p99.Note = fmt.Sprintf("p50 %s ms, max %s ms", ms(t.latency.P50), ms(t.latency.Max))
	grouped := harness.NewCheck(fmt.Sprintf("appends per fsync >= %.0f", fleetPerSync), r.perSync(), fleetPerSync, "appends", true)
	grouped.Note = fmt.Sprintf("Status: %d appends, %d journal syncs", r.dAppends, r.dSyncs)
	cpuc := harness.NewCheck(fmt.Sprintf("daemon CPU <= %.0f%% of one core", fleetCPUPct), r.cpuPct(), fleetCPUPct, "%", false)
	cpuc.Note = fmt.Sprintf("%.2f s in %.1f s", r.cpu().Seconds(), r.wall().Seconds())
	fds := harness.NewCheck(fmt.Sprintf("open file descriptors <= %d (gRPC's included)", fleetFDs), float64(r.maxFDs), fleetFDs, "fds", false)
	fds.Note = fmt.Sprintf("max of %d samples; %d connections; %d with no session", r.samples, f.nConns, f.idleFDs)
	return []harness.Check{keep, backlog, p99, grouped, cpuc, fds}
}

func (f *fleetRun) notes(verified string) []string {
	plan := f.plan
	return []string{
		fmt.Sprintf("Load: %d sessions in one project; each, at its own phase (uniform in the first second), appends a batch of %d entries of %d B (one Append call) every %v for %d rounds, on its own goroutine, and waits for the acknowledgement before its next batch (a late batch is sent at once). Open loop: offered = the entries due in the window over its length; achieved = the entries acknowledged over the time from its opening to the later of its end and the last acknowledgement (a daemon that ends X s late reaches offered x window / (window + X)); backlog = batches still unacknowledged %v after it closed.",
			plan.sessions, plan.batch, fleetEntry, plan.period, plan.rounds, plan.period),
		fmt.Sprintf("The sessions share %d gRPC connections (Go client, AppendStream streams), session i on connection i mod %d, as agents run by a few harness processes would: every connection is a descriptor in the daemon, so one per session would count 1,000 descriptors that are the clients', not sessiond's.", f.nConns, f.nConns),
		"Warm-up, untimed: each session appended one batch and was flushed before the window, so the window sees running agents, not session creation. sessiond ran with its default flags (entries compacted into their transcripts within 30 s, writers retired after 30 s idle).",
		fmt.Sprintf("Counters: Status deltas over the window (appends, entries_stored, journal_syncs, compactions); CPU = utime+stime of /proc/<pid>/stat over the same interval; descriptors = entries of /proc/<pid>/fd, counted every %v over the window.", fleetSample),
		"Verified: " + verified + ".",
	}
}
