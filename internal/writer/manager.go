package writer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/health"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/repair"
	"github.com/sessiond/sessiond/internal/space"
	"github.com/sessiond/sessiond/internal/trash"
	"github.com/sessiond/sessiond/internal/writer/session"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// Stats are the manager's counters since it started.
type Stats struct {
	ActiveSessions    int
	Appends           uint64
	EntriesStored     uint64
	EntriesDuplicate  uint64
	JournalSyncs      uint64
	JournalBytes      uint64
	Compactions       uint64
	CompactedBytes    uint64
	RecoveredSessions uint64
	// ReplayPending counts the journals found at start whose entries are
	// not in their canonical files yet (see Replay).
	ReplayPending uint64
	// RecoveryErrors are the recovery failures standing; a session's
	// leaves once its entries are in its transcript, and is counted in
	// PastRecoveryFailures.
	RecoveryErrors       []string
	PastRecoveryFailures uint64
	Disk                 DiskStats
	// The journal's segments in use and their total size.
	JournalSegments int
	JournalSize     int64
	// The journal's retained segments (Config.JournalRetention):
	// how many, their size, and when the oldest was let go.
	RetainedSegments int
	RetainedBytes    int64
	OldestRetained   time.Time
	// Missing lists the transcripts found lacking entries sessiond had
	// acknowledged (package ledger).
	Missing []MissingInfo
}

// MissingInfo is a transcript found lacking entries sessiond had
// acknowledged, as Stats lists it.
type MissingInfo = ledger.MissingInfo

// counters are the manager's own; the writers keep theirs
// (session.Counters).
type counters struct {
	appends, recovered atomic.Uint64
	replayPending      atomic.Int64
}

// Manager hands out session writers and keeps track of them.
type Manager struct {
	cfg   Config
	log   *zap.Logger
	stats counters

	// env is what every session writer is given (package session): the
	// services below, shared with them, and their settings.
	env *session.Env
	// logs are the sessions' streams in the journal; rec is what opening
	// the journal recovered, until CheckJournals reports it.
	logs *stream.Journal
	rec  *journal.Recovery
	// ledger keeps the entries each transcript was given (package
	// ledger); space rides out a full disk (package space); health keeps
	// the recovery failures (package health).
	ledger *ledger.Store
	space  *space.Space
	health *health.Health

	// progress holds the long operations running (Operations).
	progress *progress.Registry

	// reg keeps the live session writers.
	reg *registry

	// repairs checks, repairs and forks transcripts (package repair).
	repairs *repair.Service

	// trash takes deleted sessions; it says which sessions may take a
	// writer (Admit).
	trash *trash.Trash

	// ownClaim is the claim on the folders New took itself (nil when the
	// caller passed Config.Owner): Close releases it, last.
	ownClaim *owner.Claim
}

// New returns a Manager. It creates the state folder if needed.
func New(cfg Config) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// The folders are this process's before anything in them is read:
	// a second process opening the same log would cut, move aside or
	// compact what the first acknowledged.
	var ownClaim *owner.Claim
	if cfg.Owner == nil {
		c, err := owner.Acquire(cfg.FS, cfg.Layout, owner.Self("", ""))
		if err != nil {
			return nil, err
		}
		cfg.Owner, ownClaim = c, c
	} else if cfg.Owner.Layout() != cfg.Layout {
		return nil, fmt.Errorf("writer: the claim held covers %+v, not %+v", cfg.Owner.Layout(), cfg.Layout)
	}
	m, err := newManager(cfg)
	if err != nil {
		ownClaim.Release()
		return nil, err
	}
	m.ownClaim = ownClaim
	return m, nil
}

func newManager(cfg Config) (*Manager, error) {
	// Folders are made durable once per process, not at every compaction.
	cfg.FS = fsys.Remembering(cfg.FS)
	m := &Manager{cfg: cfg, log: cfg.Logger, progress: cfg.Progress, health: &health.Health{}}
	m.trash = newTrash(m)
	m.ledger = ledger.NewStore(ledger.Config{FS: m.cfg.FS, Layout: m.cfg.Layout, Clock: m.cfg.Clock, Logger: m.log})
	m.space = newSpace(&m.cfg, m.log)
	jr, rec, err := openJournal(&m.cfg, relieve(m.space, m.log, func(k layout.Key) error {
		_, err := m.flush(context.Background(), k, session.RetireIfOpened, session.ReasonRelieve)
		return err
	}))
	if err != nil {
		return nil, err
	}
	m.logs, m.rec = stream.NewJournal(jr), rec
	m.env = session.NewEnv(sessionConfig(&cfg), cfg.CompactParallel)
	m.env.Journal, m.env.Index, m.env.Ledger, m.env.Space, m.env.Health = m.logs, cfg.Index, m.ledger, m.space, m.health
	m.reg = newRegistry(m.trash.Admit, m.env)
	m.repairs = newRepairs(m)
	m.space.Start(jr, compactor(func(k layout.Key) error {
		_, err := m.flush(context.Background(), k, session.RetireIfOpened, session.ReasonRetry)
		return err
	}))
	return m, nil
}

