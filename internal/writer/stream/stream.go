// Package stream is each session's stream in the journal (package
// journal) as the session writers use it: what one writer appends, reads
// back and marks compacted (Stream), what the journal holds for a session
// as its writer opens (Recovered), and what the manager asks of all of
// them (Journal: which sessions have entries logged, dropping a session's
// entries once compacted, the retained entries repair puts back). It is
// the writers' only user of the journal.
package stream

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/sessionstore"
)

// Span is where a logged entry lies, as Append or Open handed it out:
// what Read and Reader.Entry find it by.
type Span struct {
	Seg uint64
	Off int64
	N   int // the entry's length in bytes
}

// Pos is where the entry lies, as the ledger records it.
func (sp Span) Pos() ledger.Pos { return ledger.Pos{Seg: sp.Seg, Off: sp.Off} }

func toJournal(sp []Span) []journal.Span {
	out := make([]journal.Span, len(sp))
	for i, s := range sp {
		out[i] = journal.Span{Seg: s.Seg, Off: s.Off, Len: s.N}
	}
	return out
}

func fromJournal(sp []journal.Span) []Span {
	out := make([]Span, len(sp))
	for i, s := range sp {
		out[i] = Span{Seg: s.Seg, Off: s.Off, N: s.Len}
	}
	return out
}

// Recovered is what the journal holds for a session when its writer opens.
type Recovered struct {
	Name  string     // for messages
	Owner layout.Key // the session the journal says it belongs to
	// Base is the canonical file as it was when the session's stream
	// began: the entries follow its content.
	Base journal.Fingerprint
	// Compacted is the canonical file the last compaction installed (or
	// was about to), nil if none: when the file has it, every entry
	// logged before is already in it.
	Compacted *journal.Fingerprint
	Entries   []Span   // committed entries, in order
	Foreign   []bool   // for each entry: a line another program appended, rescued
	Metas     [][]byte // committed batches' meta records, in order
	Truncated int64    // bytes of torn tail cut (never acknowledged)
	Size      int64    // bytes of entries logged
}

// Journal is the sessions' streams in the journal, as their writers and
// the manager that runs them see it.
type Journal struct {
	jr *journal.Log
}

// NewJournal returns the Journal of the sessions logged in jr.
func NewJournal(jr *journal.Log) *Journal { return &Journal{jr: jr} }

// Log is the journal itself.
func (ls *Journal) Log() *journal.Log { return ls.jr }

// Close closes the journal.
func (ls *Journal) Close() error { return ls.jr.Close() }

// Open returns key's stream and what the journal holds for it; an error
// matching fs.ErrNotExist means it holds nothing.
func (ls *Journal) Open(key layout.Key) (*Stream, *Recovered, error) {
	e, ok := ls.jr.Epoch(key)
	if !ok {
		return nil, nil, fmt.Errorf("%s has nothing in the journal: %w", key, fs.ErrNotExist)
	}
	r := &Recovered{
		Name:      "the journal's stream of " + key.String(),
		Owner:     e.Key,
		Base:      e.Base,
		Compacted: e.Compacted,
	}
	for _, b := range e.Batches {
		foreign := false
		if b.Meta != nil {
			r.Metas = append(r.Metas, b.Meta)
			foreign = sessionstore.IsForeignMeta(b.Meta)
		}
		for _, sp := range b.Entries {
			r.Entries = append(r.Entries, Span{sp.Seg, sp.Off, sp.Len})
			r.Foreign = append(r.Foreign, foreign)
			r.Size += int64(sp.Len)
		}
	}
	return &Stream{s: ls.jr.Stream(key), ls: ls}, r, nil
}

// Create starts a new stream for key whose entries follow the canonical
// file base. replacing says a stream's entries were just compacted: the
// new stream is then durable at once, so the old one's segments may go;
// a session's first stream is written with its first entries instead.
func (ls *Journal) Create(key layout.Key, base journal.Fingerprint, replacing bool) (*Stream, error) {
	s := ls.jr.Stream(key)
	if err := s.Begin(base, !replacing); err != nil {
		return nil, fmt.Errorf("start the journal stream of %s: %w", key, err)
	}
	return &Stream{s: s, ls: ls}, nil
}

// Exists reports whether the journal holds entries of key.
func (ls *Journal) Exists(key layout.Key) bool {
	e, ok := ls.jr.Epoch(key)
	return ok && len(e.Batches) > 0
}

