package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// The trash is StateDir/trash/<project>/<entry>, one entry per deleted
// copy (Delete names them): <sid>-<stamp> for a whole session,
// <sid>-<stamp>-<subpath with / as _> for a subagent transcript deleted on
// its own. The stamp is the time of the delete and has no "-", so the
// names of one session sort by it. Each entry mirrors the project folder:
// <sid>.jsonl and the <sid> folder.

// trashStampLayout is how an entry's name stamps the time of its delete.
const trashStampLayout = "20060102T150405.000000000Z"

// purgePrefix starts the name a copy takes while it is purged: renamed
// first, it is gone from every listing at once, whole or not at all.
const purgePrefix = ".purge-"

func (m *Manager) trashRoot() string { return filepath.Join(m.cfg.Layout.StateDir, "trash") }

// trashName is an entry's name taken apart.
type trashName struct {
	sessionID string
	deleted   time.Time
	lone      string // a lone subagent's subpath with / as _, else ""
}

func parseTrashName(name string) (trashName, bool) {
	// A session id may hold '-' itself, but never the stamp's upper-case
	// 'T' and 'Z' (a UUID has neither, any other id is lower case): the
	// first '-' followed by a stamp ends the id.
	const n = len(trashStampLayout)
	for i := 1; i+1+n <= len(name); i++ {
		if name[i] != '-' {
			continue
		}
		rest := name[i+1:]
		if len(rest) > n && rest[n] != '-' {
			continue
		}
		at, err := time.Parse(trashStampLayout, rest[:n])
		if err != nil {
			continue
		}
		sid := name[:i]
		if layout.ValidateSessionID(sid) != nil {
			return trashName{}, false
		}
		lone := ""
		if len(rest) > n {
			lone = rest[n+1:]
		}
		return trashName{sessionID: sid, deleted: at, lone: lone}, true
	}
	return trashName{}, false
}

// trashEntries returns the trash entries holding key's session (or, with
// a subpath, that subagent transcript deleted on its own), oldest first.
func (m *Manager) trashEntries(key layout.Key) ([]string, error) {
	dir := filepath.Join(m.trashRoot(), key.ProjectKey)
	ents, err := m.cfg.FS.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, unreadable("the trash of project "+key.ProjectKey, err)
	}
	var names []string
	for _, e := range ents {
		n, ok := parseTrashName(e.Name())
		if !e.IsDir() || !ok || n.sessionID != key.SessionID {
			continue
		}
		if (n.lone != "") != (key.Subpath != "") || n.lone != "" && n.lone != trashSubpath(key.Subpath) {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for i, n := range names {
		names[i] = filepath.Join(dir, n)
	}
	return names, nil
}

// TrashedProjects lists the projects whose trash holds sessionID (or,
// with a subpath, that subagent transcript of it, deleted on its own). A
// trash that cannot be listed is an error, not an empty list: a restore
// would answer "not in the trash" for a copy that is there.
func (m *Manager) TrashedProjects(sessionID, subpath string) ([]string, error) {
	projects, err := m.cfg.FS.ReadDir(m.trashRoot())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unreadable("the trash", err)
	}
	var out []string
	for _, p := range projects {
		if !p.IsDir() || layout.ValidateProjectKey(p.Name()) != nil {
			continue
		}
		k := layout.Key{ProjectKey: p.Name(), SessionID: sessionID, Subpath: subpath}
		es, err := m.trashEntries(k)
		if err != nil {
			return nil, err
		}
		if len(es) > 0 {
			out = append(out, p.Name())
		}
	}
	return out, nil
}

// TrashedCopy is one deleted copy in the trash.
type TrashedCopy struct {
	// Key is the session; Subpath is set for a subagent transcript
	// deleted on its own.
	Key       layout.Key
	Path      string
	DeletedAt time.Time
	// Entries are the lines of its transcripts (subagents' included),
	// Transcripts how many it holds, Bytes the size of all its files.
	Entries     uint64
	Transcripts int
	Bytes       int64
}

