package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
)

// This file is the writer's only user of package journal: the rest of the
// writer sees a session's write-ahead log through sessionLog (what one
// writer appends to, reads back and marks compacted) and logStore (opening
// and creating logs, and what the manager asks of all of them: which
// sessions have one, checking them at start, dropping them). Today each
// session has a journal file of its own (layout.JournalPath), replaced by
// a new generation after every compaction.

// span is where a journaled entry lies in its session's log, as append or
// open handed it out: what read and logReader.entry find it by.
type span struct {
	off int64
	n   int // the entry's length in bytes
}

// recovered is what opening a session's log found in it.
type recovered struct {
	name  string     // the log's name, for messages
	owner layout.Key // the session the log says it belongs to
	// base is the canonical file as it was when the log began: the
	// entries follow its content.
	base fingerprint
	// compacted is the canonical file the last compaction installed (or
	// was about to), nil if none: when the file has it, every entry
	// logged before is already in it.
	compacted *fingerprint
	entries   []span   // committed entries, in order
	metas     [][]byte // committed batches' meta records, in order
	truncated int64    // bytes of torn tail cut (never acknowledged)
	size      int64    // the log's length
}

// sessionLog is one session's open log. It belongs to the session's
// writer goroutine.
type sessionLog interface {
	// append logs batches of entries, with each batch's meta record (nil
	// for none), in one write and one sync, and returns where each entry
	// lies. It refuses what is over its limits without writing anything.
	append(batches [][][]byte, metas [][]byte) ([][]span, error)
	// broken reports whether a write or sync failed: the log is then done
	// for, and only a reopen from disk knows what it holds.
	broken() bool
	// read calls fn with the entries at spans, in order (spans in the
	// order append or open returned them), each checked against its
	// checksum. entry is valid only during the call.
	read(spans []span, fn func(i int, entry []byte) error) error
	// reader opens a reader of the log's entries for another goroutine;
	// it keeps seeing them after the log is replaced.
	reader() (logReader, error)
	// markCompacted durably records that the canonical file is about to
	// become fp, holding every entry logged so far.
	markCompacted(fp fingerprint) error
	// close releases the log. After a failure it first tells the store
	// where the log's durable part ends, for the session's next writer.
	close() error
}

// logReader reads entries of a sessionLog at spans it handed out.
type logReader interface {
	entry(sp span, buf []byte) ([]byte, error)
	close() error
}

// logStore opens and creates the session logs of one manager, and answers
// the manager's questions about all of them.
type logStore struct {
	fs     fsys.FS
	layout layout.Layout
	log    *zap.Logger
	opt    journal.Options

	mu sync.Mutex
	// durableEnds holds, for sessions whose journal failed a write or a
	// sync, where its last synced write ended: the next writer cuts the
	// journal back to it before appending.
	durableEnds map[layout.Key]durableEnd
}

// durableEnd is a journal generation and the end of its last synced write.
type durableEnd struct {
	generation uint64
	end        int64
}

func newLogStore(cfg *Config) *logStore {
	return &logStore{
		fs: cfg.FS, layout: cfg.Layout, log: cfg.Logger,
		opt: journal.Options{MaxRecord: cfg.MaxEntryBytes + 1024},
	}
}

func (ls *logStore) noteDurableEnd(k layout.Key, d durableEnd) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.durableEnds == nil {
		ls.durableEnds = make(map[layout.Key]durableEnd)
	}
	ls.durableEnds[k] = d
}

func (ls *logStore) durableEnd(k layout.Key) (durableEnd, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	d, ok := ls.durableEnds[k]
	return d, ok
}

// forgetDurableEnd drops the note once a journal was reopened with it.
func (ls *logStore) forgetDurableEnd(k layout.Key, d durableEnd) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.durableEnds[k] == d {
		delete(ls.durableEnds, k)
	}
}

