package writer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/health"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/trash"
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

type counters struct {
	appends, stored, duplicate, journalBytes, compactions, compactedBytes, recovered atomic.Uint64
	replayPending                                                                    atomic.Int64
}

// Manager hands out session writers and keeps track of them.
type Manager struct {
	deps // what the session writers share with it
	log  *zap.Logger

	// progress holds the long operations running (Operations).
	progress *progress.Registry

	mu       sync.Mutex
	sessions map[layout.Key]*session
	// leaving are writers out of sessions whose goroutine has not ended
	// yet: a new writer of the same key waits for the old one.
	leaving map[layout.Key]*session
	closing bool
	wg      sync.WaitGroup

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
	m := &Manager{
		deps: deps{cfg: cfg, ix: cfg.Index, health: &health.Health{},
			compactSlots: make(chan struct{}, cfg.CompactParallel)},
		log: cfg.Logger, sessions: make(map[layout.Key]*session), leaving: make(map[layout.Key]*session),
		progress: cfg.Progress,
	}
	// Lineages start from the clock, not 0, so that no two Managers of
	// one process hand out the same one: a reader that outlives a Manager
	// (ReadLines' callers) must not take a new writer's file for the one
	// it read before.
	m.lineages.Store(uint64(time.Now().UnixNano()))
	m.ledger = ledger.NewStore(ledger.Config{FS: m.cfg.FS, Layout: m.cfg.Layout, Clock: m.cfg.Clock, Logger: m.log})
	m.space = newSpace(&m.cfg, m.log)
	logs, err := openLogStore(&m.cfg, m.relieve)
	if err != nil {
		return nil, err
	}
	m.logs = logs
	m.trash = newTrash(m)
	m.space.Start(logs.jr, compactor(func(k layout.Key) error {
		_, err := m.flush(context.Background(), k, retireIfOpened, "retry")
		return err
	}))
	return m, nil
}

// relieve compacts the sessions holding the journal's oldest
// segment, which the journal reports when it has grown past its bound: an
// idle session would otherwise keep the segment, and every later one,
// forever.
func (m *Manager) relieve(keys []layout.Key) {
	for _, k := range keys {
		if m.space.Waiting(k) {
			continue // the watcher compacts it once there is room
		}
		if _, err := m.flush(context.Background(), k, retireIfOpened, "relieve"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("compaction to free the journal's oldest segment failed; the journal stays over its bound until it succeeds",
				zap.Stringer("session", k), zap.Error(err))
		}
	}
}

// Config returns the configuration in force (defaults applied).
func (m *Manager) Config() Config { return m.cfg }

// Operations lists the long operations in progress: the index built at
// start, replay, checks of many transcripts, repairs.
func (m *Manager) Operations() []progress.Snapshot { return m.progress.List() }

// acquire returns the live writer of key, starting one if needed, and
// takes a reference that keeps it from retiring until release.
func (m *Manager) acquire(key layout.Key) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable)
	}
	if err := m.trash.Admit(key); err != nil {
		return nil, err
	}
	s := m.sessions[key]
	if s == nil {
		s = newSession(m, key)
		if old := m.leaving[key]; old != nil {
			s.prev = old.exited
		}
		m.sessions[key] = s
		m.wg.Add(1)
		go s.run()
	}
	s.refs++
	return s, nil
}

func (m *Manager) release(s *session) {
	m.mu.Lock()
	s.dropRefLocked()
	m.mu.Unlock()
}

// whenUnreferenced returns a channel closed once nobody holds a reference
// to s (see session.exit).
func (m *Manager) whenUnreferenced(s *session) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.refs == 0 {
		return closedChan
	}
	if s.unref == nil {
		s.unref = make(chan struct{})
	}
	return s.unref
}

// isLive reports whether s is still the writer callers of its key reach.
func (m *Manager) isLive(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[s.key] == s
}