// ListTrash lists the trashed copies of one project ("" for every
// project), of one session ("" for every session), oldest first within a
// session.
func (m *Manager) ListTrash(ctx context.Context, projectKey, sessionID string) ([]TrashedCopy, error) {
	FS, root := m.cfg.FS, m.trashRoot()
	var projects []string
	if projectKey != "" {
		projects = []string{projectKey}
	} else {
		ents, err := FS.ReadDir(root)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list the trash: %w", errdefs.FromIO(err))
		}
		for _, e := range ents {
			if e.IsDir() && layout.ValidateProjectKey(e.Name()) == nil {
				projects = append(projects, e.Name())
			}
		}
	}
	var out []TrashedCopy
	for _, p := range projects {
		ents, err := FS.ReadDir(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the trash: %w", errdefs.FromIO(err))
		}
		for _, e := range ents {
			n, ok := parseTrashName(e.Name())
			if !e.IsDir() || !ok || sessionID != "" && n.sessionID != sessionID {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			c, err := m.describeCopy(filepath.Join(root, p, e.Name()), layout.Key{ProjectKey: p, SessionID: n.sessionID}, n)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key != b.Key {
			return a.Key.Less(b.Key)
		}
		return a.Path < b.Path
	})
	return out, nil
}

// describeCopy counts what one trash entry holds.
func (m *Manager) describeCopy(path string, key layout.Key, n trashName) (TrashedCopy, error) {
	c := TrashedCopy{Key: key, Path: path, DeletedAt: n.deleted}
	err := walk(m.cfg.FS, path, func(p string, d fs.DirEntry) error {
		if !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			c.Bytes += fi.Size()
		}
		if !strings.HasSuffix(p, layout.TranscriptExt) {
			return nil
		}
		c.Transcripts++
		if n.lone != "" {
			// The subpath is where the file lies: the name lost its "/".
			rel, _ := filepath.Rel(filepath.Join(path, key.SessionID), p)
			c.Key.Subpath = filepath.ToSlash(strings.TrimSuffix(rel, layout.TranscriptExt))
		}
		lines, err := countLines(m.cfg.FS, p)
		c.Entries += lines
		return err
	})
	if err != nil {
		return c, fmt.Errorf("read trash entry %s: %w", path, errdefs.FromIO(err))
	}
	return c, nil
}

// countLines counts the lines of a file, a torn last one included.
func countLines(FS fsys.FS, path string) (uint64, error) {
	var n uint64
	err := scanLines(FS, path, func([]byte) error { n++; return nil })
	return n, err
}

// TrashUsage is what the trash holds.
type TrashUsage struct {
	Copies int
	Bytes  int64
	// Retention is how long a copy is kept (Config.TrashRetention).
	Retention time.Duration
}

// trashUsageMaxAge bounds how long TrashUsage answers from its last count:
// sessiond's own deletes, restores and purges recount at once, but files
// removed by hand are seen only then.
const trashUsageMaxAge = time.Minute

// TrashUsage counts the copies in the trash and the bytes of their files.
func (m *Manager) TrashUsage() TrashUsage {
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	if m.trashCount != nil && now.Sub(m.trashCountAt) < trashUsageMaxAge {
		u := *m.trashCount
		m.mu.Unlock()
		return u
	}
	gen := m.trashGen
	m.mu.Unlock()
	u := TrashUsage{Retention: m.cfg.TrashRetention}
	FS, root := m.cfg.FS, m.trashRoot()
	// A listing that failed (not for absence) makes the count short: it
	// is answered, but not kept, so the next call counts again.
	short := false
	list := func(dir string) []fs.DirEntry {
		ents, err := FS.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			short = true
		}
		return ents
	}
	for _, p := range list(root) {
		for _, e := range list(filepath.Join(root, p.Name())) {
			if _, ok := parseTrashName(e.Name()); !ok || !e.IsDir() {
				continue
			}
			u.Copies++
			err := walk(FS, filepath.Join(root, p.Name(), e.Name()), func(_ string, d fs.DirEntry) error {
				if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
					u.Bytes += fi.Size()
				} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
					short = true
				}
				return nil
			})
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				short = true
			}
		}
	}
	if short {
		m.log.Warn("the trash could not be listed whole; its usage is counted short until it can")
		return u
	}
	m.mu.Lock()
	if m.trashGen == gen { // no delete, restore or purge meanwhile
		m.trashCount, m.trashCountAt = &u, now
	}
	m.mu.Unlock()
	return u
}

