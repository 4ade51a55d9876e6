package writer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/repair"
)

// Repairs checks, repairs and forks transcripts (package repair) through
// their writers.
func (m *Manager) Repairs() *repair.Service { return m.repairs }

// newRepairs makes the repair service of m's transcripts.
func newRepairs(m *Manager) *repair.Service {
	return repair.New(repair.Config{Writers: repairWriters{m}, Ledger: m.ledger, Journal: m.logs,
		Progress: m.progress, Titles: m.titleSidecar, Logger: m.log})
}

// repairWriters is what package repair asks of the writers
// (repair.Writers).
type repairWriters struct{ m *Manager }

func (w repairWriters) View(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error {
	return w.m.View(ctx, key, fn)
}

func (w repairWriters) Exists(key layout.Key) (bool, error) { return w.m.Exists(key) }

func (w repairWriters) NotFound(key layout.Key) error { return w.m.NotFound(key) }

func (w repairWriters) Exclusive(ctx context.Context, key layout.Key, fn func(repair.Session) error) error {
	return w.m.do(ctx, key, func(st *state) error { return fn(repairSession{st}) })
}

// repairSession is a session's writer as package repair works on it
// (repair.Session), on the writer goroutine.
type repairSession struct{ st *state }

func (r repairSession) Exists() bool { return r.st.exists() }

func (r repairSession) Pending() int { return len(r.st.pending) }

func (r repairSession) Compact() error { return r.st.compact("repair") }

func (r repairSession) Snapshot(fn func(io.Reader) error) error {
	sn, err := r.st.snapshot()
	if err != nil {
		return err
	}
	defer sn.Close()
	return fn(sn.Reader())
}

func (r repairSession) PlanPutback() (*ledger.Plan, error) { return r.st.planPutback() }

func (r repairSession) Open() (fsys.File, error) {
	st := r.st
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	return f, nil
}

func (r repairSession) PutBack(plan *ledger.Plan, src fsys.File, size int64) (fsys.File, int64, func(), error) {
	f, path, n, err := r.st.putbackTemp(plan, src, size)
	if err != nil {
		return nil, 0, nil, err
	}
	return f, n, func() {
		f.Close()
		r.st.fs.Remove(path)
	}, nil
}

func (r repairSession) Replace(orig io.ReaderAt, size int64, write func(io.Writer) (bool, error)) (string, error) {
	return r.st.replaceCanon(orig, size, write)
}

func (r repairSession) RecordPutback(plan *ledger.Plan, replaced bool) {
	if plan == nil {
		return
	}
	if !replaced {
		r.st.acked.SetMissing(plan.Remaining(), "repair")
		return
	}
	r.st.recordPutback(plan)
}

func (r repairSession) Create(what string, write func(io.Writer) error) error {
	return r.st.createCanon(what, write)
}

// replaceCanon is a repair's rewrite of the canonical file: write writes
// the new content into a temp file next to it; when it reports a change,
// the temp file is synced, the original (the first size bytes of orig)
// kept under the state folder, the temp file renamed over the canonical
// file and the folder synced, in that order, and the writer takes the new
// file as its base. It returns where the original was kept.
func (st *state) replaceCanon(orig io.ReaderAt, size int64, write func(io.Writer) (bool, error)) (string, error) {
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			st.fs.Remove(tmpPath)
		}
	}()
	if err := st.keepAttrs(tmp); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	changed, err := write(tmp)
	if err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if !changed {
		return "", nil
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := tmp.Close(); err != nil {
		return "", errdefs.FromIO(err)
	}
	backup, err := st.keepCopy("repairs", orig, size)
	if err != nil {
		return "", err
	}
	if err := st.fs.Rename(tmpPath, st.canonPath); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done = true
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.reload(); err != nil {
		return "", err
	}
	return backup, nil
}

// reload takes a canonical file replaced as a whole (repair) as the new
// base: lines served before may have moved.
func (st *state) reload() error {
	if err := st.scanCanonical(); err != nil {
		st.failed = err
		return err
	}
	st.rescueAt = -1
	st.lineage = st.lineages.Add(1)
	if err := st.newGeneration(); err != nil {
		st.failed = err
		return err
	}
	if st.ent != nil {
		st.ent.ModifiedMs = st.cfg.Clock.Now().UnixMilli()
		st.publish()
	}
	st.notifyChange()
	return nil
}

// keepCopy copies the first size bytes of src into the state folder under
// kind/<project>/<session>[/<subpath>]/<time>.jsonl, synced, and returns
// its path.
func (st *state) keepCopy(kind string, src io.ReaderAt, size int64) (string, error) {
	rel := filepath.Join(st.key.ProjectKey, st.key.SessionID)
	if st.key.Subpath != "" {
		rel = filepath.Join(rel, st.key.Subpath)
	}
	dir := filepath.Join(st.cfg.Layout.StateDir, kind, rel)
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return "", fmt.Errorf("keep a copy in %s: %w", dir, errdefs.FromIO(err))
	}
	path := filepath.Join(dir, st.cfg.Clock.Now().UTC().Format("20060102T150405.000000000Z")+".jsonl")
	err := fsys.WriteFileAtomic(st.fs, path, "."+filepath.Base(path)+".tmp", 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(src, 0, size))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("keep a copy at %s: %w", path, errdefs.FromIO(err))
	}
	return path, nil
}
