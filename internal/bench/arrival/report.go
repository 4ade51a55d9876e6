package arrival

import (
	"fmt"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/journal"
)

const mib = 1 << 20

func ms(us float64) string { return fmt.Sprintf("%.2f", us/1e3) }

// addRows puts v's figures in the scenario's table.
func addRows(sc *harness.Scenario, v variant, m *measured) {
	add := func(what, value, detail string) {
		sc.Table.Rows = append(sc.Table.Rows, []string{v.label, what, value, detail})
	}
	add("appends/s: achieved / offered", fmt.Sprintf("%.1f / %.1f", m.achieved(), m.offered), keptUp(v, m))
	add("append latency p50 / p99 / max, ms", fmt.Sprintf("%s / %s / %s", ms(m.latency.P50), ms(m.latency.P99), ms(m.latency.Max)),
		fmt.Sprintf("%d calls of %d entries, from the call to its acknowledgement", m.calls, batchEntries))
	add("daemon CPU, % of one core", fmt.Sprintf("%.1f", m.cpuPct()), fmt.Sprintf("%.2f s of utime+stime in %.1f s; the bench process (the load) %.1f %% of one core",
		(m.after.cpu-m.before.cpu).Seconds(), m.wall().Seconds(), m.selfPct()))
	add("daemon descriptors, max / of them deleted files", fmt.Sprintf("%d / %d", m.fdMax, m.fdDel),
		fmt.Sprintf("/proc/<pid>/fd read %d times (every %v); %d / %d before the window", m.fdSamples, fdEvery, m.before.fds, m.before.deleted))
	if v.floor {
		add("bytes written / bytes appended", fmt.Sprintf("%.2f", m.writeRatio()), fmt.Sprintf("write_bytes of /proc/<pid>/io: %.1f MiB for %.1f MiB appended",
			float64(m.after.writeBytes-m.before.writeBytes)/mib, float64(m.appended)/mib))
		return
	}
	add("compactions/s", fmt.Sprintf("%.1f", m.compactionsPerSec()), fmt.Sprintf("Status compactions: %d in the window; journal syncs %d (%.1f appends per sync)",
		m.after.compactions-m.before.compactions, m.after.syncs-m.before.syncs, float64(m.calls)/float64(max(1, m.after.syncs-m.before.syncs))))
	add("bytes written / bytes appended", fmt.Sprintf("%.2f", m.writeRatio()), fmt.Sprintf("write_bytes of /proc/<pid>/io: %.1f MiB for %.1f MiB appended; of them, as sessiond counts its writes: journal %.1f MiB, compactions %.1f MiB (the rest: pages rewritten, the ledger, sidecars)",
		float64(m.after.writeBytes-m.before.writeBytes)/mib, float64(m.appended)/mib,
		float64(m.after.journalBytes-m.before.journalBytes)/mib, float64(m.after.compactedBytes-m.before.compactedBytes)/mib))
	add("transcript staleness max / p99, s", fmt.Sprintf("%.2f / %.2f", m.stale.max, m.stale.p99),
		fmt.Sprintf("%d entries of %d sessions watched; %d never found", m.stale.entries, min(watchedSessions, v.sessions), m.stale.unseen))
	if v.memory {
		perSession := float64(m.after.rss-idleRSS(m)) / float64(m.sessions)
		add("daemon RSS / peak, MiB", fmt.Sprintf("%.1f / %.1f", float64(m.after.rss)/mib, float64(m.after.hwm)/mib),
			fmt.Sprintf("%.1f MiB before any session existed", float64(idleRSS(m))/mib))
		add("RSS per live session, KiB", fmt.Sprintf("%.1f", perSession/1024), fmt.Sprintf("(RSS after the window - RSS before any session) / %d sessions", m.sessions))
	}
}

// idleRSS is the daemon's RSS before the run's sessions existed.
func idleRSS(m *measured) int64 { return m.idle.rss }

// keptUp says whether the daemon answered the agents as fast as they
// asked (each waits for its answer, so a slow daemon lowers the rate).
func keptUp(v variant, m *measured) string {
	if m.achieved() >= 0.9*m.offered {
		return fmt.Sprintf("%d sessions, think time exponential of mean %v; kept up", v.sessions, v.think)
	}
	return fmt.Sprintf("%d sessions, think time exponential of mean %v; this machine kept up with %.0f appends/s, %.0f%% of the %.0f offered",
		v.sessions, v.think, m.achieved(), m.achieved()/m.offered*100, m.offered)
}

