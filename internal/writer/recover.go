package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// RecoverReport tells what Recover did.
type RecoverReport struct {
	Checked  int     // journals checked (and torn tails cut) before serving
	Bytes    int64   // their size
	Sessions int     // journals replayed into their transcripts
	Entries  uint64  // entries moved into canonical files
	Failed   []error // sessions that could not be recovered (their journals are kept)
}

// Recover brings every journal left on disk back: CheckJournals, then
// Replay. When it returns, the files official readers see are whole and
// current.
func (m *Manager) Recover(ctx context.Context) (RecoverReport, error) {
	rep, keys, err := m.CheckJournals(ctx)
	if err != nil {
		return rep, err
	}
	r := m.Replay(ctx, keys)
	rep.Sessions, rep.Entries = r.Sessions, r.Entries
	rep.Failed = append(rep.Failed, r.Failed...)
	return rep, ctx.Err()
}

// CheckJournals is the part of recovery that must finish before sessiond
// serves. It finishes interrupted deletes and restores, removes temp files
// a crash left, imports the per-session journals of older releases into
// the journal, and lists the sessions whose entries the journal
// holds. The journal itself was read and checked once, every segment in
// order, when the Manager was made (journal.Open): torn tails cut, damaged
// segments kept aside and reported in Stats().RecoveryErrors. The entries
// are then served from the journal; Replay moves them into the canonical
// files. It returns the sessions to replay.
func (m *Manager) CheckJournals(ctx context.Context) (RecoverReport, []layout.Key, error) {
	var rep RecoverReport
	for _, err := range m.ledger.LoadMissing() {
		m.log.Error("a note of entries missing from a transcript could not be read; status lists them again once the transcript's writer compares it with its ledger", zap.Error(err))
		rep.Failed = append(rep.Failed, err)
		m.health.Failed(err.Error())
	}
	sweepTemps(m.cfg.FS, m.cfg.Layout, m.log)
	if r := m.rec; r != nil {
		rep.Bytes = r.Bytes
		if r.TruncatedBytes > 0 {
			// After a crash the last segment always ends in unwritten
			// reserved space (zeros, or a reused file's old records),
			// and maybe a write that was never acknowledged.
			m.log.Info("cut the journal after its last complete record (reserved space never written, or a write never acknowledged)", zap.Int64("bytes", r.TruncatedBytes))
		}
		for _, lost := range r.Lost {
			msg := "the journal lost acknowledged entries (started with --accept-journal-loss): " + lost.String()
			m.log.Error(msg)
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", msg, errdefs.ErrCorrupt))
			m.health.Failed(msg)
		}
		if r.AckUnreadable || r.AckMissing {
			what := "unreadable"
			if r.AckMissing {
				what = "missing (the journal's segments were written with one)"
			}
			msg := "the journal's acknowledgement record (" + filepath.Join(m.cfg.Layout.JournalDir(), journal.AckFile) + ") is " + what + ": whether acknowledged entries were lost from the journal cannot be told this time; check the transcripts of the sessions written last (sessionctl check --all); a new record is in place for the next start"
			m.log.Error(msg)
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", msg, errdefs.ErrCorrupt))
			m.health.Failed(msg)
		}
		if r.NoSegment != nil {
			m.log.Warn("the disk holding the journal is full: sessiond serves what it holds, and appends are refused until there is room", zap.Error(r.NoSegment))
		}
		for _, c := range r.PadDamaged {
			m.log.Warn("damaged journal padding", zap.String("what", c))
		}
		for _, c := range r.Corrupt {
			m.log.Error("damaged journal segment", zap.String("what", c))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", c, errdefs.ErrCorrupt))
			m.health.Failed(c)
		}
		m.rec = nil
	}
	// Interrupted deletes and restores first: their sessions must be
	// whole in one place before anything replays into them.
	failed, err := m.trash.Recover()
	if err != nil {
		return rep, nil, err
	}
	for _, err := range failed {
		rep.Failed = append(rep.Failed, err)
		m.health.Failed(err.Error())
	}
	if err := ctx.Err(); err != nil {
		return rep, nil, err
	}
	keys := m.logs.Keys()
	var todo []layout.Key
	for _, k := range keys {
		if m.reg.lookup(k) == nil {
			todo = append(todo, k)
		}
	}
	slices.SortFunc(todo, func(a, b layout.Key) int {
		if a.Less(b) {
			return -1
		}
		return 1
	})
	rep.Checked = len(todo)
	m.stats.replayPending.Store(int64(len(todo)))
	return rep, todo, nil
}

