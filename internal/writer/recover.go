package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
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

// checkWorkers is how many journals CheckJournals reads at once: the work
// is reading and checksumming, so more reads in flight than cores keep
// the disk busy.
const checkWorkers = 8

// CheckJournals is the part of recovery that must finish before sessiond
// serves. It finishes interrupted deletes and restores, removes temp files
// a crash left, and opens every journal once: every record is read and
// checked against its checksum, a torn tail is cut, a corrupt journal is
// moved aside (reported in Stats().RecoveryErrors), and the journal and
// its folder are synced, so what is served from now on is durable. The
// entries are then served from the journals; Replay moves them into the
// canonical files. It returns the sessions to replay.
func (m *Manager) CheckJournals(ctx context.Context) (RecoverReport, []layout.Key, error) {
	var rep RecoverReport
	m.sweepTemps()
	m.logs.sweepTemps(m.IsActive)
	// Interrupted deletes and restores first: their sessions must be
	// whole in one place before anything replays into them.
	for _, err := range m.finishIntents() {
		rep.Failed = append(rep.Failed, err)
		m.noteRecoveryError(err.Error())
	}
	keys, err := m.journaledKeys()
	if err != nil {
		return rep, nil, err
	}
	ok := make([]bool, len(keys))
	sizes := make([]int64, len(keys))
	errs := make([]error, len(keys))
	parallel(ctx, checkWorkers, len(keys), func(i int) {
		ok[i], sizes[i], errs[i] = m.checkJournal(keys[i])
	})
	if err := ctx.Err(); err != nil {
		return rep, nil, err
	}
	var todo []layout.Key
	for i, k := range keys {
		if errs[i] != nil {
			m.log.Error("recovery of a session failed; its journal is kept", zap.Stringer("session", k), zap.Error(errs[i]))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", k, errs[i]))
			m.noteRecoveryError(fmt.Sprintf("%s: %v", k, errs[i]))
			continue
		}
		if !ok[i] {
			continue
		}
		rep.Checked++
		rep.Bytes += sizes[i]
		todo = append(todo, k)
	}
	// The journals were opened without their folder sync: one per folder.
	if err := m.logs.syncFolders(todo); err != nil {
		return rep, nil, err
	}
	m.stats.replayPending.Store(int64(len(todo)))
	return rep, todo, nil
}

// checkJournal opens key's journal once (see CheckJournals). ok is false
// when there is nothing to replay: no journal, or a live writer owns it
// (the writer replayed it as it opened).
func (m *Manager) checkJournal(key layout.Key) (ok bool, size int64, err error) {
	m.mu.Lock()
	_, live := m.sessions[key]
	m.mu.Unlock()
	if live {
		return true, 0, nil
	}
	j, rec, err := m.logs.open(key, true)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, 0, nil
	case err != nil:
		return false, 0, fmt.Errorf("open journal: %w", err)
	}
	if rec.truncated > 0 {
		m.log.Warn("journal had a torn tail (entries never acknowledged); truncated",
			zap.Stringer("session", key), zap.Int64("bytes", rec.truncated))
	}
	return true, rec.size, j.close()
}

// ReplayReport tells what Replay did.
type ReplayReport struct {
	Sessions int
	Entries  uint64
	Failed   []error
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
		r, err := m.flush(ctx, k, retireIfDone)
		m.stats.replayPending.Add(-1)
		op.Add(1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && (errdefs.Is(err, errdefs.ErrNotFound) || ctx.Err() != nil):
			// Gone meanwhile, or sessiond is stopping: the journal stays
			// for the next start.
		case err != nil:
			m.log.Error("recovery of a session failed; its journal is kept", zap.Stringer("session", k), zap.Error(err))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", k, err))
			m.noteRecoveryError(fmt.Sprintf("%s: %v", k, err))
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

func (m *Manager) noteRecoveryError(msg string) {
	m.mu.Lock()
	m.recoveryErrs = append(m.recoveryErrs, msg)
	m.mu.Unlock()
}

// sweepTemps removes the temp files a crash left in the project folders
// and the session folders below them (compaction, repair and fork temps;
// archive marks being replaced) and in the kept copies of repaired
// originals. It runs first thing in Recover, which runs at start before
// sessiond serves: no writer can be making one.
func (m *Manager) sweepTemps() {
	L := m.cfg.Layout
	sweep := func(root string, match func(string) bool) {
		walk(m.cfg.FS, root, func(path string, d fs.DirEntry) error {
			if !d.Type().IsRegular() || !match(d.Name()) {
				return nil
			}
			if err := m.cfg.FS.Remove(path); err == nil {
				m.log.Info("removed a temp file left by a crash", zap.String("file", path))
			}
			return nil
		})
	}
	sweep(L.ProjectsDir(), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.Contains(n, ".compact-") && strings.HasSuffix(n, ".tmp") ||
			strings.HasPrefix(n, archiveTempPrefix)
	})
	sweep(filepath.Join(L.StateDir, "repairs"), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, layout.TranscriptExt+".tmp")
	})
	sweep(m.intentDir(), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".json.tmp")
	})
}
