package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/transcript"
)

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

// ListOptions select and page a listing.
type ListOptions struct {
	ProjectKey      string // "" for every project
	Limit, Offset   int
	Continue        bool // only the newest non-sidechain session
	ExcludeArchived bool
}

// Info describes key.
func (c *Catalog) Info(ctx context.Context, key layout.Key) (Info, error) {
	if err := key.Validate(); err != nil {
		return Info{}, err
	}
	if !c.exists(key) {
		return Info{Key: key}, c.w.NotFound(key)
	}
	e, err := c.entryFor(ctx, key)
	if err != nil {
		return Info{Key: key}, err
	}
	return c.infoFrom(key, e)
}

// List describes the main sessions of one project (or of every project),
// newest first, from the index: only sessions whose files changed behind
// sessiond's back are read again. It returns the page and the total.
func (c *Catalog) List(ctx context.Context, opt ListOptions) ([]Info, int, error) {
	out, err := c.list(ctx, opt, nil)
	if err != nil {
		return nil, 0, err
	}
	page, total := paged(out, opt)
	return page, total, nil
}

// WarmIndex indexes every session on disk, so that the first listing is as
// fast as the next ones. The daemon runs it at start.
func (c *Catalog) WarmIndex(ctx context.Context) error {
	var op *progress.Op
	if c.progress != nil {
		op = c.progress.Start(ctx, "index", "sessions", 0)
		defer op.End()
	}
	_, err := c.list(ctx, ListOptions{}, op)
	return err
}

// list describes the sessions opt selects, newest first, counting the
// sessions it indexes into op; it forgets the index entries of sessions
// that are gone.
func (c *Catalog) list(ctx context.Context, opt ListOptions, op *progress.Op) ([]Info, error) {
	keys, err := c.mainKeys(opt.ProjectKey)
	if err != nil {
		return nil, err
	}
	op.SetTotal(int64(len(keys)))
	present := make(map[layout.Key]bool, len(keys))
	out := make([]Info, 0, len(keys))
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, err := c.entryFor(ctx, k)
		op.Add(1)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		present[k] = true
		in, err := c.infoFrom(k, e)
		if err != nil {
			return nil, err
		}
		if (opt.ExcludeArchived && in.Archived) || (opt.Continue && in.Sidechain) {
			continue
		}
		out = append(out, in)
	}
	for _, k := range c.ix.Keys(opt.ProjectKey) {
		if !present[k] && !c.w.IsActive(k) {
			c.ix.Delete(k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ModifiedMs != out[j].ModifiedMs {
			return out[i].ModifiedMs > out[j].ModifiedMs
		}
		return out[i].Key.String() < out[j].Key.String()
	})
	return out, nil
}

// paged cuts the page opt asks for out of a sorted listing; the total
// counts what Continue keeps, before the page is cut.
func paged(out []Info, opt ListOptions) ([]Info, int) {
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
	return out, total
}

// Summary is one session's SessionStore summary in one folder.
type Summary struct {
	Key     layout.Key
	Folder  string
	Data    []byte
	Version uint64
	// ModifiedMs is the session's, as List reports it, while no line was
	// added after the summary; else when the summary was stored, older.
	ModifiedMs int64
	// Covers is how many lines the summary was folded from; Entries how
	// many the transcript holds.
	Covers, Entries uint64
}

