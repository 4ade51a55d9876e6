// Package catalog lists and finds sessions: which transcripts exist (in
// the folders, the journal, the live writers), where a session id is
// stored, and each session's listing entry (title, summary, counts,
// archive mark), kept in the index the writers publish to so that a
// listing reads no transcript twice. What only the writers know it asks
// through Writers; it never writes a transcript.
package catalog

import (
	"context"
	"io"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
)

// Writers is what the catalog needs from the session writers (the
// writer.Manager): what is in the journal or held by a live writer, which
// the folders do not show yet.
type Writers interface {
	// Exists reports whether key's transcript is here (a live writer's
	// entries, the journal or the file), telling "no" from "could not
	// look".
	Exists(key layout.Key) (bool, error)
	// NotFound is the error for key's transcript not being here.
	NotFound(key layout.Key) error
	// IsActive reports whether a writer holds key open.
	IsActive(key layout.Key) bool
	// WriterKeys lists the transcripts with a live writer or entries in
	// the journal, sorted.
	WriterKeys() []layout.Key
	// Publish has key's writer publish its listing entry to the index
	// when key has a live writer or journaled entries (a writer opened
	// only for this retires at once); it reports whether it did. When it
	// did not, the files are the whole truth.
	Publish(ctx context.Context, key layout.Key) (bool, error)
	// View calls fn with a reader over key's whole content, the file and
	// then the journaled entries, and how many of those there are.
	View(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error
	// Stamp is the stat stamp of key's files (transcript and journal) and
	// their newest mtime in ms.
	Stamp(key layout.Key) (index.Stamp, int64)
	// StoreSummaries reads key's SessionStore summaries, by folder, from
	// its store sidecar (a damaged one reads as none).
	StoreSummaries(key layout.Key) (index.StoreSummaries, error)
}

// Config sets a Catalog up.
type Config struct {
	FS     fsys.FS
	Layout layout.Layout
	// Index is the one the writers publish to.
	Index  *index.Index
	Logger *zap.Logger
	// Progress shows WarmIndex among the long operations; nil: nowhere.
	Progress *progress.Registry
}

// Catalog lists and finds the sessions of one transcripts root.
type Catalog struct {
	fs       fsys.FS
	layout   layout.Layout
	ix       *index.Index
	log      *zap.Logger
	progress *progress.Registry
	w        Writers
}

// New returns the catalog of cfg's folders, whose writers are w.
func New(cfg Config, w Writers) *Catalog {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Index == nil {
		cfg.Index = index.New()
	}
	if cfg.FS == nil {
		cfg.FS = fsys.OS
	}
	return &Catalog{fs: cfg.FS, layout: cfg.Layout, ix: cfg.Index, log: cfg.Logger, progress: cfg.Progress, w: w}
}

// exists is Writers.Exists for callers that only need to know whether to
// go on: a disk that cannot tell counts as yes, so that the operation runs
// and reports the disk's error instead of "not found".
func (c *Catalog) exists(key layout.Key) bool {
	ok, err := c.w.Exists(key)
	return ok || err != nil
}