// checks judges v's figures against the targets.
func checks(v variant, m *measured) []harness.Check {
	if !v.judged {
		return nil
	}
	var cs []harness.Check
	at := func(c harness.Check, note string) {
		c.Target = v.label + ": " + c.Target
		c.Note = note
		cs = append(cs, c)
	}
	if v.cpu {
		at(harness.NewCheck(fmt.Sprintf("daemon CPU <= %.0f%% of one core", cpuPct), m.cpuPct(), cpuPct, "%", false),
			fmt.Sprintf("%.2f s in %.1f s", (m.after.cpu-m.before.cpu).Seconds(), m.wall().Seconds()))
	}
	at(harness.NewCheck(fmt.Sprintf("descriptors <= %d", fdLimit), float64(m.fdMax), fdLimit, "fds", false),
		fmt.Sprintf("%d of them deleted files, at most", m.fdDel))
	at(harness.NewCheck(fmt.Sprintf("p99 append latency <= %.0f ms", p99MS), m.latency.P99/1e3, p99MS, "ms", false),
		fmt.Sprintf("p50 %s ms", ms(m.latency.P50)))
	at(harness.NewCheck(fmt.Sprintf("bytes written <= %.0fx appended", writeAmp), m.writeRatio(), writeAmp, "x", false),
		fmt.Sprintf("%.1f compactions/s", m.compactionsPerSec()))
	at(harness.NewCheck(fmt.Sprintf("transcript staleness <= %.0f s", staleLimitSecs), m.stale.max, staleLimitSecs, "s", false),
		fmt.Sprintf("p99 %.2f s; %d entries never found", m.stale.p99, m.stale.unseen))
	return cs
}

// notes explain the method under the table.
func notes(vs []variant, verify bool) []string {
	v := vs[0]
	verified := "not asked (--verify)"
	if verify {
		verified = "yes: after each run every session was flushed and its transcript held exactly the entries acknowledged to it, whole lines"
	}
	return []string{
		fmt.Sprintf("Load: each session, on its own goroutine, thinks for a time drawn from an exponential distribution (mean 1 s or 5 s), appends a batch of %d entries (one Append call) and waits for the acknowledgement before thinking again, for %.0f s. So sessions go idle at random, for longer than a second about a third of the time at mean 1 s, unlike the fixed-period fleet. offered = sessions / mean think time (what instant answers would allow); achieved = calls acknowledged over the window.", batchEntries, v.window.Seconds()),
		fmt.Sprintf("Each run on a sessiond of its own with its default flags, %d gRPC connections shared by the sessions (as in the fleet); warm-up, untimed: one batch per session, then a flush. dist:agent puts an entry of 256 KiB-1 MiB in about 1%% of the batches: its run is info, the targets are judged on the 1 KiB runs (CPU at mean 1 s only).", conns),
		fmt.Sprintf("Counters over the window: CPU = utime+stime of /proc/<pid>/stat; descriptors = entries of /proc/<pid>/fd read every %v, a descriptor being a deleted file when its link ends in \" (deleted)\"; compactions/s from Status compactions; bytes written = write_bytes of /proc/<pid>/io (the journal and the transcripts), over the bytes of the entries acknowledged in the window (newlines included).", fdEvery),
		fmt.Sprintf("Staleness: the first %d sessions' transcripts are read every %v (new bytes only; again from the start when a compaction replaced the file); an entry's staleness is the time from its acknowledgement to the first read that finds it; after the window the reads go on until every entry is found or %.0f s pass, and an entry never found counts with its age then. Bound: %.0f s (sessiond starts the compaction of an acknowledged entry within --compact-within, 30 s, of it for files up to 4 MiB; 5 s more for the compaction's own time and the reads).", watchedSessions, watchEvery, staleLimitSecs+10, staleLimitSecs),
		fmt.Sprintf("Live sessions: %d sessions at a mean think time of 1 s offer about %d appends/s; the row says how many this machine kept up with. RSS per live session = (VmRSS after the window - VmRSS before any session existed) / sessions.", vs[3].sessions, vs[3].sessions),
		fmt.Sprintf("Floors (baselines, same run): the mean-1 s load (and the mean-5 s one), the same %d connections and the same client, against an echo server of this bench instead of sessiond: it appends each request's lines to one file, writing and fdatasyncing together every request that arrived while the last sync ran (group commit) and answering as sessiond does: with no wait (the least latency), and with the first request of each group waiting %v for others, sessiond's default --commit-delay (fewer syncs, less CPU). It is what any gRPC daemon acknowledging only durable appends pays on this machine, with nothing of sessiond's own work (sessions, validation, listings, compactions); its \"daemon\" rows are the echo server's. The last floor is the same echo server keeping nothing: the gRPC round trips alone.", conns, journal.DefaultCommitDelay),
		"Verified: " + verified + ".",
	}
}

// aboveFloor says what sessiond's CPU per append is beyond the floor's
// with the same commit delay, both measured in this run: the figure that
// tells sessiond's own work from what the machine's speed of the hour
// does to both.
func aboveFloor(d, floor *measured) string {
	if d == nil || floor == nil || d.calls == 0 || floor.calls == 0 {
		return ""
	}
	perCall := func(m *measured) float64 {
		return (m.after.cpu - m.before.cpu).Seconds() * 1e6 / float64(m.calls)
	}
	us, fus := perCall(d), perCall(floor)
	return fmt.Sprintf("sessiond's own CPU at mean 1 s, 1 KiB: %.0f us per append of %d entries beyond the floor with the same %v commit wait (sessiond %.0f us, the floor %.0f us, both in this run)",
		us-fus, batchEntries, journal.DefaultCommitDelay, us, fus)
}
