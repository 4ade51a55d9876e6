package torture

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Durations summarises a set of measured times, in milliseconds.
type Durations struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Durations {
	if len(ds) == 0 {
		return Durations{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration {
		// Nearest rank: the smallest value with at least q of the set at
		// or below it.
		i := int(q*float64(len(s))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(s) {
			i = len(s) - 1
		}
		return s[i]
	}
	return Durations{N: len(s), P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(s[len(s)-1])}
}

// Report is the outcome of a run.
type Report struct {
	Mode     string `json:"mode"`
	Seed     uint64 `json:"seed"`
	Cycles   int    `json:"cycles"` // cycles completed
	Clients  int    `json:"clients"`
	Sessions int    `json:"sessions"`
	Dir      string `json:"dir,omitempty"` // kept for inspection

	EntriesSent   uint64 `json:"entries_sent"`
	EntriesAcked  uint64 `json:"entries_acknowledged"`
	BytesAcked    uint64 `json:"bytes_acknowledged"`
	LargestAcked  int    `json:"largest_entry_acknowledged"`
	AppendsOK     uint64 `json:"appends_ok"`
	AppendsFailed uint64 `json:"appends_failed"`
	// Ambiguous counts entries whose Append failed (in flight at the
	// signal): each may be stored at most once. Retried counts those
	// re-sent after the restart (only batches whose entries all carry a
	// uuid, which the daemon deduplicates).
	Ambiguous        uint64            `json:"entries_ambiguous"`
	AmbiguousStored  uint64            `json:"entries_ambiguous_found_stored"`
	Retried          uint64            `json:"entries_retried"`
	Flushes          uint64            `json:"flushes"`
	FlushesFailed    uint64            `json:"flushes_failed"`
	RecoveryKills    int               `json:"recovery_kills"`
	SessionsRotated  int               `json:"sessions_rotated"`
	Verifications    int               `json:"verifications"`
	LinesVerified    uint64            `json:"lines_verified"`
	BytesVerified    uint64            `json:"bytes_verified"`
	ErrorCodes       map[string]uint64 `json:"append_error_codes,omitempty"`
	Recovery         Durations         `json:"recovery"`           // process start to health SERVING
	Replay           Durations         `json:"replay,omitempty"`   // process start to every journal replayed (ModeKill)
	Shutdown         Durations         `json:"shutdown,omitempty"` // SIGTERM to exit (ModeTerm and the final stop)
	DurationSeconds  float64           `json:"duration_seconds"`
	Lost             uint64            `json:"lost"`
	Duplicated       uint64            `json:"duplicated"`
	Torn             uint64            `json:"torn_lines"`
	Unknown          uint64            `json:"unknown_lines"` // whole lines no client sent
	Misplaced        uint64            `json:"misplaced"`     // keys found in another session's file
	TempFilesLeft    uint64            `json:"temp_files_left"`
	Failures         []string          `json:"failures,omitempty"` // the first problems, in words
	failuresDropped  int
	recoveryTimes    []time.Duration
	replayTimes      []time.Duration
	shutdownTimes    []time.Duration
	ambiguousPresent map[string]bool
}

// maxFailures bounds the problems described in words.
const maxFailures = 20

func (r *Report) fail(format string, args ...any) {
	if len(r.Failures) >= maxFailures {
		r.failuresDropped++
		return
	}
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Torn == 0 && r.Unknown == 0 && r.Misplaced == 0 &&
		r.TempFilesLeft == 0 && len(r.Failures) == 0
}

// String is the human-readable report.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "sessiond torture (%s): %s\n", r.Mode, verdict)
	fmt.Fprintf(&b, "  cycles %d, clients %d, sessions %d, seed %d, %.1fs\n", r.Cycles, r.Clients, r.Sessions, r.Seed, r.DurationSeconds)
	fmt.Fprintf(&b, "  entries sent %d, acknowledged %d (%.1f MiB, largest %d bytes), ambiguous %d (found stored %d, retried %d)\n",
		r.EntriesSent, r.EntriesAcked, float64(r.BytesAcked)/(1<<20), r.LargestAcked, r.Ambiguous, r.AmbiguousStored, r.Retried)
	fmt.Fprintf(&b, "  appends ok %d, failed %d %v; flushes %d (failed %d); recovery kills %d; sessions rotated %d\n",
		r.AppendsOK, r.AppendsFailed, r.ErrorCodes, r.Flushes, r.FlushesFailed, r.RecoveryKills, r.SessionsRotated)
	fmt.Fprintf(&b, "  verified %d times: %d lines, %.1f MiB\n", r.Verifications, r.LinesVerified, float64(r.BytesVerified)/(1<<20))
	fmt.Fprintf(&b, "  recovery (start to SERVING): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Recovery.N, r.Recovery.P50, r.Recovery.P99, r.Recovery.Max)
	if r.Replay.N > 0 {
		fmt.Fprintf(&b, "  replay (start to every transcript current): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Replay.N, r.Replay.P50, r.Replay.P99, r.Replay.Max)
	}
	if r.Shutdown.N > 0 {
		fmt.Fprintf(&b, "  shutdown (SIGTERM to exit): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Shutdown.N, r.Shutdown.P50, r.Shutdown.P99, r.Shutdown.Max)
	}
	fmt.Fprintf(&b, "  lost %d, duplicated %d, torn lines %d, unknown lines %d, misplaced %d, temp files left %d\n",
		r.Lost, r.Duplicated, r.Torn, r.Unknown, r.Misplaced, r.TempFilesLeft)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "  FAIL: %s\n", f)
	}
	if r.failuresDropped > 0 {
		fmt.Fprintf(&b, "  ... and %d more problems\n", r.failuresDropped)
	}
	if r.Dir != "" {
		fmt.Fprintf(&b, "  work folder: %s\n", r.Dir)
	}
	return b.String()
}
