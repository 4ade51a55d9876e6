package trash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

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

// stampLayout is how an entry's name stamps the time of its delete.
const stampLayout = "20060102T150405.000000000Z"

// purgePrefix starts the name a copy takes while it is purged: renamed
// first, it is gone from every listing at once, whole or not at all.
const purgePrefix = ".purge-"

func (t *Trash) root() string { return filepath.Join(t.cfg.Layout.StateDir, "trash") }

// entryName is an entry's name taken apart.
type entryName struct {
	sessionID string
	deleted   time.Time
	lone      string // a lone subagent's subpath with / as _, else ""
}

func parseName(name string) (entryName, bool) {
	// A session id may hold '-' itself, but never the stamp's upper-case
	// 'T' and 'Z' (a UUID has neither, any other id is lower case): the
	// first '-' followed by a stamp ends the id.
	const n = len(stampLayout)
	for i := 1; i+1+n <= len(name); i++ {
		if name[i] != '-' {
			continue
		}
		rest := name[i+1:]
		if len(rest) > n && rest[n] != '-' {
			continue
		}
		at, err := time.Parse(stampLayout, rest[:n])
		if err != nil {
			continue
		}
		sid := name[:i]
		if layout.ValidateSessionID(sid) != nil {
			return entryName{}, false
		}
		lone := ""
		if len(rest) > n {
			lone = rest[n+1:]
		}
		return entryName{sessionID: sid, deleted: at, lone: lone}, true
	}
	return entryName{}, false
}

// entries returns the trash entries holding key's session (or, with
// a subpath, that subagent transcript deleted on its own), oldest first.
func (t *Trash) entries(key layout.Key) ([]string, error) {
	dir := filepath.Join(t.root(), key.ProjectKey)
	ents, err := t.cfg.FS.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.Unreadable("the trash of project "+key.ProjectKey, err)
	}
	var names []string
	for _, e := range ents {
		n, ok := parseName(e.Name())
		if !e.IsDir() || !ok || n.sessionID != key.SessionID {
			continue
		}
		if (n.lone != "") != (key.Subpath != "") || n.lone != "" && n.lone != loneName(key.Subpath) {
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

// Projects lists the projects whose trash holds sessionID (or,
// with a subpath, that subagent transcript of it, deleted on its own). A
// trash that cannot be listed is an error, not an empty list: a restore
// would answer "not in the trash" for a copy that is there.
func (t *Trash) Projects(sessionID, subpath string) ([]string, error) {
	projects, err := t.cfg.FS.ReadDir(t.root())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Unreadable("the trash", err)
	}
	var out []string
	for _, p := range projects {
		if !p.IsDir() || layout.ValidateProjectKey(p.Name()) != nil {
			continue
		}
		k := layout.Key{ProjectKey: p.Name(), SessionID: sessionID, Subpath: subpath}
		es, err := t.entries(k)
		if err != nil {
			return nil, err
		}
		if len(es) > 0 {
			out = append(out, p.Name())
		}
	}
	return out, nil
}

// Copy is one deleted copy in the trash.
type Copy struct {
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

// List lists the trashed copies of one project ("" for every
// project), of one session ("" for every session), oldest first within a
// session.
func (t *Trash) List(ctx context.Context, projectKey, sessionID string) ([]Copy, error) {
	FS, root := t.cfg.FS, t.root()
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
	var out []Copy
	for _, p := range projects {
		ents, err := FS.ReadDir(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the trash: %w", errdefs.FromIO(err))
		}
		for _, e := range ents {
			n, ok := parseName(e.Name())
			if !e.IsDir() || !ok || sessionID != "" && n.sessionID != sessionID {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			c, err := t.describeCopy(filepath.Join(root, p, e.Name()), layout.Key{ProjectKey: p, SessionID: n.sessionID}, n)
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
func (t *Trash) describeCopy(path string, key layout.Key, n entryName) (Copy, error) {
	c := Copy{Key: key, Path: path, DeletedAt: n.deleted}
	err := fsys.Walk(t.cfg.FS, path, func(p string, d fs.DirEntry) error {
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
		lines, err := countLines(t.cfg.FS, p)
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

// Usage is what the trash holds.
type Usage struct {
	Copies int
	Bytes  int64
	// Retention is how long a copy is kept (Config.Retention).
	Retention time.Duration
}

// usageMaxAge bounds how long Usage answers from its last count:
// sessiond's own deletes, restores and purges recount at once, but files
// removed by hand are seen only then.
const usageMaxAge = time.Minute

// Usage counts the copies in the trash and the bytes of their files.
func (t *Trash) Usage() Usage {
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	if t.count != nil && now.Sub(t.countAt) < usageMaxAge {
		u := *t.count
		t.mu.Unlock()
		return u
	}
	gen := t.gen
	t.mu.Unlock()
	u := Usage{Retention: t.cfg.Retention}
	FS, root := t.cfg.FS, t.root()
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
			if _, ok := parseName(e.Name()); !ok || !e.IsDir() {
				continue
			}
			u.Copies++
			err := fsys.Walk(FS, filepath.Join(root, p.Name(), e.Name()), func(_ string, d fs.DirEntry) error {
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
		t.log.Warn("the trash could not be listed whole; its usage is counted short until it can")
		return u
	}
	t.mu.Lock()
	if t.gen == gen { // no delete, restore or purge meanwhile
		t.count, t.countAt = &u, now
	}
	t.mu.Unlock()
	return u
}

// changed drops the count Usage keeps.
func (t *Trash) changed() {
	t.mu.Lock()
	t.gen++
	t.count = nil
	t.mu.Unlock()
}