// relieve returns what compacts the sessions holding the journal's oldest
// segment, which the journal reports when it has grown past its bound: an
// idle session would otherwise keep the segment, and every later one,
// forever.
func relieve(sp *space.Space, log *zap.Logger, compact func(layout.Key) error) func([]layout.Key) {
	return func(keys []layout.Key) {
		for _, k := range keys {
			if sp.Waiting(k) {
				continue // the watcher compacts it once there is room
			}
			if err := compact(k); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				log.Warn("compaction to free the journal's oldest segment failed; the journal stays over its bound until it succeeds",
					zap.Stringer("session", k), zap.Error(err))
			}
		}
	}
}

// Config returns the configuration in force (defaults applied).
func (m *Manager) Config() Config { return m.cfg }

// Operations lists the long operations in progress: the index built at
// start, replay, checks of many transcripts, repairs.
func (m *Manager) Operations() []progress.Snapshot { return m.progress.List() }

// do runs op on key's writer goroutine and waits for it.
func (m *Manager) do(ctx context.Context, key layout.Key, op func(*session.State) error) error {
	return m.doRetire(ctx, key, session.Stay, op)
}

// doRetire is do; retire says whether the writer then retires at once
// (see session.Retire).
func (m *Manager) doRetire(ctx context.Context, key layout.Key, retire session.Retire, op func(*session.State) error) error {
	c := session.NewControl(op, retire)
	return m.submit(ctx, key, &c.Reply, func(w *session.Writer) bool { return w.QueueControl(ctx, c) })
}

// testHookQueued, when set by a test, runs in submit between queueing a
// request and releasing the caller's reference to the writer.
var testHookQueued atomic.Pointer[func()]

// submit hands a request to key's live writer with enqueue (which reports
// whether the writer took it) and waits for the answer. A writer that was
// exiting answers without looking at the request; it is then tried again on
// a fresh writer. Once queued, a request is always answered: the caller
// waits even when ctx ends, so it never has to guess whether it was stored.
func (m *Manager) submit(ctx context.Context, key layout.Key, r *session.Reply, enqueue func(*session.Writer) bool) error {
	for attempt := 0; ; attempt++ {
		s, err := m.reg.acquire(key)
		if err != nil {
			return err
		}
		sent := enqueue(s)
		if h := testHookQueued.Load(); h != nil {
			(*h)()
		}
		if !sent || !r.PassesRef() {
			m.reg.Release(s)
		}
		if !sent {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("request for %s not queued: %w", key, err)
			}
			if attempt > 3 {
				return fmt.Errorf("session %s writer keeps failing: %w", key, errdefs.ErrUnavailable)
			}
			continue
		}
		err = r.Wait()
		if session.NotProcessed(err) && attempt < 3 {
			r.Retry()
			continue
		}
		m.space.NoticeFull(err)
		return err
	}
}

// Close stops taking requests, lets every writer finish what is queued,
// compacts every session and closes all files. When ctx ends first the
// journals still hold every acknowledged entry; Close then returns ctx's
// error and the next start recovers them.
func (m *Manager) Close(ctx context.Context) error {
	// The watcher first: it compacts through the writers stopped below.
	m.space.Close()
	all := m.reg.shut()
	for _, s := range all {
		s.Stop()
	}
	done := m.reg.done()
	select {
	case <-done:
		err := m.logs.Close()
		m.ownClaim.Release()
		return err
	case <-ctx.Done():
		for _, s := range all {
			s.Abort()
		}
		<-done
		m.logs.Close()
		m.ownClaim.Release()
		return fmt.Errorf("shutdown cut short, logged entries will be replayed at next start: %w", ctx.Err())
	}
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	n := m.reg.count()
	recErrs, past := m.health.Report()
	disk := m.space.Stats()
	lagSessions, lagBytes := m.logs.Log().Backlog()
	disk.LagSessions, disk.LagBytes = uint64(lagSessions), uint64(lagBytes)
	ws := m.logs.Log().Stats()
	return Stats{
		RecoveryErrors:       recErrs,
		PastRecoveryFailures: past,
		Disk:                 disk,
		JournalSegments:      ws.Segments,
		JournalSize:          ws.Size,
		RetainedSegments:     ws.RetainedSegments,
		RetainedBytes:        ws.RetainedBytes,
		OldestRetained:       ws.OldestRetained,
		Missing:              m.ledger.Missing(),
		ActiveSessions:       n,
		Appends:              m.stats.appends.Load(),
		EntriesStored:        m.env.Stats.Stored.Load(),
		EntriesDuplicate:     m.env.Stats.Duplicate.Load(),
		JournalSyncs:         ws.Syncs,
		JournalBytes:         m.env.Stats.JournalBytes.Load(),
		Compactions:          m.env.Stats.Compactions.Load(),
		CompactedBytes:       m.env.Stats.CompactedBytes.Load(),
		RecoveredSessions:    m.stats.recovered.Load(),
		ReplayPending:        uint64(max(0, m.stats.replayPending.Load())),
	}
}

// IsActive reports whether a writer holds key open.
func (m *Manager) IsActive(key layout.Key) bool {
	return m.reg.lookup(key) != nil
}