// ReplayReport tells what Replay did.
type ReplayReport struct {
	Sessions int
	Entries  uint64
	Failed   []error
	// Deferred counts the sessions whose compaction waits for disk space.
	Deferred int
}

// Replay moves the entries of the journals CheckJournals checked into
// their canonical files, a few sessions at a time. sessiond serves
// meanwhile: the entries are served from the journals until then, and a
// session written to meanwhile opens its writer (which loads the journal)
// and takes its appends after them; its turn here compacts them all
// through that writer. A writer nobody else uses retires once its session
// is replayed, so a start after a crash does not leave one writer (and
// its open files) per journal until the idle retirement.
// Stats().ReplayPending counts down to zero.
func (m *Manager) Replay(ctx context.Context, keys []layout.Key) ReplayReport {
	var (
		mu  sync.Mutex
		rep ReplayReport
	)
	op := m.progress.Start(ctx, "replay", "sessions", int64(len(keys)))
	defer op.End()
	parallel(ctx, max(2, runtime.GOMAXPROCS(0)), len(keys), func(i int) {
		k := keys[i]
		r, err := m.flush(ctx, k, session.RetireIfDone, session.ReasonReplay)
		m.stats.replayPending.Add(-1)
		op.Add(1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && (errors.Is(err, errdefs.ErrNotFound) || ctx.Err() != nil):
			// Gone meanwhile, or sessiond is stopping: the journal stays
			// for the next start.
		case err != nil && errors.Is(err, errdefs.ErrNoSpace) && m.space.Waiting(k):
			// A full disk is no failure of the session: its compaction
			// waits for room (package space) and the entries are served from
			// the journal meanwhile.
			rep.Deferred++
		case err != nil:
			m.log.Error("recovery of a session failed; its journal is kept", zap.Stringer("session", k), zap.Error(err))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", k, err))
			m.health.SessionFailed(k, fmt.Sprintf("%s: %v", k, err))
		default:
			rep.Sessions++
			rep.Entries += r.CompactedEntries
			m.stats.recovered.Add(1)
		}
	})
	return rep
}

// parallel calls fn(i) for i in [0, n) on up to workers goroutines, and
// stops handing out indexes once ctx ends.
func parallel(ctx context.Context, workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// sweepTemps removes the temp files a crash left in the project folders
// and the session folders below them (compaction, repair and fork temps;
// archive marks being replaced) and in the kept copies of repaired
// originals. It runs first thing in Recover, which runs at start before
// sessiond serves: no writer can be making one.
func sweepTemps(fsy fsys.FS, L layout.Layout, log *zap.Logger) {
	sweep := func(root string, match func(string) bool) {
		fsys.Walk(fsy, root, func(path string, d fs.DirEntry) error {
			if !d.Type().IsRegular() || !match(d.Name()) {
				return nil
			}
			if err := fsy.Remove(path); err == nil {
				log.Info("removed a temp file left by a crash", zap.String("file", path))
			}
			return nil
		})
	}
	sweep(L.ProjectsDir(), func(n string) bool {
		// Compaction temps, and the sidecars' (store state, a subagent's
		// .meta.json): a writer sweeps its session's when it opens, but
		// with the shared log recovery opens only sessions with entries
		// still logged.
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp") &&
			(strings.Contains(n, ".compact-") || strings.Contains(n, layout.StoreExt+".") ||
				strings.Contains(n, "sessiond-store.json.") || strings.Contains(n, ".meta.json.")) ||
			sidecar.IsTemp(n)
	})
	for _, kept := range []string{"repairs", "foreign"} {
		sweep(filepath.Join(L.StateDir, kept), func(n string) bool {
			return strings.HasPrefix(n, ".") && strings.HasSuffix(n, layout.TranscriptExt+".tmp")
		})
	}
	sweep(filepath.Join(L.StateDir, session.DamagedDir), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp")
	})
	sweep(L.MissingDir(), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp")
	})
}
