package recovery

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// report fills sc's table, targets and notes.
func (r *recoveryRun) report(sc *harness.Scenario) {
	seqMBps := (r.seq1.mbps() + r.seq2.mbps()) / 2
	full := r.table(sc, seqMBps)
	recMBps := mbPerSec(r.logBytes, r.recTime)
	ch := harness.NewCheck("recovery to serving >= 50% of sequential read", recMBps/seqMBps*100, 50, "%", true)
	ch.Note = fmt.Sprintf("%.0f MB/s vs %.0f MB/s (mean of two cold reads of one %.0f MB file), to serving with the whole log read; every transcript current after %.2f s: %s",
		recMBps, seqMBps, float64(r.logBytes)/1e6, r.replayTime.Seconds(), full[5])
	// The official readers see the canonical files only: until the
	// replay ends they read stale transcripts, so that time is judged
	// too.
	curMBps := mbPerSec(r.logBytes, r.replayTime)
	cur := harness.NewCheck("recovery to every transcript current >= 50% of sequential read", curMBps/seqMBps*100, 50, "%", true)
	cur.Note = fmt.Sprintf("%.0f MB/s vs %.0f MB/s: exec to the Status showing replay_pending 0 in %.2f s (serving after %.2f s)",
		curMBps, seqMBps, r.replayTime.Seconds(), r.recTime.Seconds())
	sc.Checks = append(sc.Checks, ch, cur)
	sc.Notes = append(sc.Notes, r.notes()...)
}

// table fills sc's table and returns the row of the time to every
// transcript current.
func (r *recoveryRun) table(sc *harness.Scenario, seqMBps float64) []string {
	pct := func(v float64) string { return fmt.Sprintf("%.0f%%", v/seqMBps*100) }
	row := func(what string, n int64, files int, d time.Duration) []string {
		v := mbPerSec(n, d)
		return []string{what, fmt.Sprintf("%.1f", float64(n)/1e6), strconv.Itoa(files), fmt.Sprintf("%.3f", d.Seconds()),
			fmt.Sprintf("%.0f", v), pct(v)}
	}
	nsegs := len(r.segs)
	fill := row(fmt.Sprintf("append phase (info): %d clients, %d KiB batches", recoveryClients, recoveryBatchBytes>>10), int64(r.sent), r.nSessions, r.fillTime)
	fill[5] = "" // writes, not comparable with a read
	// Recovery writes every byte it replays into a canonical file and
	// syncs it, so the disk's write speed bounds it too: shown for that.
	wrow := row("write + fsync one file of that size (info: recovery rewrites every byte)", r.logBytes, 1, r.writeTime)
	wrow[5] = ""
	sc.Table = &harness.Table{Columns: []string{"run", "MB", "files", "seconds", "MB/s", "of seq. read"}}
	sc.Table.Rows = append(sc.Table.Rows,
		row("sequential read, one file, cold (before)", r.seq1.bytes, 1, r.seq1.elapsed),
		row("sequential read, one file, cold (after)", r.seq2.bytes, 1, r.seq2.elapsed),
		row(fmt.Sprintf("read the %d log segments one after the other, cold", nsegs), r.files.bytes, r.files.files, r.files.elapsed),
		row("sessiond recovery: exec -> serving, the whole log read (Status answers)", r.logBytes, nsegs, r.recTime))
	if r.logReadOK {
		sc.Table.Rows = append(sc.Table.Rows, row("  of which exec -> the log read (journal.Open; sessiond's log)", r.logBytes, nsegs, r.logRead))
	}
	full := row("exec -> every transcript current (replay, while serving; info)", r.logBytes, nsegs, r.replayTime)
	sc.Table.Rows = append(sc.Table.Rows, full)
	if r.replayedOK {
		sc.Table.Rows = append(sc.Table.Rows, row("  of which the replay (sessiond's log, info)", r.logBytes, nsegs, r.replayed.took))
	}
	sc.Table.Rows = append(sc.Table.Rows, wrow, fill)
	return full
}

func (r *recoveryRun) notes() []string {
	cpuNote := fmt.Sprintf("sessiond's CPU time (utime+stime): unknown (%v, %v).", r.recCPUErr, r.replayCPUErr)
	if r.recCPUErr == nil && r.replayCPUErr == nil {
		cpuNote = fmt.Sprintf("sessiond's CPU time (utime+stime) from exec to serving: %.2f s in %.2f s of wall time; to every transcript current: %.2f s in %.2f s (2 cores).",
			r.recCPU.Seconds(), r.recTime.Seconds(), r.replayCPU.Seconds(), r.replayTime.Seconds())
	}
	return []string{
		fmt.Sprintf("Sizes: %d sessions in one project, entries drawn from dist:agent (mean ~7 KiB, up to 1 MiB; the last one cut to fit) until each session holds %d bytes; %d entries, %.1f MB of entries, all in one write-ahead log of %d segments, %.1f MB (sessiond's journal_bytes counter, entries appended to the log: %.1f MB); no per-session journals.",
			r.nSessions, r.perSession, r.sentEntries, float64(r.sent)/1e6, len(r.segs), float64(r.logBytes)/1e6, float64(r.journalCounter)/1e6),
		fmt.Sprintf("sessiond ran with --idle-compact 1h --idle-retire 1h --min-compact-bytes %d --journal-max-size %d (the log's bound far above its size, so no session was compacted to free its oldest segment), so nothing was compacted before the SIGKILL (Status: 0 compactions) and every segment written was still there; after the restart, sessiond's log says it read %d bytes of log holding %d sessions (the bytes evicted), and recovered_sessions was %d.",
			int64(recoveryNoCompact), int64(recoveryNoCompact), r.checked.bytes, r.checked.journals, r.nSessions),
		"Cold: every segment and the baseline file were fsynced, then dropped from the page cache with posix_fadvise(POSIX_FADV_DONTNEED) (no drop_caches: the machine is shared); dentries and inodes stay cached, and the virtual disk's host may cache too, equally for every row.",
		fmt.Sprintf("Baselines read with %d MiB read() calls; the segments are read in recovery's order (by seq). Recovery time is exec of sessiond to its first answered Status, so it includes process start. Before it serves, sessiond reads the log (journal.Open, in writer.New): every segment once, in order, every record checked against its checksum, a torn tail cut, a damaged segment copied aside; it rebuilds each transcript's current stream and starts a new segment for appends. It then lists the sessions whose entries the log holds (%.1f ms here, the \"checked journals\" line; per-session journals found beside the log would be imported then: none here) and serves the entries from the log. The \"exec -> the log read\" row is the time of that line less its took, from exec (ms resolution). The replay into the canonical files (the entries read back from the segments and written after the transcript's content into a temp file, fsync, a compaction marker in the log, rename, folder fsync, then a new stream bound in the log) runs while it serves, a few sessions at a time; the full row is exec to the Status that shows replay_pending 0.",
			recoveryReadBuf>>20, float64(r.checked.took)/1e6),
		cpuNote,
		"Verified: " + r.verified + ".",
	}
}