// trashChanged drops the count TrashUsage keeps.
func (m *Manager) trashChanged() {
	m.mu.Lock()
	m.trashGen++
	m.trashCount = nil
	m.mu.Unlock()
}

// PurgeTrash removes the trashed copies deleted longer than
// Config.TrashRetention ago, and what an interrupted purge left. A copy
// whose session a delete or restore is working on is left for the next
// purge. It returns how many copies it removed.
func (m *Manager) PurgeTrash(ctx context.Context) (int, error) {
	FS, root := m.cfg.FS, m.trashRoot()
	projects, err := FS.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the trash: %w", errdefs.FromIO(err))
	}
	cutoff := m.cfg.Clock.Now().Add(-m.cfg.TrashRetention)
	purged := 0
	var errs []error
	for _, p := range projects {
		dir := filepath.Join(root, p.Name())
		ents, err := FS.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err)))
			}
			continue
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return purged, err
			}
			name := e.Name()
			if strings.HasPrefix(name, purgePrefix) {
				if err := fsys.RemoveAll(FS, filepath.Join(dir, name)); err != nil {
					errs = append(errs, fmt.Errorf("remove %s: %w", filepath.Join(dir, name), errdefs.FromIO(err)))
				}
				continue
			}
			n, ok := parseTrashName(name)
			if !ok || !e.IsDir() || !n.deleted.Before(cutoff) {
				continue
			}
			done, err := m.purgeCopy(dir, name, family{p.Name(), n.sessionID})
			if err != nil {
				errs = append(errs, err)
			}
			if done {
				purged++
			}
		}
	}
	if purged > 0 {
		m.trashChanged()
		m.log.Info("purged old copies from the trash", zap.Int("copies", purged), zap.Duration("retention", m.cfg.TrashRetention))
	}
	return purged, errors.Join(errs...)
}

// purgeCopy removes one trash entry, unless a delete or restore of its
// session is running or unfinished (a restore may be reading it); delete
// and restore wait for it meanwhile (lockFamily).
func (m *Manager) purgeCopy(dir, name string, f family) (bool, error) {
	m.mu.Lock()
	if _, busy := m.busy[f]; busy || m.intents[f] != nil || m.purging[f] != nil {
		m.mu.Unlock()
		return false, nil
	}
	if m.purging == nil {
		m.purging = make(map[family]chan struct{})
	}
	done := make(chan struct{})
	m.purging[f] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.purging, f)
		m.mu.Unlock()
		close(done)
	}()
	aside := filepath.Join(dir, purgePrefix+name)
	if err := fsys.Move(m.cfg.FS, filepath.Join(dir, name), aside); err != nil {
		return false, fmt.Errorf("purge %s from the trash: %w", filepath.Join(dir, name), errdefs.FromIO(err))
	}
	if err := fsys.RemoveAll(m.cfg.FS, aside); err != nil {
		return true, fmt.Errorf("purge %s from the trash: %w", aside, errdefs.FromIO(err))
	}
	return true, nil
}

// trashPurgeEvery is how often RunTrashPurge looks for copies past their
// retention (more often when the retention is shorter).
const trashPurgeEvery = time.Hour

// RunTrashPurge purges the trash (PurgeTrash) now and then every hour
// until ctx ends. The daemon runs it once recovery has finished the
// interrupted deletes and restores.
func (m *Manager) RunTrashPurge(ctx context.Context) {
	every := min(trashPurgeEvery, m.cfg.TrashRetention)
	t := m.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if _, err := m.PurgeTrash(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("purging old copies from the trash failed; retried later", zap.Error(err))
		}
		t.Reset(every)
	}
}
