package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
)

// This file is the writer's only user of the journal: the rest of the
// writer sees a session's stream through sessionLog (what one writer
// appends to, reads back and marks compacted) and logStore (what the
// manager asks of all of them: which sessions have entries logged,
// dropping a session's entries once compacted).

// span is where a logged entry lies, as append or open handed it out:
// what read and logReader.entry find it by.
type span struct {
	seg uint64
	off int64
	n   int // the entry's length in bytes
}

func toJournal(sp []span) []journal.Span {
	out := make([]journal.Span, len(sp))
	for i, s := range sp {
		out[i] = journal.Span{Seg: s.seg, Off: s.off, Len: s.n}
	}
	return out
}

func fromJournal(sp []journal.Span) []span {
	out := make([]span, len(sp))
	for i, s := range sp {
		out[i] = span{seg: s.Seg, off: s.Off, n: s.Len}
	}
	return out
}

// recovered is what the journal holds for a session when its writer opens.
type recovered struct {
	name  string     // for messages
	owner layout.Key // the session the journal says it belongs to
	// base is the canonical file as it was when the session's stream
	// began: the entries follow its content.
	base fingerprint
	// compacted is the canonical file the last compaction installed (or
	// was about to), nil if none: when the file has it, every entry
	// logged before is already in it.
	compacted *fingerprint
	entries   []span   // committed entries, in order
	foreign   []bool   // for each entry: a line another program appended, rescued (see pendingEntry)
	metas     [][]byte // committed batches' meta records, in order
	truncated int64    // bytes of torn tail cut (never acknowledged)
	size      int64    // bytes of entries logged
}

// sessionLog is one session's stream in the journal. It belongs to the
// session's writer goroutine.
type sessionLog interface {
	// append logs batches of entries, with each batch's meta record (nil
	// for none), in one write and one sync shared with every session
	// committing at the same time, and returns where each entry lies. It
	// refuses what is over its limits without writing anything.
	append(batches [][][]byte, metas [][]byte) ([][]span, error)
	// broken reports whether a write or sync failed: the writer then
	// reopens from what the journal holds.
	broken() bool
	// read calls fn with the entries at spans, in order, each checked
	// against its checksum. entry is valid only during the call.
	read(spans []span, fn func(i int, entry []byte) error) error
	// reader opens a reader of the journal's entries for another goroutine;
	// the segments it needs stay until it is closed.
	reader() (logReader, error)
	// markCompacted durably records that the canonical file is about to
	// become fp, holding every entry logged so far.
	markCompacted(fp fingerprint) error
	// close releases the stream.
	close() error
}

// logReader reads entries of a sessionLog at spans it handed out.
type logReader interface {
	// entry reads the entry at sp; it is valid until the next call.
	entry(sp span) ([]byte, error)
	close() error
}

// logStore is the manager's side of the journal.
type logStore struct {
	fs     fsys.FS
	layout layout.Layout
	log    *zap.Logger
	jr     *journal.Log
	rec    *journal.Recovery
}

// openLogStore opens (and recovers) the journal in the state folder. pressure
// is told which sessions hold the journal's oldest segment when it grows past
// its bound (see journal.Options.OnPressure).
func openLogStore(cfg *Config, pressure func([]layout.Key)) (*logStore, error) {
	l, rec, err := journal.Open(journal.Options{
		FS: cfg.FS, Dir: cfg.Layout.JournalDir(),
		MaxRecord:     cfg.MaxEntryBytes + 1024,
		SegmentSize:   cfg.JournalSegmentSize,
		MaxSize:       cfg.JournalMaxSize,
		OnPressure:    pressure,
		Retention:     max(cfg.JournalRetention, 0),
		RetentionSize: cfg.JournalRetentionSize,
		Now:           cfg.Clock.Now,
		OnCommit:      cfg.JournalOnCommit,
		// A reservation leaves the ballast's room free, and a segment's
		// more for the compactions.
		FreeSpace:  cfg.FreeSpace,
		Keep:       cfg.BallastSize + cfg.JournalSegmentSize,
		AcceptLoss: cfg.AcceptJournalLoss,
	})
	if err != nil {
		return nil, fmt.Errorf("open the journal: %w", err)
	}
	return &logStore{fs: cfg.FS, layout: cfg.Layout, log: cfg.Logger, jr: l, rec: rec}, nil
}

func (ls *logStore) close() error { return ls.jr.Close() }

// open returns key's stream and what the journal holds for it; an error
// matching fs.ErrNotExist means it holds nothing.
func (ls *logStore) open(key layout.Key) (sessionLog, *recovered, error) {
	e, ok := ls.jr.Epoch(key)
	if !ok {
		return nil, nil, fmt.Errorf("%s has nothing in the journal: %w", key, fs.ErrNotExist)
	}
	r := &recovered{
		name:  "the journal's stream of " + key.String(),
		owner: e.Key,
		base:  fingerprint{e.Base.Size, e.Base.Tail},
	}
	if c := e.Compacted; c != nil {
		r.compacted = &fingerprint{c.Size, c.Tail}
	}
	for _, b := range e.Batches {
		foreign := false
		if b.Meta != nil {
			r.metas = append(r.metas, b.Meta)
			foreign = sessionstore.IsForeignMeta(b.Meta)
		}
		for _, sp := range b.Entries {
			r.entries = append(r.entries, span{sp.Seg, sp.Off, sp.Len})
			r.foreign = append(r.foreign, foreign)
			r.size += int64(sp.Len)
		}
	}
	return &journalStream{s: ls.jr.Stream(key), ls: ls}, r, nil
}

