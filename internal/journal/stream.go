package journal

import (
	"fmt"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// Span is where one entry's bytes lie in the journal.
type Span struct {
	Seg uint64 // segment seq
	Off int64  // offset of the entry's frame in the segment
	Len int    // the entry's length
}

// Batch is one committed client batch.
type Batch struct {
	Seq     uint64
	Entries []Span
	// Meta is the batch's Meta record, nil when it had none.
	Meta []byte
}

// Epoch is what the journal holds for one transcript: its current stream.
type Epoch struct {
	Key     layout.Key
	Stream  uint64
	Base    Fingerprint // the canonical file when the stream began
	Batches []Batch     // committed, in order
	// Compacted is the stream's last marker, nil if none; batches after
	// it are still listed in Batches.
	Compacted *Fingerprint
	// Modified is when the stream last had a record logged (for a
	// recovered stream: its segment's modification time).
	Modified time.Time
}

// epoch is the journal's record of a stream, guarded by Log.mu.
type epoch struct {
	Epoch
	bindSeg uint64
	seq     uint64
	segs    map[uint64]struct{}
	// bytes adds up the entries of Batches, for Backlog.
	bytes int64
}

// addBatch records a committed batch. Called with l.mu held (or by
// recovery, alone).
func (e *epoch) addBatch(b Batch) {
	e.Batches = append(e.Batches, b)
	for _, sp := range b.Entries {
		e.bytes += int64(sp.Len)
	}
}

// hold adds segment seq to what the stream holds. Called with l.mu held.
func (l *Log) hold(e *epoch, seq uint64) {
	if _, ok := e.segs[seq]; ok {
		return
	}
	if s := l.segmentLocked(seq); s != nil {
		e.segs[seq] = struct{}{}
		s.refs++
	}
}

// letGo drops every segment the stream holds. Called with l.mu held.
func (l *Log) letGo(e *epoch) {
	for seq := range e.segs {
		if s := l.segmentLocked(seq); s != nil {
			s.refs--
		}
	}
	e.segs = nil
}

// Epoch returns a copy of what the journal holds for key, or false when it has
// nothing (no stream, or one with neither batches nor marker).
func (l *Log) Epoch(key layout.Key) (Epoch, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.epochs[key]
	if !ok {
		return Epoch{}, false
	}
	c := e.Epoch
	c.Batches = e.Batches[:len(e.Batches):len(e.Batches)]
	return c, true
}

// Pending lists the transcripts whose current stream has batches: after
// Open, those recovery must look at.
func (l *Log) Pending() []layout.Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []layout.Key
	for k, e := range l.epochs {
		if len(e.Batches) > 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// Backlog is what the journal holds that is not in the transcripts yet: the
// transcripts whose current stream has batches and no Compacted marker
// (one with a marker was compacted a moment ago, its next stream about to
// begin), and the bytes of those batches' entries. The official readers
// lag behind sessiond by that much.
func (l *Log) Backlog() (transcripts int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.epochs {
		if len(e.Batches) > 0 && e.Compacted == nil {
			transcripts++
			bytes += e.bytes
		}
	}
	return transcripts, bytes
}

// Behind lists the transcripts Backlog counts, each with its current
// stream: StillBehind tells later whether those entries have reached
// their transcripts since.
func (l *Log) Behind() map[layout.Key]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[layout.Key]uint64
	for k, e := range l.epochs {
		if len(e.Batches) > 0 && e.Compacted == nil {
			if out == nil {
				out = map[layout.Key]uint64{}
			}
			out[k] = e.Stream
		}
	}
	return out
}

// StillBehind reports whether key's stream (as Behind gave it) still holds
// entries that are not in the transcript: no compaction ended it since.
func (l *Log) StillBehind(key layout.Key, stream uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.epochs[key]
	return e != nil && e.Stream == stream && len(e.Batches) > 0 && e.Compacted == nil
}

// Stream is one transcript's handle on the journal, used by that transcript's
// writer alone.
type Stream struct {
	l   *Log
	key layout.Key
	// id is the stream this handle last bound or found: Close forgets
	// only that one, never a newer stream of the transcript another
	// handle began.
	id uint64
	// lazy is a Bind not written yet: it goes in the same write as the
	// stream's next request.
	lazy *bindRec
}

// Stream returns key's handle. There must be at most one per key at a
// time (the session writer's).
func (l *Log) Stream(key layout.Key) *Stream {
	s := &Stream{l: l, key: key}
	l.mu.Lock()
	if e := l.epochs[key]; e != nil {
		s.id = e.Stream
	}
	l.mu.Unlock()
	return s
}

// Close lets the handle go. A stream with nothing logged is forgotten
// (its Bind still supersedes older streams in the files until they go);
// one with batches stays, for recovery or the next writer.
func (s *Stream) Close() {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if e := s.l.epochs[s.key]; e != nil && e.Stream == s.id && len(e.Batches) == 0 && e.Compacted == nil {
		delete(s.l.epochs, s.key)
	}
	s.lazy = nil
}

// Begin starts a new stream for the transcript, whose canonical file is at
// base now. With lazy, the Bind waits for the stream's next Append and
// costs no sync of its own (a new transcript); otherwise it is durable when
// Begin returns, and from then on recovery ignores the stream it replaces,
// whose segments may go (after a compaction).
func (s *Stream) Begin(base Fingerprint, lazy bool) error {
	b := &bindRec{ProjectKey: s.key.ProjectKey, SessionID: s.key.SessionID, Subpath: s.key.Subpath,
		BaseSize: base.Size, BaseTail: base.Tail}
	if _, err := encodeBind(*b); err != nil {
		return err
	}
	if lazy {
		s.lazy = b
		return nil
	}
	s.lazy = b
	r := &request{st: s, done: make(chan struct{})}
	return s.l.submit(r)
}

// Append writes, for each batch in order, its entries, its meta (when
// metas[i] is not nil) and a commit, all in the commit group's one write,
// and returns once they are durable, with the spans of every entry. The
// stream must have begun (Begin) or have a recovered epoch.
func (s *Stream) Append(batches [][][]byte, metas [][]byte) ([][]Span, error) {
	if len(batches) == 0 {
		return nil, nil
	}
	return s.AppendMarked(batches, metas, nil)
}

// AppendMarked is Append followed, in the same write, by a Compacted
// marker when marker is not nil, so that the batches and the marker become
// durable together or not at all.
func (s *Stream) AppendMarked(batches [][][]byte, metas [][]byte, marker *Fingerprint) ([][]Span, error) {
	if marker != nil && marker.Size < 0 {
		return nil, fmt.Errorf("log: compacted marker size %d is negative: %w", marker.Size, errdefs.ErrInvalidArgument)
	}
	for i, b := range batches {
		for k, e := range b {
			if len(e) > s.l.opt.MaxRecord {
				return nil, fmt.Errorf("log: entry %d of batch %d of %s is %d bytes, over the %d-byte record limit: %w",
					k, i, s.key, len(e), s.l.opt.MaxRecord, errdefs.ErrTooLarge)
			}
		}
		if i < len(metas) && metas[i] != nil && (len(metas[i]) > MaxMeta || len(b) == 0) {
			return nil, fmt.Errorf("log: meta of batch %d of %s is %d bytes for %d entries (at most %d bytes, at least one entry): %w",
				i, s.key, len(metas[i]), len(b), MaxMeta, errdefs.ErrInvalidArgument)
		}
	}
	r := &request{st: s, batches: batches, metas: metas, marker: marker, done: make(chan struct{})}
	if err := s.l.submit(r); err != nil {
		return nil, err
	}
	return r.spans, nil
}

// MarkCompacted makes a Compacted marker for the stream durable.
func (s *Stream) MarkCompacted(m Fingerprint) error {
	if m.Size < 0 {
		return fmt.Errorf("log: compacted marker size %d is negative: %w", m.Size, errdefs.ErrInvalidArgument)
	}
	r := &request{st: s, marker: &m, done: make(chan struct{})}
	return s.l.submit(r)
}

// request is one stream's part of a commit.
type request struct {
	// group, for tests only, makes the committer write these requests
	// (of several streams) in one commit, as it does when they queue
	// behind a sync: a write spanning many transcripts, on demand.
	group   []*request
	st      *Stream
	batches [][][]byte
	metas   [][]byte
	marker  *Fingerprint
	bytes   int64

	spans [][]Span
	err   error
	done  chan struct{}
	// lead tells a queued request's goroutine that it commits next.
	lead chan struct{}
}

func (r *request) meta(i int) []byte {
	if i < len(r.metas) {
		return r.metas[i]
	}
	return nil
}

func (l *Log) submit(r *request) error {
	for _, b := range r.batches {
		for _, e := range b {
			r.bytes += int64(len(e)) + 32
		}
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return fmt.Errorf("log is closed: %w", errdefs.ErrUnavailable)
	}
	l.inflight.Add(1)
	l.mu.Unlock()
	defer l.inflight.Done()
	r.lead = make(chan struct{}, 1)
	if l.enqueue(r) {
		l.lead()
	} else {
		select {
		case <-r.done:
		case <-r.lead:
			l.lead()
		}
	}
	<-r.done
	return r.err
}