// ListSummaries returns the summaries in folder of projectKey's sessions
// (only sessionID's when set), newest first; sessions without one there
// are left out.
func (c *Catalog) ListSummaries(ctx context.Context, projectKey, sessionID, folder string) ([]Summary, error) {
	keys, err := c.summaryKeys(projectKey, sessionID)
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, err := c.entryFor(ctx, k)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s := e.Stores[folder]; s.Version > 0 {
			out = append(out, Summary{Key: k, Folder: folder, Data: s.Data, Version: s.Version, ModifiedMs: e.StoreMtime(folder),
				Covers: s.Entries, Entries: e.Entries})
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

// summaryKeys is the one session ListSummaries asks for, or every main
// session of the project.
func (c *Catalog) summaryKeys(projectKey, sessionID string) ([]layout.Key, error) {
	if err := layout.ValidateProjectKey(projectKey); err != nil {
		return nil, err
	}
	if sessionID == "" {
		return c.mainKeys(projectKey)
	}
	k := layout.Key{ProjectKey: projectKey, SessionID: sessionID}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return []layout.Key{k}, nil
}

// Sidecars reads the session sidecars key's session has here (key names
// the session; its subpath is ignored), sorted by name; none is no error.
func (c *Catalog) Sidecars(key layout.Key) ([]sidecar.Sidecar, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	return sidecar.ReadAll(c.fs, c.layout.SessionDir(key.Main()))
}

// entryFor returns key's listing entry, rebuilding it when the files
// changed behind sessiond's back. Main sessions are kept in the index;
// subagent transcripts are computed on demand.
func (c *Catalog) entryFor(ctx context.Context, key layout.Key) (index.Entry, error) {
	if key.Subpath == "" {
		if e, ok := c.ix.Get(key); ok {
			if e.Owned {
				if e.Absent {
					return index.Entry{}, c.w.NotFound(key)
				}
				return e, nil
			}
			if st, _ := c.w.Stamp(key); st == e.Stamp && st != (index.Stamp{}) {
				return e, nil
			}
		}
		// A writer indexes its session as it opens: a session in the
		// journal or a writer is listed as its writer sees it.
		published, err := c.w.Publish(ctx, key)
		if err != nil {
			return index.Entry{}, err
		}
		if e, ok := c.ix.Get(key); published && ok {
			return e, nil
		}
	}
	return c.scan(ctx, key)
}

// scan computes key's listing entry from its files, and keeps a main
// session's in the index.
func (c *Catalog) scan(ctx context.Context, key layout.Key) (index.Entry, error) {
	stamp, mod := c.w.Stamp(key)
	e := index.Entry{Key: key}
	if key.Subpath == "" {
		title, err := sidecar.Title(c.fs, c.layout.SessionDir(key))
		if err != nil {
			return index.Entry{}, err
		}
		e.Sum.SetSidecarTitle(title)
		if e.Stores, err = c.w.StoreSummaries(key); err != nil {
			return index.Entry{}, err
		}
	}
	err := c.w.View(ctx, key, func(r io.Reader, pending int) error {
		e.Pending = uint64(pending)
		sc := lineScanner(r)
		for sc.Scan() {
			e.Add(sc.Line(), sc.HasNewline())
		}
		return sc.Err()
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = c.w.NotFound(key)
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("index %s: %w", key, errdefs.FromIO(err))
		}
		return index.Entry{}, err
	}
	e.Stamp, e.ModifiedMs = stamp, mod
	if key.Subpath == "" {
		c.ix.Put(e)
	}
	return e, nil
}

func (c *Catalog) infoFrom(key layout.Key, e index.Entry) (Info, error) {
	in := Info{
		Key: key, Path: c.layout.TranscriptPath(key),
		Title: e.Sum.Title, Summary: e.Sum.Display(), FirstPrompt: e.Sum.FirstPrompt, Cwd: e.Sum.Cwd,
		GitBranch: e.Sum.GitBranch, Tag: e.Sum.Tag, Sidechain: e.Sum.IsSidechain,
		Damaged: e.Damaged(), Entries: e.Entries, Bytes: e.Bytes, Malformed: e.Malformed, Pending: e.Pending,
		ModifiedMs: e.ModifiedMs, CreatedMs: e.Sum.CreatedAt, Active: c.w.IsActive(key),
	}
	if key.Subpath == "" {
		var err error
		if in.Archived, err = sidecar.Archived(c.fs, c.layout.SessionDir(key), e.LastPromptMs); err != nil {
			return Info{Key: key}, err
		}
	}
	return in, nil
}

// lineScanner scans r. A file handed over whole (View's path for a
// session without journal) is scanned by offset, so a huge line costs one
// buffer of its size (see transcript.NewLineScannerAt).
func lineScanner(r io.Reader) *transcript.LineScanner {
	if f, ok := r.(fsys.File); ok {
		return transcript.NewLineScannerAt(f)
	}
	return transcript.NewLineScanner(r)
}
