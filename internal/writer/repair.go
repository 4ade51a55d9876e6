package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/transcript/fork"
)

// CheckResult is the damage found in one transcript.
type CheckResult struct {
	Key    layout.Key
	Report *damage.Report
}

// Check reports the damage in key.
//
// Besides what damage.Check finds in the file, it compares the file
// with the entries sessiond acknowledged and compacted into it (its
// ledger, read before the file: what was compacted since is in the file
// or still pending, and both are read) and reports those missing
// (package ledger).
func (m *Manager) Check(ctx context.Context, key layout.Key) (CheckResult, error) {
	res := CheckResult{Key: key}
	if err := key.Validate(); err != nil {
		return res, err
	}
	ck, err := m.ledger.NewCheck(key)
	if err != nil {
		return res, err
	}
	err = m.view(ctx, key, func(r io.Reader, _ int) error {
		rep, err := damage.Check(ck.Tee(r), damage.CheckOptions{SessionID: key.SessionID})
		if err != nil {
			return fmt.Errorf("check %s: %w", key, errdefs.FromIO(err))
		}
		res.Report = rep
		return nil
	})
	if err == nil {
		err = ck.Report(res.Report, m.logs)
	}
	return res, err
}

// CheckAll checks the transcripts keys (the catalog lists those of a
// project: catalog.AllKeys), one at a time, and hands each result to fn
// before the next transcript is read: a store's results are never held
// together (a million entries' problems would not fit in one answer). A
// transcript gone meanwhile is skipped. fn's error stops the walk and is
// returned.
func (m *Manager) CheckAll(ctx context.Context, keys []layout.Key, fn func(CheckResult) error) error {
	op := m.progress.Start(ctx, "check", "transcripts", int64(len(keys)))
	defer op.End()
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := m.Check(ctx, k)
		if errors.Is(err, errdefs.ErrNotFound) {
			op.Add(1)
			continue
		}
		if err != nil {
			return err
		}
		err = fn(r)
		// Counted once handed on, so that a caller watching the
		// operation sees no transcript as done before it has its result.
		op.Add(1)
		if err != nil {
			return err
		}
	}
	return nil
}

// RepairOutcome describes one repair.
type RepairOutcome struct {
	Key    layout.Key
	Result *damage.RepairResult
	Backup string // where the original was kept
}

// Repair rewrites key so that check finds nothing repairable. It runs on
// the session's writer goroutine, so appends arriving meanwhile wait and
// follow the repaired content. The original file is kept under the state
// folder first; the repaired one replaces it by rename.
func (m *Manager) Repair(ctx context.Context, key layout.Key, dryRun bool) (RepairOutcome, error) {
	out := RepairOutcome{Key: key}
	if err := key.Validate(); err != nil {
		return out, err
	}
	if !m.existsOnDisk(key) {
		return out, m.notFound(key)
	}
	op := m.progress.Start(ctx, "repair", "bytes", 0)
	defer op.End()
	err := m.do(ctx, key, func(st *state) error {
		if !st.exists() {
			return m.notFound(key)
		}
		if dryRun && len(st.pending) > 0 {
			return st.repairDryPending(ctx, &out)
		}
		if err := st.compact("repair"); err != nil {
			return err
		}
		var err error
		out.Result, out.Backup, err = st.repair(ctx, dryRun, op)
		return err
	})
	return out, err
}

// repairDryPending is a dry run of repair on a session with pending
// entries, which a dry run must not compact: it repairs a copy of what
// the session holds (with the acknowledged entries missing from its file
// put back, see package ledger).
func (st *state) repairDryPending(ctx context.Context, out *RepairOutcome) error {
	plan, err := st.planPutback()
	if err != nil {
		return err
	}
	sn, err := st.snapshot()
	if err != nil {
		return err
	}
	defer sn.close()
	tmp, err := spool(sn.reader())
	if err != nil {
		return err
	}
	defer tmp.Close()
	opt := damage.RepairOptions{SessionID: st.key.SessionID}
	if plan == nil || plan.Restored() == 0 {
		out.Result, err = damage.Repair(tmp, tmp.size, io.Discard, opt)
		if err == nil && plan != nil {
			plan.Fold(out.Result, nil)
		}
		return err
	}
	before, err := checkOriginal(ctx, tmp, tmp.size, st.key.SessionID)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(plan.Write(pw, tmp, tmp.size)) }()
	restored, err := spool(pr)
	pr.Close()
	if err != nil {
		return err
	}
	defer restored.Close()
	out.Result, err = damage.Repair(restored, restored.size, io.Discard, opt)
	if err == nil {
		plan.Fold(out.Result, before)
	}
	return err
}

// countingWriter counts what is written through it into op.
type countingWriter struct {
	w  io.Writer
	op *progress.Op
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.op.Add(int64(n))
	return n, err
}