// Stat returns a stamp of key's logged entries (their count, and when the
// last was logged) for the index's stamp of the session's files.
func (ls *Journal) Stat(key layout.Key) (size int64, mtime time.Time, ok bool) {
	e, ok := ls.jr.Epoch(key)
	if !ok || len(e.Batches) == 0 {
		return 0, time.Time{}, false
	}
	return int64(e.Stream)<<20 ^ int64(len(e.Batches)), e.Modified, true
}

// Keys lists every session with entries in the journal.
func (ls *Journal) Keys() []layout.Key {
	return ls.filter(func(layout.Key) bool { return true })
}

func (ls *Journal) filter(keep func(layout.Key) bool) []layout.Key {
	var out []layout.Key
	for _, k := range ls.jr.Pending() {
		if keep(k) {
			out = append(out, k)
		}
	}
	return out
}

// Drop makes sure the journal holds no entry of key (and, for a main session,
// of its subagent transcripts) that their files lack: compact (which the
// caller runs with no writer of the session live) moves them there.
func (ls *Journal) Drop(key layout.Key, compact func(layout.Key) error) error {
	keys := ls.filter(func(k layout.Key) bool {
		return k == key || key.Subpath == "" && k.Subpath != "" && k.Main() == key
	})
	for _, k := range keys {
		if err := compact(k); err != nil {
			return fmt.Errorf("the logged entries of %s could not be compacted into its transcript, so its files were left where they are: %w", k, err)
		}
	}
	return nil
}

// Retained looks entries up in the journal's retained segments
// (ledger.Journal).
func (ls *Journal) Retained(at []ledger.Pos, fn func(i int, entry []byte) error) (time.Time, error) {
	spans := make([]journal.Span, len(at))
	for i, p := range at {
		spans[i] = journal.Span{Seg: p.Seg, Off: p.Off}
	}
	info, err := ls.jr.Lookup(spans, fn)
	return info.Since, err
}

// Stream is one session's stream in the journal. It belongs to the
// session's writer goroutine.
type Stream struct {
	s  *journal.Stream
	ls *Journal
	// failed is set when a write or sync of the journal failed under this
	// stream's append.
	failed bool
}

// Append logs batches of entries, with each batch's meta record (nil for
// none), in one write and one sync shared with every session committing
// at the same time, and returns where each entry lies. It refuses what is
// over its limits without writing anything.
func (l *Stream) Append(batches [][][]byte, metas [][]byte) ([][]Span, error) {
	ws, err := l.s.Append(batches, metas)
	if err != nil {
		if !errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			l.failed = true
		}
		return nil, err
	}
	out := make([][]Span, len(ws))
	for i, b := range ws {
		out[i] = fromJournal(b)
	}
	return out, nil
}

// Broken reports whether a write or sync failed: the writer then reopens
// from what the journal holds.
func (l *Stream) Broken() bool { return l.failed }

// Read calls fn with the entries at spans, in order, each checked against
// its checksum. entry is valid only during the call.
func (l *Stream) Read(spans []Span, fn func(i int, entry []byte) error) error {
	return l.ls.jr.ReadEntries(toJournal(spans), fn)
}

// Reader opens a reader of the journal's entries for another goroutine;
// the segments it needs stay until it is closed.
func (l *Stream) Reader() *Reader {
	return &Reader{l.ls.jr, l.ls.jr.Pin(0), nil}
}

// MarkCompacted durably records that the canonical file is about to
// become fp, holding every entry logged so far.
func (l *Stream) MarkCompacted(fp journal.Fingerprint) error {
	err := l.s.MarkCompacted(fp)
	if err != nil {
		l.failed = true
	}
	return err
}

// Close releases the stream.
func (l *Stream) Close() {
	l.s.Close()
}

// Reader reads entries of a Stream at spans it handed out, while keeping
// the segments it may need.
type Reader struct {
	l       *journal.Log
	release func()
	// buf is read into, entry after entry: a reader serving a session's
	// pending entries (the mirror's, a follower's) allocates once, not
	// once per entry.
	buf []byte
}

// Entry reads the entry at sp; it is valid until the next call.
func (r *Reader) Entry(sp Span) ([]byte, error) {
	ws := journal.Span{Seg: sp.Seg, Off: sp.Off, Len: sp.N}
	if need := journal.ReadSize(ws); cap(r.buf) < need {
		r.buf = make([]byte, max(need, 2*cap(r.buf)))
	}
	return r.l.ReadEntry(ws, r.buf)
}

func (r *Reader) Close() error {
	r.release()
	return nil
}
