package compaction

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mib(b uint64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}

func secondsList(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(parts, " / ")
}

// fillCompactionScenario turns the measurements into the table, checks
// and notes.
func fillCompactionScenario(sc *harness.Scenario, res *compactionResult, lifeN int) {
	l, o := res.Life, res.One
	app := float64(l.Appended)
	mb := func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	x := func(b uint64) string { return fmt.Sprintf("%.2fx", float64(b)/app) }
	t := &harness.Table{Columns: []string{"measurement", "value", "ratio"}}
	row := func(cells ...string) { t.Rows = append(t.Rows, cells) }
	row("life: bytes appended (lines + newline)", mb(l.Appended), "1.00x")
	row("life: written to files (wchar - socket)", mb(l.FileBytes()), x(l.FileBytes()))
	row("life: wchar (all write syscalls)", mb(l.WChar), x(l.WChar))
	row("life: of which written to the client socket", mb(l.SocketBytes), x(l.SocketBytes))
	row("life: write_bytes (dirtied for storage)", mb(l.WriteBytes), x(l.WriteBytes))
	row("life: cancelled_write_bytes", mb(l.CancelledBytes), x(l.CancelledBytes))
	row("life: Status journal_bytes + compacted_bytes", mb(l.JournalBytes+l.CompactedBytes), x(l.JournalBytes+l.CompactedBytes))
	row("life: Status journal_bytes (entries only)", mb(l.JournalBytes), x(l.JournalBytes))
	row("life: Status compacted_bytes", mb(l.CompactedBytes), x(l.CompactedBytes))
	row("life: compactions (final Flush included)", strconv.FormatUint(l.Compactions, 10), "")
	row("life: entries / Append calls", fmt.Sprintf("%d / %d", l.Entries, l.Appends), "")
	row("life: Append latency p50 / p99 / max", fmt.Sprintf("%.2f / %.2f / %.1f ms", l.Latency.P50/1e3, l.Latency.P99/1e3, l.Latency.Max/1e3), "")
	row("life: wall time / final Flush / sessiond CPU", fmt.Sprintf("%.1f s / %.3f s / %.1f s", l.Seconds, l.FlushSeconds, l.CPUSeconds), "")

	base := median(o.CopyCFR)
	baseName := "copy+fsync (copy_file_range)"
	if rw := median(o.CopyRW); rw > 0 && rw < base {
		base, baseName = rw, "copy+fsync (read/write 1 MiB)"
	}
	rel := func(xs []float64) string {
		if base <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", median(xs)/base)
	}
	sec := func(xs []float64) string { return fmt.Sprintf("%.3f s (%s)", median(xs), secondsList(xs)) }
	row("one: session before / journal tail per compaction", fmt.Sprintf("%s / %d entries, %s", mib(o.SessionBytes), o.TailEntries, mib(o.TailBytes)), "")
	row("one: Flush = one compaction, median (each)", sec(o.Flush), rel(o.Flush))
	row("one: copy+fsync, read/write 1 MiB", sec(o.CopyRW), rel(o.CopyRW))
	row("one: copy+fsync, copy_file_range", sec(o.CopyCFR), rel(o.CopyCFR))
	row("one: copy+fsync+rename+dir fsync (copy_file_range)", sec(o.CopyCFRReplace), rel(o.CopyCFRReplace))
	trickle := func(name string, tr trickleResult) {
		ratio := ""
		if tr.Appended > 0 {
			ratio = fmt.Sprintf("%.1fx", float64(tr.FileBytes)/float64(tr.Appended))
		}
		row(fmt.Sprintf("idle: trickle into a %s session (%s): %d turns of %d entries", mib(tr.SessionBytes), name, tr.Turns, tr.EntriesPerTurn),
			fmt.Sprintf("%s written for %s appended, %d compactions", mb(tr.FileBytes), mb(tr.Appended), tr.Compactions), ratio)
	}
	trickle("below the 4 MiB idle floor", res.Idle.Small)
	trickle("until one compaction", res.Idle.Large)
	row("session at the end: entries / bytes", fmt.Sprintf("%d / %d", res.FinalEntries, res.FinalBytes), "")
	sc.Table = t

	amp := harness.NewCheck("life: written to files <= 3x appended", float64(l.FileBytes())/app, 3, "x", false)
	amp.Note = fmt.Sprintf("raw wchar %.2fx incl. %.1f MB to the socket; write_bytes %.2fx; Status journal+compacted %.2fx; %d compactions",
		float64(l.WChar)/app, float64(l.SocketBytes)/1e6, float64(l.WriteBytes)/app, float64(l.JournalBytes+l.CompactedBytes)/app, l.Compactions)
	one := harness.NewCheck("one compaction <= 2x copy+fsync", 0, 2, "x", false)
	if base > 0 {
		one = harness.NewCheck("one compaction <= 2x copy+fsync", median(o.Flush)/base, 2, "x", false)
	}
	one.Note = fmt.Sprintf("medians of %d: Flush %.3f s vs %s %.3f s, files of %s to %s", len(o.Flush), median(o.Flush), baseName, base,
		mib(o.SessionBytes+o.TailBytes), mib(o.SessionBytes+uint64(len(o.Flush))*o.TailBytes))
	sc.Checks = []harness.Check{amp, one}

	sc.Notes = []string{
		fmt.Sprintf("life: one session, %d entries of 1 KiB (1025 B lines), %d per Append, sent one call after the other by one client over gRPC, "+
			"then Flush; sessiond with its default flags (compaction when the journal reaches the file's size, 1 MiB at least)", lifeN, compLifeBatch),
		"life: bytes written are deltas of the daemon's /proc/<pid>/io over the phase; wchar counts socket writes too, so the bytes the client " +
			"received on its connection (the only one) are subtracted; write_bytes counts page-cache pages dirtied, so a journal page rewritten by " +
			"successive group commits counts each time",
		fmt.Sprintf("one: the same session grown to %s in %s Appends and flushed; then %d rounds of: a journal tail of %s appended, the file read once "+
			"(page cache), Flush timed over gRPC; the file read again and copied to a new file in the same folder + fsync (read/write, then "+
			"copy_file_range renamed over the first copy + dir fsync); baseline = the faster copy+fsync, medians compared",
			mib(o.SessionBytes), mib(compPadBatch), compRounds, mib(o.TailBytes)),
		fmt.Sprintf("idle (info, no target): sessiond restarted with --idle-compact %v --compact-within %v; turns of 1 KiB entries, one Append per turn, each followed by a %v pause, "+
			"so every turn is compacted: what a --compact-within shorter than an agent's pauses costs (by default 30 s, longer than most); written = wchar - socket over the turns and the compactions they caused",
			res.Idle.IdleCompact, res.Idle.IdleCompact, res.Idle.Pause),
	}
}
