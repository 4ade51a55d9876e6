// Package repair checks stored transcripts for damage, repairs them in
// place and forks them into new sessions. It decides what to write (with
// packages damage, fork and ledger); the session writer that owns a
// transcript's files (package writer, through Writers and Session) writes
// it, so a repair or fork is ordered with the session's appends and made
// durable the way every rewrite of a transcript is.
package repair

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/transcript/fork"
)

// Writers is what repair needs of the session writers.
type Writers interface {
	// View calls fn with a consistent reading of key's transcript: its
	// file followed by the entries still pending in the journal.
	View(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error
	// Exists reports whether key's transcript is here (on disk or in the
	// journal), telling "no" from "could not look".
	Exists(key layout.Key) (bool, error)
	// NotFound is the error for a transcript that does not exist.
	NotFound(key layout.Key) error
	// Exclusive runs fn on key's writer: appends arriving meanwhile wait,
	// and nothing else touches the session's files until fn returns.
	Exclusive(ctx context.Context, key layout.Key, fn func(Session) error) error
}

// Session is one session's writer, as Writers.Exclusive hands it over.
type Session interface {
	// Exists reports whether the session has content: its file or
	// pending entries.
	Exists() bool
	// Pending is how many entries are in the journal only.
	Pending() int
	// Compact moves the pending entries into the file.
	Compact() error
	// Snapshot calls fn with what the session holds: its file followed
	// by its pending entries.
	Snapshot(fn func(io.Reader) error) error
	// PlanPutback finds where each acknowledged entry missing from the
	// file goes back (nil when none is missing: package ledger).
	PlanPutback() (*ledger.Plan, error)
	// Open opens the session's file for reading.
	Open() (fsys.File, error)
	// PutBack carries plan out over the first size bytes of src into a
	// synced temp file, returned open with its size; done closes and
	// removes it.
	PutBack(plan *ledger.Plan, src fsys.File, size int64) (f fsys.File, n int64, done func(), err error)
	// Replace writes the file anew with write, into a temp file next to
	// it. When write reports a change, the original (the first size bytes
	// of orig) is kept under the state folder, the temp file replaces the
	// file durably and the writer takes it as its new base; it returns
	// where the original was kept.
	Replace(orig io.ReaderAt, size int64, write func(io.Writer) (changed bool, err error)) (backup string, err error)
	// RecordPutback records what stays missing once a repair carried out
	// plan (nil: none was made); replaced says whether the file was
	// rewritten, and so is now what the ledger compares with.
	RecordPutback(plan *ledger.Plan, replaced bool)
	// Create makes the file, which must not exist, from what write
	// writes; what names the operation in errors.
	Create(what string, write func(io.Writer) error) error
}

// Config is what a Service works with.
type Config struct {
	Writers Writers
	// Ledger keeps the entries each transcript was given; Journal looks
	// up the retained ones to put back (package ledger).
	Ledger  *ledger.Store
	Journal ledger.Journal
	// Progress is where checks of many transcripts and repairs show.
	Progress *progress.Registry
	// Titles reads a session's title sidecar, which a fork carries over.
	Titles func(layout.Key) (string, error)
	Logger *zap.Logger
}

// Service checks, repairs and forks transcripts.
type Service struct {
	cfg Config
	log *zap.Logger
}

// New returns a Service over cfg.
func New(cfg Config) *Service {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Service{cfg: cfg, log: log}
}

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
func (s *Service) Check(ctx context.Context, key layout.Key) (CheckResult, error) {
	res := CheckResult{Key: key}
	ck, err := s.cfg.Ledger.NewCheck(key)
	if err != nil {
		return res, err
	}
	err = s.cfg.Writers.View(ctx, key, func(r io.Reader, _ int) error {
		rep, err := damage.Check(ck.Tee(r), damage.CheckOptions{SessionID: key.SessionID})
		if err != nil {
			return fmt.Errorf("check %s: %w", key, errdefs.FromIO(err))
		}
		res.Report = rep
		return nil
	})
	if err == nil {
		err = ck.Report(res.Report, s.cfg.Journal)
	}
	return res, err
}

// CheckAll checks the transcripts keys (the catalog lists those of a
// project: catalog.AllKeys), one at a time, and hands each result to fn
// before the next transcript is read: a store's results are never held
// together (a million entries' problems would not fit in one answer). A
// transcript gone meanwhile is skipped. fn's error stops the walk and is
// returned.
func (s *Service) CheckAll(ctx context.Context, keys []layout.Key, fn func(CheckResult) error) error {
	op := s.cfg.Progress.Start(ctx, "check", "transcripts", int64(len(keys)))
	defer op.End()
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := s.Check(ctx, k)
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

// Outcome describes one repair.
type Outcome struct {
	Key    layout.Key
	Result *damage.RepairResult
	Backup string // where the original was kept
}

// Repair rewrites key so that check finds nothing repairable. It runs on
// the session's writer, so appends arriving meanwhile wait and follow the
// repaired content. The original file is kept under the state folder
// first; the repaired one replaces it by rename.
func (s *Service) Repair(ctx context.Context, key layout.Key, dryRun bool) (Outcome, error) {
	out := Outcome{Key: key}
	// A failure to look says nothing about existence: the repair runs and
	// reports the disk's error instead of "not found".
	if ok, err := s.cfg.Writers.Exists(key); !ok && err == nil {
		return out, s.cfg.Writers.NotFound(key)
	}
	op := s.cfg.Progress.Start(ctx, "repair", "bytes", 0)
	defer op.End()
	err := s.cfg.Writers.Exclusive(ctx, key, func(sess Session) error {
		if !sess.Exists() {
			return s.cfg.Writers.NotFound(key)
		}
		if dryRun && sess.Pending() > 0 {
			return dryPending(ctx, sess, key, &out)
		}
		if err := sess.Compact(); err != nil {
			return err
		}
		var err error
		out.Result, out.Backup, err = s.repair(ctx, sess, key, dryRun, op)
		return err
	})
	return out, err
}

// dryPending is a dry run of repair on a session with pending entries,
// which a dry run must not compact: it repairs a copy of what the session
// holds (with the acknowledged entries missing from its file put back,
// see package ledger).
func dryPending(ctx context.Context, sess Session, key layout.Key, out *Outcome) error {
	plan, err := sess.PlanPutback()
	if err != nil {
		return err
	}
	var tmp *spooled
	err = sess.Snapshot(func(r io.Reader) error {
		var err error
		tmp, err = spool(r)
		return err
	})
	if err != nil {
		if tmp != nil {
			tmp.Close()
		}
		return err
	}
	defer tmp.Close()
	opt := damage.RepairOptions{SessionID: key.SessionID}
	if plan == nil || plan.Restored() == 0 {
		out.Result, err = damage.Repair(tmp, tmp.size, io.Discard, opt)
		if err == nil && plan != nil {
			plan.Fold(out.Result, nil)
		}
		return err
	}
	before, err := checkOriginal(ctx, tmp, tmp.size, key.SessionID)
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

// repair repairs the session's file, compacted: the acknowledged entries
// another program's rewrite dropped go back first (package ledger), then
// the chain repair sees them.
func (s *Service) repair(ctx context.Context, sess Session, key layout.Key, dryRun bool, op *progress.Op) (*damage.RepairResult, string, error) {
	plan, err := sess.PlanPutback()
	if err != nil {
		return nil, "", err
	}
	f, err := sess.Open()
	if err != nil {
		return nil, "", err
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
		if before, err = checkOriginal(ctx, f, size, key.SessionID); err != nil {
			return nil, "", err
		}
		r, n, done, err := sess.PutBack(plan, f, size)
		if err != nil {
			return nil, "", err
		}
		defer done()
		src, size = r, n
	}
	// Progress is the repaired output written against the file's size:
	// Repair reads its input several times (check, plan, write), and its
	// output is about as long as its input.
	op.SetTotal(size)
	opt := damage.RepairOptions{SessionID: key.SessionID}
	if dryRun {
		res, err := damage.Repair(src, size, countingWriter{io.Discard, op}, opt)
		if err != nil {
			return nil, "", err
		}
		plan.Fold(res, before)
		return res, "", nil
	}
	var res *damage.RepairResult
	backup, err := sess.Replace(f, fi.Size(), func(w io.Writer) (bool, error) {
		var err error
		if res, err = damage.Repair(src, size, countingWriter{w, op}, opt); err != nil {
			return false, err
		}
		plan.Fold(res, before)
		return res.Changed, nil
	})
	if err != nil {
		return nil, "", err
	}
	// Unchanged, what is missing and no longer in the journal stays
	// missing: the finding stands.
	sess.RecordPutback(plan, res.Changed)
	if res.Changed {
		s.log.Info("repaired", zap.Stringer("session", key), zap.Int("actions", len(res.Actions)), zap.String("original_kept_at", backup))
	}
	return res, backup, nil
}

// checkOriginal is Check of the file as it was before repair (Repair
// itself checks what it reads: the file with the entries put back).
func checkOriginal(ctx context.Context, src io.ReaderAt, size int64, sid string) (*damage.Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep, err := damage.Check(io.NewSectionReader(src, 0, size), damage.CheckOptions{SessionID: sid})
	if err != nil {
		return nil, errdefs.FromIO(err)
	}
	return rep, nil
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

// spooled is a transcript copied to an unlinked temp file, for a reader
// that must read it more than once (a dry-run repair, a fork).
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

// ForkOutcome describes a new fork.
type ForkOutcome struct {
	Key     layout.Key
	Entries int
	Title   string
}

// Fork writes a copy of src (up to upTo) as a new session newID of the same
// project, with the official forkSession rewriting. The new file appears
// whole or not at all, and never replaces an existing one.
func (s *Service) Fork(ctx context.Context, src layout.Key, upTo, title, newID string) (ForkOutcome, error) {
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
	if ok, err := s.cfg.Writers.Exists(dst); err != nil {
		return ForkOutcome{}, err
	} else if ok {
		return ForkOutcome{}, fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
	}
	out := ForkOutcome{Key: dst}
	// Spool a consistent view of the source first: the fork is written on
	// the new session's writer, which must not wait on the source's.
	var data *spooled
	err := s.cfg.Writers.View(ctx, src, func(r io.Reader, _ int) error {
		var err error
		data, err = spool(r)
		return err
	})
	if err != nil {
		return out, err
	}
	defer data.Close()
	sidecarTitle, err := s.cfg.Titles(src)
	if err != nil {
		return out, err
	}
	err = s.cfg.Writers.Exclusive(ctx, dst, func(sess Session) error {
		if sess.Exists() {
			return fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
		}
		return sess.Create("fork", func(w io.Writer) error {
			res, err := fork.Session(io.NewSectionReader(data, 0, data.size), w, fork.Options{SessionID: src.SessionID, NewSessionID: newID, UpTo: upTo, Title: title, SidecarTitle: sidecarTitle})
			out.Entries, out.Title = res.Entries, res.Title
			return err
		})
	})
	return out, err
}
