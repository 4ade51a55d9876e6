package writer

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/repair"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// Repairs checks, repairs and forks transcripts (package repair) through
// their writers.
func (m *Manager) Repairs() *repair.Service { return m.repairs }

// newRepairs makes the repair service of m's transcripts.
func newRepairs(m *Manager) *repair.Service {
	return repair.New(repair.Config{Writers: repairWriters{m}, Ledger: m.ledger, Journal: m.logs,
		Progress: m.progress, Titles: m.env.TitleSidecar, Logger: m.log})
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
	return w.m.do(ctx, key, func(st *session.State) error {
		return fn(repairSession{st: st, fs: w.m.cfg.FS, canonPath: w.m.cfg.Layout.TranscriptPath(key)})
	})
}

// repairSession is a session's writer as package repair works on it
// (repair.Session), on the writer goroutine.
type repairSession struct {
	st        *session.State
	fs        fsys.FS
	canonPath string
}

func (r repairSession) Exists() bool { return r.st.Exists() }

func (r repairSession) Pending() int { return r.st.Pending() }

func (r repairSession) Compact() error { return r.st.Compact(session.ReasonRepair) }

func (r repairSession) Snapshot(fn func(io.Reader) error) error {
	sn, err := r.st.Snapshot()
	if err != nil {
		return err
	}
	defer sn.Close()
	return fn(sn.Reader())
}

func (r repairSession) PlanPutback() (*ledger.Plan, error) { return r.st.PlanPutback() }

func (r repairSession) Open() (fsys.File, error) {
	f, err := r.fs.OpenFile(r.canonPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", r.canonPath, errdefs.FromIO(err))
	}
	return f, nil
}

func (r repairSession) PutBack(plan *ledger.Plan, src fsys.File, size int64) (fsys.File, int64, func(), error) {
	f, path, n, err := r.st.PutbackTemp(plan, src, size)
	if err != nil {
		return nil, 0, nil, err
	}
	return f, n, func() {
		f.Close()
		r.fs.Remove(path)
	}, nil
}

func (r repairSession) Replace(orig io.ReaderAt, size int64, write func(io.Writer) (bool, error)) (string, error) {
	return r.st.ReplaceCanon(orig, size, write)
}

func (r repairSession) RecordPutback(plan *ledger.Plan, replaced bool) {
	r.st.RecordPutback(plan, replaced)
}

func (r repairSession) Create(what string, write func(io.Writer) error) error {
	return r.st.CreateCanon(what, write)
}
