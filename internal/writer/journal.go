package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/wal"
)

// This file is the writer's only user of the write-ahead log (package
// wal) and of the per-session journals of older releases (package
// journal, read once at start to import them): the rest of the writer
// sees a session's log through sessionLog (what one writer appends to,
// reads back and marks compacted) and logStore (what the manager asks of
// all of them: which sessions have entries logged, importing old
// journals, dropping a session's entries once compacted).

// span is where a logged entry lies, as append or open handed it out:
// what read and logReader.entry find it by.
type span struct {
	seg uint64
	off int64
	n   int // the entry's length in bytes
}

func toWAL(sp []span) []wal.Span {
	out := make([]wal.Span, len(sp))
	for i, s := range sp {
		out[i] = wal.Span{Seg: s.seg, Off: s.off, Len: s.n}
	}
	return out
}

func fromWAL(sp []wal.Span) []span {
	out := make([]span, len(sp))
	for i, s := range sp {
		out[i] = span{seg: s.Seg, off: s.Off, n: s.Len}
	}
	return out
}

// recovered is what the log holds for a session when its writer opens.
type recovered struct {
	name  string     // for messages
	owner layout.Key // the session the log says it belongs to
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

// sessionLog is one session's stream in the log. It belongs to the
// session's writer goroutine.
type sessionLog interface {
	// append logs batches of entries, with each batch's meta record (nil
	// for none), in one write and one sync shared with every session
	// committing at the same time, and returns where each entry lies. It
	// refuses what is over its limits without writing anything.
	append(batches [][][]byte, metas [][]byte) ([][]span, error)
	// broken reports whether a write or sync failed: the writer then
	// reopens from what the log holds.
	broken() bool
	// read calls fn with the entries at spans, in order, each checked
	// against its checksum. entry is valid only during the call.
	read(spans []span, fn func(i int, entry []byte) error) error
	// reader opens a reader of the log's entries for another goroutine;
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

// logStore is the manager's side of the log.
type logStore struct {
	fs     fsys.FS
	layout layout.Layout
	log    *zap.Logger
	wal    *wal.Log
	rec    *wal.Recovery

	// unimported are the journals of older releases that could not be
	// read when importLegacy met them (key -> path): their sessions count
	// as logged, and open imports the journal first or fails, so that no
	// writer serves a session without the entries its journal holds.
	mu         sync.Mutex
	unimported map[layout.Key]string
}

// openLogStore opens (and recovers) the log in the state folder. pressure
// is told which sessions hold the log's oldest segment when it grows past
// its bound (see wal.Options.OnPressure).
func openLogStore(cfg *Config, pressure func([]layout.Key)) (*logStore, error) {
	l, rec, err := wal.Open(wal.Options{
		FS: cfg.FS, Dir: cfg.Layout.WALDir(),
		MaxRecord:     cfg.MaxEntryBytes + 1024,
		SegmentSize:   cfg.WALSegmentSize,
		MaxSize:       cfg.WALMaxSize,
		OnPressure:    pressure,
		Retention:     max(cfg.WALRetention, 0),
		RetentionSize: cfg.WALRetentionSize,
		Now:           cfg.Clock.Now,
		OnCommit:      cfg.WALOnCommit,
		// A reservation leaves the ballast's room free, and a segment's
		// more for the compactions.
		FreeSpace:  cfg.FreeSpace,
		Keep:       cfg.BallastSize + cfg.WALSegmentSize,
		AcceptLoss: cfg.AcceptLogLoss,
	})
	if err != nil {
		return nil, fmt.Errorf("open the write-ahead log: %w", err)
	}
	return &logStore{fs: cfg.FS, layout: cfg.Layout, log: cfg.Logger, wal: l, rec: rec}, nil
}

func (ls *logStore) close() error { return ls.wal.Close() }

// open returns key's stream and what the log holds for it; an error
// matching fs.ErrNotExist means it holds nothing.
func (ls *logStore) open(key layout.Key, _ bool) (sessionLog, *recovered, error) {
	if err := ls.importPending(key); err != nil {
		return nil, nil, err
	}
	e, ok := ls.wal.Epoch(key)
	if !ok {
		return nil, nil, fmt.Errorf("%s has nothing in the log: %w", key, fs.ErrNotExist)
	}
	r := &recovered{
		name:  "the log's stream of " + key.String(),
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
			foreign = isForeignMeta(b.Meta)
		}
		for _, sp := range b.Entries {
			r.entries = append(r.entries, span{sp.Seg, sp.Off, sp.Len})
			r.foreign = append(r.foreign, foreign)
			r.size += int64(sp.Len)
		}
	}
	return &walLog{s: ls.wal.Stream(key), ls: ls}, r, nil
}

// create starts a new stream for key whose entries follow the canonical
// file base. replacing says a stream's entries were just compacted: the
// new stream is then durable at once, so the old one's segments may go;
// a session's first stream is written with its first entries instead.
func (ls *logStore) create(key layout.Key, base fingerprint, replacing bool, _ *zap.Logger) (sessionLog, error) {
	s := ls.wal.Stream(key)
	if err := s.Begin(wal.Fingerprint{Size: base.size, Tail: base.tail}, 0, !replacing); err != nil {
		return nil, fmt.Errorf("start the log stream of %s: %w", key, err)
	}
	return &walLog{s: s, ls: ls}, nil
}

// exists reports whether the log holds entries of key.
func (ls *logStore) exists(key layout.Key) (bool, error) {
	if _, ok := ls.unimportedPath(key); ok {
		return true, nil
	}
	e, ok := ls.wal.Epoch(key)
	return ok && len(e.Batches) > 0, nil
}

// stat returns a stamp of key's logged entries (their count, and when the
// last was logged) for the index's stamp of the session's files.
func (ls *logStore) stat(key layout.Key) (size int64, mtime time.Time, ok bool) {
	e, ok := ls.wal.Epoch(key)
	if !ok || len(e.Batches) == 0 {
		return 0, time.Time{}, false
	}
	return int64(e.Stream)<<20 ^ int64(len(e.Batches)), e.Modified, true
}

// keys lists every session with entries in the log, or in a journal of
// an older release not imported yet.
func (ls *logStore) keys() ([]layout.Key, error) {
	return ls.filter(func(layout.Key) bool { return true }), nil
}

func (ls *logStore) filter(keep func(layout.Key) bool) []layout.Key {
	var out []layout.Key
	pending := ls.wal.Pending()
	for _, k := range pending {
		if keep(k) {
			out = append(out, k)
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for k := range ls.unimported {
		if keep(k) && !slices.Contains(pending, k) {
			out = append(out, k)
		}
	}
	return out
}

// mainKeys lists the main sessions of one project (or of every project
// when projectKey is "") with entries in the log.
func (ls *logStore) mainKeys(projectKey string) ([]layout.Key, error) {
	return ls.filter(func(k layout.Key) bool {
		return k.Subpath == "" && (projectKey == "" || k.ProjectKey == projectKey)
	}), nil
}

// subkeys lists the subagent transcripts of main's session with entries
// in the log.
func (ls *logStore) subkeys(main layout.Key) ([]string, error) {
	var out []string
	for _, k := range ls.filter(func(k layout.Key) bool { return k.Subpath != "" && k.Main() == main }) {
		out = append(out, k.Subpath)
	}
	return out, nil
}

// projectsWith lists the keys, in any project, of a session id and
// subpath with entries in the log.
func (ls *logStore) projectsWith(sessionID, subpath string) ([]layout.Key, error) {
	return ls.filter(func(k layout.Key) bool { return k.SessionID == sessionID && k.Subpath == subpath }), nil
}

// sweepTemps removes the temp files of per-session journals of older
// releases that a crash cut short.
func (ls *logStore) sweepTemps(func(layout.Key) bool) {
	dir := ls.layout.JournalDir()
	walk(ls.fs, dir, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() && strings.Contains(d.Name(), layout.JournalExt+".tmp-") {
			if err := ls.fs.Remove(path); err == nil {
				ls.log.Info("removed a temp file left by a crash", zap.String("file", path))
			}
		}
		return nil
	})
}

// drop makes sure the log holds no entry of key (and, for a main session,
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

// importLegacy moves the per-session journals of older releases into the
// log, each in one write with its compaction marker, then removes them:
// an upgrade loses nothing. A crash between the two leaves the journal
// behind; the next start sees the log's stream carries its generation
// and only removes it.
//
// A journal that cannot be read (as opposed to one that is damaged or
// conflicts with the log, kept for inspection) is remembered: its session
// counts as logged and its writer imports it first (importPending). A
// journal folder that cannot be listed is fatal: which sessions have
// journals there is unknown, and none may be served without its entries.
func (ls *logStore) importLegacy() (imported int, errs []error, fatal error) {
	dir := ls.layout.JournalDir()
	err := walk(ls.fs, dir, func(path string, d fs.DirEntry) error {
		if d.IsDir() || !strings.HasSuffix(path, layout.JournalExt) || !d.Type().IsRegular() {
			return nil
		}
		k, ok := ls.layout.ParseJournalPath(path)
		if !ok {
			ls.log.Warn("ignoring a file in the journal folder that is not a journal", zap.String("path", path))
			return nil
		}
		if err := ls.importOne(k, path); err != nil {
			if couldNotRead(err) {
				ls.mu.Lock()
				if ls.unimported == nil {
					ls.unimported = make(map[layout.Key]string)
				}
				ls.unimported[k] = path
				ls.mu.Unlock()
			}
			errs = append(errs, fmt.Errorf("import the journal of %s (%s): %w", k, path, err))
			return nil
		}
		imported++
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return imported, errs, unreadable("the journals of an older release in "+dir, err)
	}
	return imported, errs, nil
}

// couldNotRead tells a journal the disk or the process could not read
// (worth trying again) from one that is damaged, of an unknown version or
// in conflict with the log (kept for a human).
func couldNotRead(err error) bool {
	if errors.Is(err, errdefs.ErrCorrupt) {
		return false
	}
	// The kinds errdefs.FromIO gives what the filesystem refused.
	for _, kind := range []error{errdefs.ErrIO, errdefs.ErrNoSpace, errdefs.ErrNoDescriptors, errdefs.ErrUnsafePath, errdefs.ErrFailedPrecondition} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

func (ls *logStore) unimportedPath(key layout.Key) (string, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	path, ok := ls.unimported[key]
	return path, ok
}

// importPending imports key's journal of an older release that could not
// be read at start, if there is one. Only key's writer calls it.
func (ls *logStore) importPending(key layout.Key) error {
	path, ok := ls.unimportedPath(key)
	if !ok {
		return nil
	}
	err := ls.importOne(key, path)
	switch {
	case couldNotRead(err):
		return unreadable("the journal "+path+" of an older release", err)
	case err != nil:
		// Damaged, or in conflict with the log: kept for a human, and the
		// session goes on without it, as when that is found at start.
		ls.log.Error("a journal of an older release could not be imported; it is kept", zap.Stringer("session", key), zap.String("path", path), zap.Error(err))
	default:
		ls.log.Info("imported the journal of an older release that could not be read at start", zap.Stringer("session", key), zap.String("path", path))
	}
	ls.mu.Lock()
	delete(ls.unimported, key)
	ls.mu.Unlock()
	return nil
}

func (ls *logStore) importOne(k layout.Key, path string) error {
	j, rec, err := journal.Open(ls.fs, path, journal.Options{MaxRecord: journal.DefaultMaxRecord})
	if err != nil {
		return err
	}
	defer j.Close()
	h := rec.Header
	if h.ProjectKey != k.ProjectKey || h.SessionID != k.SessionID || h.Subpath != k.Subpath {
		return fmt.Errorf("it belongs to %s/%s/%s: %w", h.ProjectKey, h.SessionID, h.Subpath, errdefs.ErrCorrupt)
	}
	e, has := ls.wal.Epoch(k)
	switch {
	case has && e.Legacy == h.Generation:
		// Imported before a crash kept the journal from going.
	case has && len(e.Batches) > 0:
		return fmt.Errorf("the log already holds entries of this transcript; the journal is kept for inspection: %w", errdefs.ErrFailedPrecondition)
	default:
		var batches [][][]byte
		var metas [][]byte
		for _, b := range rec.Batches {
			var lines [][]byte
			err := j.ReadEntries(b.Entries, func(_ int, p []byte) error {
				lines = append(lines, append([]byte(nil), p...))
				return nil
			})
			if err != nil {
				return err
			}
			if len(lines) == 0 {
				continue
			}
			batches = append(batches, lines)
			metas = append(metas, b.Meta)
		}
		var marker *wal.Fingerprint
		if c := rec.Compacted; c != nil {
			marker = &wal.Fingerprint{Size: c.Size, Tail: c.Tail}
		}
		if len(batches) > 0 || marker != nil {
			s := ls.wal.Stream(k)
			if err := s.Begin(wal.Fingerprint{Size: h.BaseSize, Tail: h.BaseTail}, h.Generation, true); err != nil {
				return err
			}
			if _, err := s.AppendMarked(batches, metas, marker); err != nil {
				return err
			}
			s.Close()
		}
	}
	if err := ls.fs.Remove(path); err != nil {
		return errdefs.FromIO(err)
	}
	return errdefs.FromIO(ls.fs.SyncDir(filepath.Dir(path)))
}

// walLog is a sessionLog: one session's stream in the shared log.
type walLog struct {
	s  *wal.Stream
	ls *logStore
	// failed is set when a write or sync of the log failed under this
	// stream's append.
	failed bool
}

func (l *walLog) append(batches [][][]byte, metas [][]byte) ([][]span, error) {
	ws, err := l.s.Append(batches, metas)
	if err != nil {
		if !errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			l.failed = true
		}
		return nil, err
	}
	out := make([][]span, len(ws))
	for i, b := range ws {
		out[i] = fromWAL(b)
	}
	return out, nil
}

func (l *walLog) broken() bool { return l.failed }

func (l *walLog) read(spans []span, fn func(i int, entry []byte) error) error {
	return l.ls.wal.ReadEntries(toWAL(spans), fn)
}

func (l *walLog) reader() (logReader, error) {
	return walReader{l.ls.wal, l.ls.wal.Pin(0), new([]byte)}, nil
}

func (l *walLog) markCompacted(fp fingerprint) error {
	err := l.s.MarkCompacted(wal.Fingerprint{Size: fp.size, Tail: fp.tail})
	if err != nil {
		l.failed = true
	}
	return err
}

func (l *walLog) close() error {
	l.s.Close()
	return nil
}

// walReader reads entries while keeping the segments it may need.
type walReader struct {
	l       *wal.Log
	release func()
	// buf is read into, entry after entry: a reader serving a session's
	// pending entries (the mirror's, a follower's) allocates once, not
	// once per entry.
	buf *[]byte
}

func (r walReader) entry(sp span) ([]byte, error) {
	ws := wal.Span{Seg: sp.seg, Off: sp.off, Len: sp.n}
	if need := wal.ReadSize(ws); cap(*r.buf) < need {
		*r.buf = make([]byte, max(need, 2*cap(*r.buf)))
	}
	return r.l.ReadEntry(ws, *r.buf)
}

func (r walReader) close() error {
	r.release()
	return nil
}
