package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sessiond/sessiond/internal/trash"
	"github.com/sessiond/sessiond/internal/writer"
)

// Source is what the stats collector reads at each scrape: the session
// writers' counters (the figures Status reports). *writer.Manager is one.
type Source interface {
	Stats() writer.Stats
}

// TrashSource is where the collector reads what the trash holds.
// *trash.Trash is one.
type TrashSource interface {
	Usage() trash.Usage
}

// statsCollector turns a Source's Stats into metrics when scraped, so
// the counters the writers keep anyway cost the appends nothing more.
type statsCollector struct {
	src   Source
	trash TrashSource
	descs []statDesc
}

type statDesc struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*snapshot) (float64, bool) // false: no sample now
}

type snapshot struct {
	st    writer.Stats
	trash trash.Usage
}

// NewStatsCollector collects src's figures: entries, bytes, compactions,
// active sessions, recovery, the disk, the log's retention; and tr's, the
// trash.
func NewStatsCollector(src Source, tr TrashSource) prometheus.Collector {
	c := &statsCollector{src: src, trash: tr}
	counter := func(name, help string, f func(*snapshot) uint64) {
		c.add(name, help, prometheus.CounterValue, func(s *snapshot) (float64, bool) { return float64(f(s)), true })
	}
	gauge := func(name, help string, f func(*snapshot) float64) {
		c.add(name, help, prometheus.GaugeValue, func(s *snapshot) (float64, bool) { return f(s), true })
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	counter("sessiond_appends_total", "Append requests (and AppendStream messages) taken by the session writers.",
		func(s *snapshot) uint64 { return s.st.Appends })
	counter("sessiond_entries_stored_total", "Entries stored: durable in the journal and acknowledged.",
		func(s *snapshot) uint64 { return s.st.EntriesStored })
	counter("sessiond_entries_duplicate_total", "Entries acknowledged without being stored again (a uuid or batch id already stored: a client's retry).",
		func(s *snapshot) uint64 { return s.st.EntriesDuplicate })
	counter("sessiond_stored_bytes_total", "Bytes of the entries stored (their JSONL lines).",
		func(s *snapshot) uint64 { return s.st.JournalBytes })
	counter("sessiond_compactions_total", "Compactions: a session's logged entries moved into its transcript (temp file, fsync, rename).",
		func(s *snapshot) uint64 { return s.st.Compactions })
	counter("sessiond_compacted_bytes_total", "Bytes of the transcripts the compactions wrote.",
		func(s *snapshot) uint64 { return s.st.CompactedBytes })
	counter("sessiond_recovered_sessions_total", "Sessions replayed from the journal into their transcripts since sessiond started.",
		func(s *snapshot) uint64 { return s.st.RecoveredSessions })
	gauge("sessiond_active_sessions", "Session writers open now.",
		func(s *snapshot) float64 { return float64(s.st.ActiveSessions) })
	gauge("sessiond_replay_pending_sessions", "Sessions found in the journal at start whose entries are not in their transcripts yet.",
		func(s *snapshot) float64 { return float64(s.st.ReplayPending) })
	gauge("sessiond_recovery_errors", "Sessions whose recovery failed and is still standing (sessionctl status names them).",
		func(s *snapshot) float64 { return float64(len(s.st.RecoveryErrors)) })
	gauge("sessiond_acknowledged_missing_transcripts", "Transcripts found lacking entries sessiond acknowledged (another program rewrote them; sessionctl repair).",
		func(s *snapshot) float64 { return float64(len(s.st.Missing)) })
	gauge("sessiond_transcript_lag_sessions", "Sessions with acknowledged entries not in their transcripts yet (served from the journal meanwhile).",
		func(s *snapshot) float64 { return float64(s.st.Disk.LagSessions) })
	gauge("sessiond_transcript_lag_bytes", "Bytes of the acknowledged entries not in their transcripts yet.",
		func(s *snapshot) float64 { return float64(s.st.Disk.LagBytes) })
	gauge("sessiond_compactions_deferred", "Compactions waiting for disk space.",
		func(s *snapshot) float64 { return float64(len(s.st.Disk.Deferred)) })
	gauge("sessiond_ballast_size_bytes", "Size of the disk space reserve (--ballast-size; 0: none kept).",
		func(s *snapshot) float64 { return float64(s.st.Disk.BallastSize) })
	gauge("sessiond_ballast_present", "1 when the reserve file is in place.",
		func(s *snapshot) float64 { return flag(s.st.Disk.BallastPresent) })
	gauge("sessiond_ballast_released", "1 when the reserve was released after the disk filled and is not back yet.",
		func(s *snapshot) float64 { return flag(s.st.Disk.BallastReleased) })
	gauge("sessiond_journal_segments", "Segment files of the journal in use.",
		func(s *snapshot) float64 { return float64(s.st.JournalSegments) })
	gauge("sessiond_journal_size_bytes", "Bytes written in the journal's segments in use.",
		func(s *snapshot) float64 { return float64(s.st.JournalSize) })
	gauge("sessiond_journal_retained_segments", "Segments kept after compaction so repair can put back entries another program dropped (--journal-retention).",
		func(s *snapshot) float64 { return float64(s.st.RetainedSegments) })
	gauge("sessiond_journal_retained_bytes", "Bytes of the retained segments.",
		func(s *snapshot) float64 { return float64(s.st.RetainedBytes) })
	c.add("sessiond_journal_oldest_retained_timestamp_seconds", "When the oldest retained segment was let go (Unix time); absent when none is retained.",
		prometheus.GaugeValue, func(s *snapshot) (float64, bool) {
			if s.st.OldestRetained.IsZero() {
				return 0, false
			}
			return float64(s.st.OldestRetained.UnixNano()) / 1e9, true
		})
	gauge("sessiond_trash_copies", "Deleted sessions' copies in the trash.",
		func(s *snapshot) float64 { return float64(s.trash.Copies) })
	gauge("sessiond_trash_bytes", "Bytes of the trash's files (recounted after sessiond's deletes, restores and purges, and at least once a minute when scraped).",
		func(s *snapshot) float64 { return float64(s.trash.Bytes) })
	return c
}

func (c *statsCollector) add(name, help string, typ prometheus.ValueType, f func(*snapshot) (float64, bool)) {
	c.descs = append(c.descs, statDesc{desc: prometheus.NewDesc(name, help, nil, nil), typ: typ, value: f})
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d.desc
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := &snapshot{st: c.src.Stats(), trash: c.trash.Usage()}
	for _, d := range c.descs {
		if v, ok := d.value(s); ok {
			ch <- prometheus.MustNewConstMetric(d.desc, d.typ, v)
		}
	}
}