// open opens key's log and reads what it holds; an error matching
// fs.ErrNotExist means the session has none. After a failed write or sync
// the journal may show records that never reached the disk: open first
// cuts it back to where its last synced write ended if a writer of this
// process saw one fail (see journal.Options.DurableEnd). With noFolderSync
// the caller syncs the log's folder itself (syncFolders).
func (ls *logStore) open(key layout.Key, noFolderSync bool) (sessionLog, *recovered, error) {
	opt := ls.opt
	opt.NoFolderSync = noFolderSync
	cut, hasCut := ls.durableEnd(key)
	if hasCut {
		opt.DurableGeneration, opt.DurableEnd = cut.generation, cut.end
	}
	path := ls.layout.JournalPath(key)
	j, rec, err := journal.Open(ls.fs, path, opt)
	if hasCut && (err == nil || errors.Is(err, fs.ErrNotExist)) {
		ls.forgetDurableEnd(key, cut)
	}
	if err != nil {
		return nil, nil, err
	}
	h := rec.Header
	r := &recovered{
		name:      path,
		owner:     layout.Key{ProjectKey: h.ProjectKey, SessionID: h.SessionID, Subpath: h.Subpath},
		base:      fingerprint{h.BaseSize, h.BaseTail},
		truncated: rec.TruncatedBytes,
		size:      j.Size(),
	}
	if c := rec.Compacted; c != nil {
		r.compacted = &fingerprint{c.Size, c.Tail}
	}
	for _, b := range rec.Batches {
		if b.Meta != nil {
			r.metas = append(r.metas, b.Meta)
		}
		for _, sp := range b.Entries {
			r.entries = append(r.entries, span{sp.Off, sp.Len})
		}
	}
	return &journalLog{j: j, ls: ls, key: key}, r, nil
}

// create starts a new, empty log for key whose entries follow the
// canonical file base, replacing the session's log if it has one (the
// caller closes the old one once this succeeded). If it fails for a
// session without a log (replacing false), it removes what it may have
// left: a header and no entry. Left there, the refused append would leave
// a session behind that every listing opens a writer (and its files) to
// look at, however short of descriptors the daemon is. If the removal
// fails too, the next writer to open the session finds the empty journal
// and drops it when it retires or stops.
func (ls *logStore) create(key layout.Key, base fingerprint, replacing bool, log *zap.Logger) (sessionLog, error) {
	path := ls.layout.JournalPath(key)
	if err := fsys.MkdirAll(ls.fs, filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create journal folder for %s: %w", key, errdefs.FromIO(err))
	}
	j, err := journal.Create(ls.fs, path, journal.Header{
		ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath,
		BaseSize: base.size, BaseTail: base.tail,
	}, ls.opt)
	if err != nil {
		if !replacing {
			err := ls.fs.Remove(path)
			if err == nil {
				err = ls.fs.SyncDir(filepath.Dir(path))
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cannot remove the journal a refused append started; the next writer drops it", zap.Error(err))
			}
		}
		return nil, fmt.Errorf("start journal of %s: %w", key, errdefs.FromIO(err))
	}
	return &journalLog{j: j, ls: ls, key: key}, nil
}

// remove drops key's log, which holds nothing the canonical file lacks
// (the caller closed it).
func (ls *logStore) remove(key layout.Key) {
	path := ls.layout.JournalPath(key)
	if err := ls.fs.Remove(path); err == nil {
		ls.fs.SyncDir(filepath.Dir(path))
	}
}

