package mirror

import "time"

// Status is how the mirror stands.
type Status struct {
	Target    string
	Connected bool
	// EntriesBehind and BytesBehind: what the local transcripts hold that
	// PostgreSQL does not yet, as far as the mirror knows (a transcript
	// not compared with its cursor yet counts the entries acknowledged
	// since start); OldestBehind: since when the transcript furthest
	// behind has been (zero: none is).
	EntriesBehind uint64
	BytesBehind   uint64
	OldestBehind  time.Time
	// Transcripts: transcripts whose cursor covers all they hold;
	// Unchecked: local transcripts not compared with PostgreSQL since
	// start, or since the writer told that their lines may have moved
	// (their number may be the same: EntriesBehind cannot show it), or
	// that the session was deleted or restored or a sidecar written.
	Transcripts uint64
	Unchecked   uint64
	// Listing: the local transcripts are still being listed at start, so
	// Unchecked is not complete yet.
	Listing bool
	// RowsWritten: rows written since start.
	RowsWritten uint64
	LastError   string
	LastErrorAt time.Time
	// MachineID is the lease holder this sessiond writes as; Leases the
	// sessions it holds; Fenced the sessions another machine took over
	// (each says by whom and until when).
	MachineID string
	Leases    uint64
	Fenced    []string
}

// Errors counts the errors the mirror met since start (a lost
// connection, a failed transaction), each try once: the metric
// sessiond_mirror_errors_total.
func (mr *Mirror) Errors() uint64 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.errs
}

// Status reports the mirror's state.
func (mr *Mirror) Status() Status {
	// The leases first: a fencing is recorded as the last error before
	// the leases list it, so a status that shows one shows the other.
	held, fenced := mr.leases.Status()
	mr.mu.Lock()
	defer mr.mu.Unlock()
	st := Status{Target: mr.Target(), Connected: mr.connected, RowsWritten: mr.rows, LastError: mr.lastErr, LastErrorAt: mr.lastErrAt,
		Listing: !mr.listed, MachineID: mr.cfg.MachineID, Leases: held, Fenced: fenced}
	for _, ts := range mr.keys {
		if !ts.checked || ts.moved != ts.movedChecked || ts.asked != ts.answered {
			st.Unchecked++
		}
		var behind uint64
		switch {
		case ts.known && ts.localKnown && ts.local > ts.cur.entries:
			behind = ts.local - ts.cur.entries
			if b := ts.localBytes - int64(ts.cur.bytes); b > 0 {
				st.BytesBehind += uint64(b)
			}
		case !ts.known:
			behind = ts.added
		}
		st.EntriesBehind += behind
		if since := ts.lag.oldest(); behind > 0 && !since.IsZero() && (st.OldestBehind.IsZero() || since.Before(st.OldestBehind)) {
			st.OldestBehind = since
		}
		if behind == 0 && ts.checked && ts.known && ts.cur.exists {
			st.Transcripts++
		}
	}
	return st
}
