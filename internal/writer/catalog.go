package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Subkeys lists the subagent transcripts of key's session, from disk,
// journals and open writers.
func (m *Manager) Subkeys(key layout.Key) ([]string, error) {
	main := key.Main()
	if err := main.Validate(); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	dir := m.cfg.Layout.SessionDir(main)
	err := walk(m.cfg.FS, dir, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() {
			if k, ok := m.cfg.Layout.ParseTranscriptPath(path); ok && k.Subpath != "" && k.Main() == main {
				set[k.Subpath] = true
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	logged := m.logs.subkeys(main)
	for _, s := range logged {
		set[s] = true
	}
	m.mu.Lock()
	for k := range m.sessions {
		if k.Main() == main && k.Subpath != "" {
			set[k.Subpath] = true
		}
	}
	m.mu.Unlock()
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// AllKeys lists every transcript key of one project (or all), subagents
// included when subagents is set: files on disk, journals, open writers.
func (m *Manager) AllKeys(projectKey string, subagents bool) ([]layout.Key, error) {
	set := map[layout.Key]bool{}
	L := m.cfg.Layout
	root := L.ProjectsDir()
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		root = L.ProjectDir(projectKey)
	}
	err := walk(m.cfg.FS, root, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() && strings.HasSuffix(path, ".jsonl") {
			if k, ok := L.ParseTranscriptPath(path); ok && (subagents || k.Subpath == "") {
				set[k] = true
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", root, errdefs.FromIO(err))
	}
	journaled, err := m.journaledKeys()
	if err != nil {
		return nil, err
	}
	for _, k := range journaled {
		if (projectKey == "" || k.ProjectKey == projectKey) && (subagents || k.Subpath == "") {
			set[k] = true
		}
	}
	return sortedKeys(set, byName), nil
}

// existsOnDisk reports whether key has a canonical file or a journal, so
// reads of unknown sessions fail without starting a writer. A failed Lstat
// says nothing about existence: then it answers yes, so the operation runs
// and reports the disk's error instead of "not found".
func (m *Manager) existsOnDisk(key layout.Key) bool {
	ok, err := m.existsOnDiskErr(key)
	return ok || err != nil
}

// notFound is the error for a transcript that does not exist. For a
// subagent transcript of a session that does, it says so: the user is
// looking for a subpath, not for a missing session.
func (m *Manager) notFound(key layout.Key) error {
	if key.Subpath != "" && m.existsOnDisk(key.Main()) {
		return fmt.Errorf("session %s/%s has no subagent transcript %s (sessionctl subkeys %s lists the ones it has): %w",
			key.ProjectKey, key.SessionID, key.Subpath, key.SessionID, errdefs.ErrNotFound)
	}
	return fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
}

// existsOnDiskErr is existsOnDisk for callers that must tell "no" from
// "could not look": a refusal because the session exists must not be the
// answer to a failing disk.
func (m *Manager) existsOnDiskErr(key layout.Key) (bool, error) {
	m.mu.Lock()
	s := m.sessions[key]
	m.mu.Unlock()
	if s != nil && s.hasContent.Load() {
		return true, nil
	}
	// The journal first, then the file: a compaction running meanwhile
	// renames the file into place before it begins the session's next
	// (empty) stream, so whichever moment the journal is asked at, one of the
	// two still shows the entries (asked the other way round, a look at
	// the file just before the rename and at the journal just after found
	// neither, and a Flush right after an Append said "not found").
	logged := m.logs.exists(key)
	if logged {
		return true, nil
	}
	_, err := m.cfg.FS.Lstat(m.cfg.Layout.TranscriptPath(key))
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("session %s: %w", key, errdefs.FromIO(err))
	}
	return false, nil
}

// walk visits every entry below dir (not following symlinks).
func walk(fsys interface {
	ReadDir(string) ([]fs.DirEntry, error)
}, dir string, fn func(path string, d fs.DirEntry) error) error {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		if err := fn(p, d); err != nil {
			return err
		}
		if d.IsDir() {
			if err := walk(fsys, p, fn); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Info describes one session.
type Info struct {
	Key         layout.Key
	Path        string
	Title       string
	Summary     string
	FirstPrompt string
	Cwd         string
	GitBranch   string
	Tag         string
	Archived    bool
	Sidechain   bool
	Damaged     bool
	Entries     uint64
	Bytes       uint64
	Pending     uint64
	Malformed   uint64
	ModifiedMs  int64
	CreatedMs   int64
	Active      bool
}

// stamp reads the stat stamp of key's files and the newest mtime.
func (d *deps) stamp(key layout.Key) (index.Stamp, int64) {
	var st index.Stamp
	var mod int64
	if fi, err := d.cfg.FS.Lstat(d.cfg.Layout.TranscriptPath(key)); err == nil {
		st.CanonSize, st.CanonMtime = fi.Size(), fi.ModTime().UnixNano()
		mod = fi.ModTime().UnixMilli()
	}
	if size, mtime, ok := d.logs.stat(key); ok {
		st.JournalSize, st.JournalMtime = size, mtime.UnixNano()
		if ms := mtime.UnixMilli(); ms > mod {
			mod = ms
		}
	}
	return st, mod
}

// entryFor returns key's listing entry, rebuilding it when the files
// changed behind sessiond's back. Main sessions are kept in the index;
// subagent transcripts are computed on demand.
func (m *Manager) entryFor(ctx context.Context, key layout.Key) (index.Entry, error) {
	if key.Subpath == "" {
		if e, ok := m.ix.Get(key); ok {
			if e.Owned {
				if e.Absent {
					return index.Entry{}, m.notFound(key)
				}
				return e, nil
			}
			if st, _ := m.stamp(key); st == e.Stamp && st != (index.Stamp{}) {
				return e, nil
			}
		}
	}
	logged := m.logs.exists(key)
	if key.Subpath == "" && (logged || m.IsActive(key)) {
		// A writer indexes its session as it opens; make sure one runs.
		// One opened only for this (a journal left behind by a writer
		// whose last compaction failed) moves the journal into the file
		// and retires at once (retireIfOpened).
		err := m.doRetire(ctx, key, retireIfOpened, func(st *state) error {
			if !st.exists() {
				return m.notFound(key)
			}
			st.publish()
			return nil
		})
		if err != nil {
			return index.Entry{}, err
		}
		if e, ok := m.ix.Get(key); ok {
			return e, nil
		}
	}
	stamp, mod := m.stamp(key)
	e := index.Entry{Key: key}
	if key.Subpath == "" {
		title, err := m.titleSidecar(key)
		if err != nil {
			return index.Entry{}, err
		}
		e.Sum.SetSidecarTitle(title)
		s, err := readStore(m.cfg.FS, m.cfg.Layout, key)
		var dmg *damagedError
		if errors.As(err, &dmg) {
			// Read only: the writer that next opens the session keeps a
			// copy of it and starts the summary afresh.
			m.log.Error("the session's store sidecar is damaged; its summary is listed empty", zap.Stringer("session", key),
				zap.String("path", dmg.path), zap.Error(dmg.err))
		} else if err != nil {
			return index.Entry{}, err
		}
		e.Store = s.summary()
	}
	err := m.view(ctx, key, func(r io.Reader, pending int) error {
		e.Pending = uint64(pending)
		sc := lineScanner(r)
		for sc.Scan() {
			e.Add(sc.Line(), sc.HasNewline())
		}
		return sc.Err()
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = m.notFound(key)
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("index %s: %w", key, errdefs.FromIO(err))
		}
		return index.Entry{}, err
	}
	e.Stamp, e.ModifiedMs = stamp, mod
	if key.Subpath == "" {
		m.ix.Put(e)
	}
	return e, nil
}

func (m *Manager) infoFrom(key layout.Key, e index.Entry) (Info, error) {
	in := Info{
		Key: key, Path: m.cfg.Layout.TranscriptPath(key),
		Title: e.Sum.Title, Summary: e.Sum.Display(), FirstPrompt: e.Sum.FirstPrompt, Cwd: e.Sum.Cwd,
		GitBranch: e.Sum.GitBranch, Tag: e.Sum.Tag, Sidechain: e.Sum.IsSidechain,
		Damaged: e.Damaged(), Entries: e.Entries, Bytes: e.Bytes, Malformed: e.Malformed, Pending: e.Pending,
		ModifiedMs: e.ModifiedMs, CreatedMs: e.Sum.CreatedAt, Active: m.IsActive(key),
	}
	if key.Subpath == "" {
		var err error
		if in.Archived, err = m.archived(key, e.LastPromptMs); err != nil {
			return Info{Key: key}, err
		}
	}
	return in, nil
}

// Info describes key.
func (m *Manager) Info(ctx context.Context, key layout.Key) (Info, error) {
	if err := key.Validate(); err != nil {
		return Info{}, err
	}
	if !m.existsOnDisk(key) {
		return Info{Key: key}, m.notFound(key)
	}
	e, err := m.entryFor(ctx, key)
	if err != nil {
		return Info{Key: key}, err
	}
	return m.infoFrom(key, e)
}

// ListOptions select and page a listing.
type ListOptions struct {
	ProjectKey      string // "" for every project
	Limit, Offset   int
	Continue        bool // only the newest non-sidechain session
	ExcludeArchived bool
}

// List describes the main sessions of one project (or of every project),
// newest first, from the index: only sessions whose files changed behind
// sessiond's back are read again. It returns the page and the total.
func (m *Manager) List(ctx context.Context, opt ListOptions) ([]Info, int, error) {
	return m.list(ctx, opt, nil)
}

// list is List, counting the sessions it indexes into op.
func (m *Manager) list(ctx context.Context, opt ListOptions, op *progress.Op) ([]Info, int, error) {
	keys, err := m.mainKeys(opt.ProjectKey)
	if err != nil {
		return nil, 0, err
	}
	op.SetTotal(int64(len(keys)))
	present := make(map[layout.Key]bool, len(keys))
	out := make([]Info, 0, len(keys))
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		e, err := m.entryFor(ctx, k)
		op.Add(1)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		present[k] = true
		in, err := m.infoFrom(k, e)
		if err != nil {
			return nil, 0, err
		}
		if opt.ExcludeArchived && in.Archived {
			continue
		}
		if opt.Continue && in.Sidechain {
			continue
		}
		out = append(out, in)
	}
	for _, k := range m.ix.Keys(opt.ProjectKey) {
		if !present[k] && !m.IsActive(k) {
			m.ix.Delete(k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ModifiedMs != out[j].ModifiedMs {
			return out[i].ModifiedMs > out[j].ModifiedMs
		}
		return out[i].Key.String() < out[j].Key.String()
	})
	total := len(out)
	if opt.Continue && len(out) > 1 {
		out = out[:1]
	}
	if opt.Offset > 0 {
		if opt.Offset >= len(out) {
			out = nil
		} else {
			out = out[opt.Offset:]
		}
	}
	if opt.Limit > 0 && len(out) > opt.Limit {
		out = out[:opt.Limit]
	}
	return out, total, nil
}

// Summary is one session's SessionStore summary.
type Summary struct {
	Key     layout.Key
	Data    []byte
	Version uint64
	// ModifiedMs is the session's, as List reports it, while no line was
	// added after the summary; else when the summary was stored, older.
	ModifiedMs int64
	// Covers is how many lines the summary was folded from; Entries how
	// many the transcript holds.
	Covers, Entries uint64
}

// ListSummaries returns the summaries of projectKey's sessions (only
// sessionID's when set), newest first; sessions without one are left out.
func (m *Manager) ListSummaries(ctx context.Context, projectKey, sessionID string) ([]Summary, error) {
	if err := layout.ValidateProjectKey(projectKey); err != nil {
		return nil, err
	}
	var keys []layout.Key
	if sessionID != "" {
		k := layout.Key{ProjectKey: projectKey, SessionID: sessionID}
		if err := k.Validate(); err != nil {
			return nil, err
		}
		keys = []layout.Key{k}
	} else {
		var err error
		if keys, err = m.mainKeys(projectKey); err != nil {
			return nil, err
		}
	}
	var out []Summary
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, err := m.entryFor(ctx, k)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e.Store.Version > 0 {
			out = append(out, Summary{Key: k, Data: e.Store.Data, Version: e.Store.Version, ModifiedMs: e.StoreMtime(),
				Covers: e.Store.Entries, Entries: e.Entries})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ModifiedMs != out[j].ModifiedMs {
			return out[i].ModifiedMs > out[j].ModifiedMs
		}
		return out[i].Key.SessionID < out[j].Key.SessionID
	})
	return out, nil
}

// WarmIndex indexes every session on disk, so that the first listing is as
// fast as the next ones. The daemon runs it at start.
func (m *Manager) WarmIndex(ctx context.Context) error {
	op := m.progress.Start(ctx, "index", "sessions", 0)
	defer op.End()
	_, _, err := m.list(ctx, ListOptions{}, op)
	return err
}

// mainKeys lists the main sessions of one project (or all) without reading
// any transcript: folder listings, journals, open writers.
func (m *Manager) mainKeys(projectKey string) ([]layout.Key, error) {
	L := m.cfg.Layout
	var projects []string
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		projects = []string{projectKey}
	} else {
		ents, err := m.cfg.FS.ReadDir(L.ProjectsDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", L.ProjectsDir(), errdefs.FromIO(err))
		}
		for _, e := range ents {
			if e.IsDir() {
				projects = append(projects, e.Name())
			}
		}
	}
	set := map[layout.Key]bool{}
	for _, p := range projects {
		dir := L.ProjectDir(p)
		ents, err := m.cfg.FS.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			if k, ok := L.ParseTranscriptPath(filepath.Join(dir, e.Name())); ok && k.Subpath == "" {
				set[k] = true
			}
		}
	}
	// Sessions that so far live only in a journal, or in a writer.
	m.mu.Lock()
	for k := range m.sessions {
		if k.Subpath == "" && (projectKey == "" || k.ProjectKey == projectKey) {
			set[k] = true
		}
	}
	m.mu.Unlock()
	logged := m.logs.mainKeys(projectKey)
	for _, k := range logged {
		set[k] = true
	}
	return sortedKeys(set, layout.Key.Less), nil
}

// Find returns the keys of every session with this id (and subpath) in any
// project: open writers, canonical files and journals. The id may be in
// either case (see SessionKey).
func (m *Manager) Find(sessionID, subpath string) ([]layout.Key, error) {
	if err := layout.ValidateSessionID(sessionID); err != nil {
		return nil, err
	}
	if subpath != "" {
		if err := layout.ValidateSubpath(subpath); err != nil {
			return nil, err
		}
	}
	// The lower-case form first: an id in upper case finds the session
	// stored under lower case, and only where there is none the one an
	// earlier release stored under the id as given.
	for _, id := range layout.SessionIDForms(sessionID) {
		keys, err := m.find(id, subpath)
		if err != nil || len(keys) > 0 {
			return keys, err
		}
	}
	return nil, nil
}

func (m *Manager) find(sessionID, subpath string) ([]layout.Key, error) {
	found := make(map[layout.Key]bool)
	m.mu.Lock()
	for k := range m.sessions {
		if k.SessionID == sessionID && k.Subpath == subpath {
			found[k] = true
		}
	}
	m.mu.Unlock()
	onDisk, err := inProjects(m.cfg.FS, m.cfg.Layout.ProjectsDir(), sessionID, subpath, m.cfg.Layout.TranscriptPath)
	if err != nil {
		return nil, err
	}
	logged := m.logs.projectsWith(sessionID, subpath)
	for _, k := range append(onDisk, logged...) {
		found[k] = true
	}
	return sortedKeys(found, func(a, b layout.Key) bool { return a.ProjectKey < b.ProjectKey }), nil
}

// SessionKey returns the key under which the session k names is stored:
// one UUID is one session whatever its case, and sessiond stores every
// session under the lower-case id (layout.CanonicalSessionID). A session
// an earlier release stored under an upper- or mixed-case id, exactly as
// given, is kept under that name while no lower-case one exists, so that
// writing to it does not start a second file for the same UUID.
func (m *Manager) SessionKey(k layout.Key) layout.Key {
	forms := layout.SessionIDForms(k.SessionID)
	if len(forms) > 1 {
		for _, id := range forms {
			c := k
			c.SessionID = id
			if m.sessionStored(c) {
				return c
			}
		}
	}
	k.SessionID = forms[0]
	return k
}

// sessionStored reports whether k's session has anything under its id:
// a writer, logged entries, its transcript or its session folder. A disk
// that cannot tell counts as yes.
func (m *Manager) sessionStored(k layout.Key) bool {
	if ok, err := m.existsOnDiskErr(k.Main()); ok || err != nil {
		return true
	}
	if k.Subpath != "" {
		if ok, err := m.existsOnDiskErr(k); ok || err != nil {
			return true
		}
	}
	_, err := m.cfg.FS.Lstat(m.cfg.Layout.SessionDir(k))
	return !errors.Is(err, fs.ErrNotExist)
}

// inProjects returns the keys of sessionID (and subpath) in the projects
// that are folders of dir, where path(key) is a regular file.
func inProjects(FS fsys.FS, dir, sessionID, subpath string, path func(layout.Key) string) ([]layout.Key, error) {
	ents, err := FS.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	var keys []layout.Key
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		k := layout.Key{ProjectKey: e.Name(), SessionID: sessionID, Subpath: subpath}
		if k.Validate() != nil {
			continue
		}
		if fi, err := FS.Lstat(path(k)); err == nil && fi.Mode().IsRegular() {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// sortedKeys returns the keys of set in the order less gives.
func sortedKeys(set map[layout.Key]bool, less func(a, b layout.Key) bool) []layout.Key {
	keys := make([]layout.Key, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
	return keys
}

// byName orders keys by their string form.
func byName(a, b layout.Key) bool { return a.String() < b.String() }

// lineScanner scans r. A file handed over whole (view's path for a session
// without journal) is scanned by offset, so a huge line costs one buffer
// of its size (see transcript.NewLineScannerAt).
func lineScanner(r io.Reader) *transcript.LineScanner {
	if f, ok := r.(fsys.File); ok {
		return transcript.NewLineScannerAt(f)
	}
	return transcript.NewLineScanner(r)
}

// journaledKeys lists the open sessions and every session with a journal
// on disk, sorted.
func (m *Manager) journaledKeys() ([]layout.Key, error) {
	set := make(map[layout.Key]bool)
	m.mu.Lock()
	for k := range m.sessions {
		set[k] = true
	}
	m.mu.Unlock()
	logged := m.logs.keys()
	for _, k := range logged {
		set[k] = true
	}
	return sortedKeys(set, byName), nil
}