// exists reports whether key has a log. A failed look is an error, never
// a no.
func (ls *logStore) exists(key layout.Key) (bool, error) {
	_, err := ls.fs.Lstat(ls.layout.JournalPath(key))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// stat returns the size and modification time of key's log, for the
// index's stamp of the session's files.
func (ls *logStore) stat(key layout.Key) (size int64, mtime time.Time, ok bool) {
	fi, err := ls.fs.Lstat(ls.layout.JournalPath(key))
	if err != nil {
		return 0, time.Time{}, false
	}
	return fi.Size(), fi.ModTime(), true
}

// keys lists every session with a log on disk.
func (ls *logStore) keys() ([]layout.Key, error) {
	var keys []layout.Key
	dir := ls.layout.JournalDir()
	err := walk(ls.fs, dir, func(path string, d fs.DirEntry) error {
		if d.IsDir() || !strings.HasSuffix(path, ".wal") {
			return nil
		}
		if !d.Type().IsRegular() {
			// A link or other oddity planted among the journals is never
			// followed; the session it names is refused when addressed.
			ls.log.Warn("ignoring a journal that is not a regular file", zap.String("path", path))
			return nil
		}
		if k, ok := ls.layout.ParseJournalPath(path); ok {
			keys = append(keys, k)
		} else {
			ls.log.Warn("ignoring a file in the journal folder that is not a journal", zap.String("path", path))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list journals in %s: %w", dir, errdefs.FromIO(err))
	}
	return keys, nil
}

// mainKeys lists the main sessions of one project (or of every project
// when projectKey is "") that have a log. The main journals sit at the top
// of their project's journal folder, so only those folders are read (not
// the subagent journals below them).
func (ls *logStore) mainKeys(projectKey string) ([]layout.Key, error) {
	L := ls.layout
	projects := []string{projectKey}
	if projectKey == "" {
		ents, err := ls.fs.ReadDir(L.JournalDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", L.JournalDir(), errdefs.FromIO(err))
		}
		projects = nil
		for _, e := range ents {
			if e.IsDir() {
				projects = append(projects, e.Name())
			}
		}
	}
	var keys []layout.Key
	for _, p := range projects {
		dir := filepath.Join(L.JournalDir(), p)
		ents, err := ls.fs.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), layout.JournalExt) {
				continue
			}
			if k, ok := L.ParseJournalPath(filepath.Join(dir, e.Name())); ok && k.Subpath == "" {
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}

// subkeys lists the subagent transcripts of main's session that have a
// log.
func (ls *logStore) subkeys(main layout.Key) ([]string, error) {
	var out []string
	dir := strings.TrimSuffix(ls.layout.JournalPath(main), ".wal")
	err := walk(ls.fs, dir, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() {
			if k, ok := ls.layout.ParseJournalPath(path); ok && k.Subpath != "" && k.Main() == main {
				out = append(out, k.Subpath)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	return out, nil
}

// projectsWith lists the keys of sessionID (and subpath) that have a log,
// in any project.
func (ls *logStore) projectsWith(sessionID, subpath string) ([]layout.Key, error) {
	return inProjects(ls.fs, ls.layout.JournalDir(), sessionID, subpath, ls.layout.JournalPath)
}

// syncFolders makes the names of the logs of keys, opened with
// noFolderSync, durable: one sync per folder.
func (ls *logStore) syncFolders(keys []layout.Key) error {
	folders := make(map[string]bool)
	for _, k := range keys {
		folders[filepath.Dir(ls.layout.JournalPath(k))] = true
	}
	for dir := range folders {
		if err := ls.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("sync journal folder %s: %w", dir, errdefs.FromIO(err))
		}
	}
	return nil
}

// tempFiles says where the temp files key's log leaves when a crash cuts
// the start of a new generation short, and how they are named.
func (ls *logStore) tempFiles(key layout.Key) (dir string, match func(name string) bool) {
	path := ls.layout.JournalPath(key)
	prefix := filepath.Base(path) + ".tmp-"
	return filepath.Dir(path), func(n string) bool { return strings.HasPrefix(n, prefix) }
}

// sweepTemps removes the temp files of journal generations a crash cut
// short. A writer sweeps its own when it opens, but a crash during the
// very first generation of a session leaves a temp file and no journal, so
// no writer of that session is ever opened by recovery to sweep it. Temp
// files of sessions with a live writer (live) are left alone: that writer
// may be creating one right now.
func (ls *logStore) sweepTemps(live func(layout.Key) bool) {
	dir := ls.layout.JournalDir()
	walk(ls.fs, dir, func(path string, d fs.DirEntry) error {
		name := d.Name()
		i := strings.Index(name, layout.JournalExt+".tmp-")
		if !d.Type().IsRegular() || i <= 0 {
			return nil
		}
		k, ok := ls.layout.ParseJournalPath(filepath.Join(filepath.Dir(path), name[:i+len(layout.JournalExt)]))
		if ok && live(k) {
			return nil
		}
		if err := ls.fs.Remove(path); err == nil {
			ls.log.Info("removed a temp file left by a crash", zap.String("file", path))
		}
		return nil
	})
}

// drop removes key's log, and for a main session the logs of its subagent
// transcripts too, after compact (which the caller runs with no writer of
// the session live) proved each holds no entry its transcript lacks.
func (ls *logStore) drop(key layout.Key, compact func(layout.Key) error) error {
	paths := []string{ls.layout.JournalPath(key)}
	if key.Subpath == "" {
		paths = append(paths, strings.TrimSuffix(ls.layout.JournalPath(key), ".wal"))
	}
	for _, p := range paths {
		if err := ls.dropPath(p, compact); err != nil {
			return err
		}
	}
	return nil
}

// dropPath removes a journal (file or folder of subagent journals)
// after checking it holds no entry the transcript lacks.
func (ls *logStore) dropPath(path string, compact func(layout.Key) error) error {
	fi, err := ls.fs.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errdefs.FromIO(err)
	}
	if fi.IsDir() {
		// A folder of subagent journals: each may hold entries its
		// transcript lacks (a writer whose shutdown compaction failed, a
		// journal no writer reopened since a crash). Compact every one
		// into its transcript, which the delete then moves, before any
		// is removed.
		err := walk(ls.fs, path, func(p string, d fs.DirEntry) error {
			if d.IsDir() || !strings.HasSuffix(p, layout.JournalExt) {
				return nil
			}
			return ls.dropPath(p, compact)
		})
		if err != nil {
			return errdefs.FromIO(err) // keeps the kind dropPath gave, else the disk's
		}
		return errdefs.FromIO(fsys.RemoveAll(ls.fs, path))
	}
	if k, ok := ls.layout.ParseJournalPath(path); ok {
		// Replaying it (a no-op when compacted) proves nothing is pending.
		if err := compact(k); err != nil {
			return fmt.Errorf("the journal of %s could not be compacted, so it was not deleted: %w", k, err)
		}
	}
	return errdefs.FromIO(fsys.RemoveAll(ls.fs, path))
}

// journalLog is a sessionLog kept in a journal file of its own.
type journalLog struct {
	j   *journal.Journal
	ls  *logStore
	key layout.Key
}

func (l *journalLog) append(batches [][][]byte, metas [][]byte) ([][]span, error) {
	js, err := l.j.AppendMeta(batches, metas)
	if err != nil {
		return nil, err
	}
	out := make([][]span, len(js))
	for i, b := range js {
		out[i] = make([]span, len(b))
		for k, sp := range b {
			out[i][k] = span{sp.Off, sp.Len}
		}
	}
	return out, nil
}

func (l *journalLog) broken() bool { return l.j.Err() != nil }

func (l *journalLog) read(spans []span, fn func(i int, entry []byte) error) error {
	js := make([]journal.Span, len(spans))
	for i, sp := range spans {
		js[i] = journal.Span{Off: sp.off, Len: sp.n}
	}
	return l.j.ReadEntries(js, fn)
}

func (l *journalLog) reader() (logReader, error) {
	f, err := l.ls.fs.OpenFile(l.j.Path(), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", l.j.Path(), errdefs.FromIO(err))
	}
	return journalReader{f}, nil
}

func (l *journalLog) markCompacted(fp fingerprint) error {
	return l.j.MarkCompacted(journal.Marker{Size: fp.size, Tail: fp.tail})
}

func (l *journalLog) close() error {
	if l.j.Err() != nil {
		// Where the last synced write ended, for the next writer of the
		// session (see journal.Options.DurableEnd).
		gen, end := l.j.DurableEnd()
		l.ls.noteDurableEnd(l.key, durableEnd{gen, end})
	}
	return l.j.Close()
}

// journalReader reads a journal file through a handle of its own, which
// keeps seeing the generation it opened after a compaction replaced it.
type journalReader struct{ f fsys.File }

func (r journalReader) entry(sp span, buf []byte) ([]byte, error) {
	return journal.ReadEntryAt(r.f, journal.Span{Off: sp.off, Len: sp.n}, buf)
}

func (r journalReader) close() error { return r.f.Close() }