// follow marks key's live writer as followed, so it does not retire while
// a Follow stream waits on it; unfollow undoes it.
func (m *Manager) follow(key layout.Key) (*session, error) {
	s, err := m.acquire(key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	s.dropRefLocked()
	s.followers++
	m.mu.Unlock()
	return s, nil
}

func (m *Manager) unfollow(s *session) {
	m.mu.Lock()
	s.followers--
	m.mu.Unlock()
}

// tryRemove takes s out of the map when nobody holds a reference and its
// queue is empty; after that no caller can reach it, so it may exit.
func (m *Manager) tryRemove(s *session, force bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !force && m.inUseLocked(s) {
		return false
	}
	if m.sessions[s.key] == s {
		delete(m.sessions, s.key)
		m.leaving[s.key] = s
	}
	return true
}

// inUse reports whether someone holds, follows or queues for s: a writer
// in use cannot retire.
func (m *Manager) inUse(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUseLocked(s)
}

func (m *Manager) inUseLocked(s *session) bool {
	return s.refs > 0 || s.followers > 0 || len(s.reqs) > 0 || len(s.ctrl) > 0
}

// exited is the last thing a writer goroutine does.
func (m *Manager) exited(s *session) {
	m.mu.Lock()
	if m.leaving[s.key] == s {
		delete(m.leaving, s.key)
	}
	m.mu.Unlock()
	close(s.exited)
}

// do runs op on key's writer goroutine and waits for it.
func (m *Manager) do(ctx context.Context, key layout.Key, op func(*state) error) error {
	return m.doRetire(ctx, key, stay, op)
}

// doRetire is do; retire says whether the writer then retires at once
// (see retireMode).
func (m *Manager) doRetire(ctx context.Context, key layout.Key, retire retireMode, op func(*state) error) error {
	if err := key.Validate(); err != nil {
		return err
	}
	// A retiring request takes the caller's reference to the writer
	// along: the writer drops it when it takes the request, so that its
	// retirement does not depend on whether this goroutine got round to
	// releasing it yet.
	c := &ctrlReq{reply: newReply(), op: op, retire: retire}
	c.passRef = retire != stay
	return m.submit(ctx, key, &c.reply, func(s *session) bool {
		select {
		case s.ctrl <- c:
			return true
		case <-s.exited:
		case <-ctx.Done():
		}
		return false
	})
}

// testHookQueued, when set by a test, runs in submit between queueing a
// request and releasing the caller's reference to the writer.
var testHookQueued atomic.Pointer[func()]

// submit hands a request to key's live writer with enqueue (which reports
// whether the writer took it) and waits for the answer. A writer that was
// exiting answers without looking at the request; it is then tried again on
// a fresh writer. Once queued, a request is always answered: the caller
// waits even when ctx ends, so it never has to guess whether it was stored.
func (m *Manager) submit(ctx context.Context, key layout.Key, r *reply, enqueue func(*session) bool) error {
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(key)
		if err != nil {
			return err
		}
		sent := enqueue(s)
		if h := testHookQueued.Load(); h != nil {
			(*h)()
		}
		if !sent || !r.passRef {
			m.release(s)
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
		<-r.done
		var np *notProcessed
		if errors.As(r.err, &np) && attempt < 3 {
			pass := r.passRef
			*r = newReply()
			r.passRef = pass
			continue
		}
		m.space.NoticeFull(r.err)
		return r.err
	}
}

// Close stops taking requests, lets every writer finish what is queued,
// compacts every session and closes all files. When ctx ends first the
// journals still hold every acknowledged entry; Close then returns ctx's
// error and the next start recovers them.
func (m *Manager) Close(ctx context.Context) error {
	// The watcher first: it compacts through the writers stopped below.
	m.space.Close()
	m.mu.Lock()
	m.closing = true
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		err := m.logs.close()
		m.ownClaim.Release()
		return err
	case <-ctx.Done():
		for _, s := range all {
			s.abort()
		}
		<-done
		m.logs.close()
		m.ownClaim.Release()
		return fmt.Errorf("shutdown cut short, logged entries will be replayed at next start: %w", ctx.Err())
	}
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	n := len(m.sessions)
	m.mu.Unlock()
	recErrs, past := m.health.Report()
	disk := m.space.Stats()
	lagSessions, lagBytes := m.logs.jr.Backlog()
	disk.LagSessions, disk.LagBytes = uint64(lagSessions), uint64(lagBytes)
	ws := m.logs.jr.Stats()
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
		EntriesStored:        m.stats.stored.Load(),
		EntriesDuplicate:     m.stats.duplicate.Load(),
		JournalSyncs:         ws.Syncs,
		JournalBytes:         m.stats.journalBytes.Load(),
		Compactions:          m.stats.compactions.Load(),
		CompactedBytes:       m.stats.compactedBytes.Load(),
		RecoveredSessions:    m.stats.recovered.Load(),
		ReplayPending:        uint64(max(0, m.stats.replayPending.Load())),
	}
}

// IsActive reports whether a writer holds key open.
func (m *Manager) IsActive(key layout.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.sessions[key]
	return ok
}