// create starts a new stream for key whose entries follow the canonical
// file base. replacing says a stream's entries were just compacted: the
// new stream is then durable at once, so the old one's segments may go;
// a session's first stream is written with its first entries instead.
func (ls *logStore) create(key layout.Key, base fingerprint, replacing bool) (sessionLog, error) {
	s := ls.jr.Stream(key)
	if err := s.Begin(journal.Fingerprint{Size: base.size, Tail: base.tail}, !replacing); err != nil {
		return nil, fmt.Errorf("start the journal stream of %s: %w", key, err)
	}
	return &journalStream{s: s, ls: ls}, nil
}

// exists reports whether the journal holds entries of key.
func (ls *logStore) exists(key layout.Key) bool {
	e, ok := ls.jr.Epoch(key)
	return ok && len(e.Batches) > 0
}

// stat returns a stamp of key's logged entries (their count, and when the
// last was logged) for the index's stamp of the session's files.
func (ls *logStore) stat(key layout.Key) (size int64, mtime time.Time, ok bool) {
	e, ok := ls.jr.Epoch(key)
	if !ok || len(e.Batches) == 0 {
		return 0, time.Time{}, false
	}
	return int64(e.Stream)<<20 ^ int64(len(e.Batches)), e.Modified, true
}

// keys lists every session with entries in the journal.
func (ls *logStore) keys() []layout.Key {
	return ls.filter(func(layout.Key) bool { return true })
}

func (ls *logStore) filter(keep func(layout.Key) bool) []layout.Key {
	var out []layout.Key
	for _, k := range ls.jr.Pending() {
		if keep(k) {
			out = append(out, k)
		}
	}
	return out
}

// mainKeys lists the main sessions of one project (or of every project
// when projectKey is "") with entries in the journal.
func (ls *logStore) mainKeys(projectKey string) []layout.Key {
	return ls.filter(func(k layout.Key) bool {
		return k.Subpath == "" && (projectKey == "" || k.ProjectKey == projectKey)
	})
}

// subkeys lists the subagent transcripts of main's session with entries
// in the journal.
func (ls *logStore) subkeys(main layout.Key) []string {
	var out []string
	for _, k := range ls.filter(func(k layout.Key) bool { return k.Subpath != "" && k.Main() == main }) {
		out = append(out, k.Subpath)
	}
	return out
}

// projectsWith lists the keys, in any project, of a session id and
// subpath with entries in the journal.
func (ls *logStore) projectsWith(sessionID, subpath string) []layout.Key {
	return ls.filter(func(k layout.Key) bool { return k.SessionID == sessionID && k.Subpath == subpath })
}

// drop makes sure the journal holds no entry of key (and, for a main session,
// of its subagent transcripts) that their files lack: compact (which the
// caller runs with no writer of the session live) moves them there.
func (ls *logStore) drop(key layout.Key, compact func(layout.Key) error) error {
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

// journalStream is a sessionLog: one session's stream in the shared log.
type journalStream struct {
	s  *journal.Stream
	ls *logStore
	// failed is set when a write or sync of the journal failed under this
	// stream's append.
	failed bool
}

func (l *journalStream) append(batches [][][]byte, metas [][]byte) ([][]span, error) {
	ws, err := l.s.Append(batches, metas)
	if err != nil {
		if !errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			l.failed = true
		}
		return nil, err
	}
	out := make([][]span, len(ws))
	for i, b := range ws {
		out[i] = fromJournal(b)
	}
	return out, nil
}

func (l *journalStream) broken() bool { return l.failed }

func (l *journalStream) read(spans []span, fn func(i int, entry []byte) error) error {
	return l.ls.jr.ReadEntries(toJournal(spans), fn)
}

func (l *journalStream) reader() (logReader, error) {
	return journalReader{l.ls.jr, l.ls.jr.Pin(0), new([]byte)}, nil
}

func (l *journalStream) markCompacted(fp fingerprint) error {
	err := l.s.MarkCompacted(journal.Fingerprint{Size: fp.size, Tail: fp.tail})
	if err != nil {
		l.failed = true
	}
	return err
}

func (l *journalStream) close() error {
	l.s.Close()
	return nil
}

// journalReader reads entries while keeping the segments it may need.
type journalReader struct {
	l       *journal.Log
	release func()
	// buf is read into, entry after entry: a reader serving a session's
	// pending entries (the mirror's, a follower's) allocates once, not
	// once per entry.
	buf *[]byte
}

func (r journalReader) entry(sp span) ([]byte, error) {
	ws := journal.Span{Seg: sp.seg, Off: sp.off, Len: sp.n}
	if need := journal.ReadSize(ws); cap(*r.buf) < need {
		*r.buf = make([]byte, max(need, 2*cap(*r.buf)))
	}
	return r.l.ReadEntry(ws, *r.buf)
}

func (r journalReader) close() error {
	r.release()
	return nil
}