// spooled is a snapshot copied to an unlinked temp file, for a dry-run
// repair that must read its input twice.
type spooled struct {
	*os.File
	size int64
}

func spool(r io.Reader) (*spooled, error) {
	f, err := os.CreateTemp("", "sessiond-dryrun-*")
	if err != nil {
		return nil, errdefs.FromIO(err)
	}
	os.Remove(f.Name())
	n, err := io.Copy(f, r)
	if err != nil {
		f.Close()
		// A failed read of the session is the disk's error, and says so.
		return nil, errdefs.FromIO(err)
	}
	return &spooled{f, n}, nil
}

func (st *state) repair(ctx context.Context, dryRun bool, op *progress.Op) (*damage.RepairResult, string, error) {
	// The acknowledged entries another program's rewrite dropped go back
	// first (package ledger): then the chain repair below sees them.
	plan, err := st.planPutback()
	if err != nil {
		return nil, "", err
	}
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", errdefs.FromIO(err)
	}
	var src io.ReaderAt = f
	size := fi.Size()
	var before *damage.Report
	if plan != nil && plan.Restored() > 0 {
		if before, err = checkOriginal(ctx, f, size, st.key.SessionID); err != nil {
			return nil, "", err
		}
		r, path, n, err := st.putbackTemp(plan, f, size)
		if err != nil {
			return nil, "", err
		}
		defer st.fs.Remove(path)
		defer r.Close()
		src, size = r, n
	}
	// Progress is the repaired output written against the file's size:
	// Repair reads its input several times (check, plan, write), and its
	// output is about as long as its input.
	op.SetTotal(size)
	opt := damage.RepairOptions{SessionID: st.key.SessionID}
	if dryRun {
		res, err := damage.Repair(src, size, countingWriter{io.Discard, op}, opt)
		if err != nil {
			return nil, "", err
		}
		plan.Fold(res, before)
		return res, "", nil
	}
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			st.fs.Remove(tmpPath)
		}
	}()
	if err := st.keepAttrs(tmp); err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	res, err := damage.Repair(src, size, countingWriter{tmp, op}, opt)
	if err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	plan.Fold(res, before)
	if !res.Changed {
		if plan != nil {
			// Missing, and none of it in the journal any more: the finding
			// stands.
			st.acked.SetMissing(plan.Remaining(), "repair")
		}
		return res, "", nil
	}
	if err := tmp.Sync(); err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := tmp.Close(); err != nil {
		return nil, "", errdefs.FromIO(err)
	}
	backup, err := st.keepCopy("repairs", f, fi.Size())
	if err != nil {
		return nil, "", err
	}
	if err := st.fs.Rename(tmpPath, st.canonPath); err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done = true
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.reload(); err != nil {
		return nil, "", err
	}
	st.recordPutback(plan)
	st.log.Info("repaired", zap.Int("actions", len(res.Actions)), zap.String("original_kept_at", backup))
	return res, backup, nil
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

// ForkOutcome describes a new fork.
type ForkOutcome struct {
	Key     layout.Key
	Entries int
	Title   string
}

// Fork writes a copy of src (up to upTo) as a new session newID of the same
// project, with the official forkSession rewriting. The new file appears
// whole or not at all, and never replaces an existing one.
func (m *Manager) Fork(ctx context.Context, src layout.Key, upTo, title, newID string) (ForkOutcome, error) {
	if src.Subpath != "" {
		return ForkOutcome{}, fmt.Errorf("fork copies a main session; %s is a subagent transcript (fork its session instead): %w", src, errdefs.ErrInvalidArgument)
	}
	if newID == "" {
		newID = uuid.NewString()
	}
	dst := layout.Key{ProjectKey: src.ProjectKey, SessionID: newID}
	if err := dst.Validate(); err != nil {
		return ForkOutcome{}, err
	}
	if ok, err := m.existsOnDiskErr(dst); err != nil {
		return ForkOutcome{}, err
	} else if ok {
		return ForkOutcome{}, fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
	}
	out := ForkOutcome{Key: dst}
	// Spool a consistent view of the source first: the fork is written on
	// the new session's goroutine, which must not wait on the source's.
	var data *spooled
	err := m.view(ctx, src, func(r io.Reader, _ int) error {
		var err error
		data, err = spool(r)
		return err
	})
	if err != nil {
		return out, err
	}
	defer data.Close()
	sidecarTitle, err := m.titleSidecar(src)
	if err != nil {
		return out, err
	}
	err = m.do(ctx, dst, func(st *state) error {
		if st.exists() {
			return fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
		}
		return st.createCanon("fork", func(w io.Writer) error {
			res, err := fork.Session(io.NewSectionReader(data, 0, data.size), w, fork.Options{SessionID: src.SessionID, NewSessionID: newID, UpTo: upTo, Title: title, SidecarTitle: sidecarTitle})
			out.Entries, out.Title = res.Entries, res.Title
			return err
		})
	})
	return out, err
}
