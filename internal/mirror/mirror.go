package mirror

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/writer"
)

// Mirror copies every transcript into PostgreSQL, behind the writers:
// they tell it what changed (Notify) and never wait for it.
type Mirror struct {
	cfg    Config
	pc     *pgxpool.Config
	red    *redactor
	target string
	log    *zap.Logger

	src  Source
	pool *pgxpool.Pool
	// leases: one writer per session across machines; every write of a
	// session's rows goes under its lease.
	leases *lease.Leases
	// down wakes the connector when a worker lost the connection.
	down   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	keys  map[layout.Key]*tstate
	queue []layout.Key // keys to mirror, oldest first (tstate.queued)
	// wake is closed and replaced whenever a worker may find work.
	wake      chan struct{}
	connected bool
	// schema: the tables exist; scanned: the cursors were loaded for the
	// scan at start; listed: the local transcripts were listed for it.
	schema, scanned, listed bool
	lastErr                 string
	lastErrAt               time.Time
	rows                    uint64 // rows written since start
	errs                    uint64 // errors recorded since start (fail)
	closed                  bool
	// draining: Drain was called; the pace is waived.
	draining bool
	// failedConnect: an attempt to connect failed since the last success
	// (Drain then gives up at once rather than wait for PostgreSQL).
	failedConnect bool

	// sidecarsAtStart: every session's sidecars in PostgreSQL, loaded
	// with the cursors for the scan at start; each is dropped once its
	// session was compared.
	sidecarsAtStart map[layout.Key]map[string][]byte
}

// tstate is what the mirror knows of one transcript. Guarded by mu.
type tstate struct {
	// What the writer last said the transcript holds (localKnown), and
	// the entries it acknowledged while the cursor was not known yet.
	local      uint64
	localBytes int64
	localKnown bool
	added      uint64
	// cur is the cursor as last read or written (known); the first
	// cur.entries lines were last checked against it under lineage (0:
	// check them again before going on).
	known   bool
	cur     cursor
	lineage uint64
	// stale: cur may be out of date (a try failed, and a commit cut off
	// may have gone through): read it again before writing. It still
	// bounds the lag meanwhile.
	stale   bool
	checked bool // compared with PostgreSQL since start
	// told is the lineage the writer last told (writer.Change.Lineage);
	// moved counts the times it told one other than lineage (lines may
	// have moved, perhaps keeping their number), movedChecked the last of
	// those a turn has compared since. Status counts the transcript as
	// unchecked meanwhile.
	told, moved, movedChecked uint64
	// lag: when the entries not mirrored yet were acknowledged, for the
	// age of the oldest (lag.go).
	lag lagMarks
	// gone: the writer said it went to the trash; family: a restore
	// brought the session's transcripts back.
	gone, family bool
	// A main key's sidecars are to be compared with PostgreSQL's: one
	// was written or a restore brought them back (sideDirty: read
	// PostgreSQL's), or the scan at start (sideScan: compare with the
	// rows loaded then, sidecarsAtStart).
	sideDirty, sideScan bool
	// asked counts the deletes, restores and sidecar writes the writer
	// told of, answered the last of those a turn finished: Status counts
	// the transcript as unchecked meanwhile, since no entry count shows
	// them.
	asked, answered uint64

	queued, busy bool
	failures     int
	// notBefore: the transcript's next turn is not before then
	// (Config.Pace), unless the mirror drains.
	notBefore time.Time
}

// New checks cfg and returns a mirror that does nothing until Start;
// Notify may be called already (the writer is made after the mirror, and
// told to notify it).
func New(cfg Config) (*Mirror, error) {
	cfg.setDefaults()
	if err := CheckTable(cfg.Table); err != nil {
		return nil, err
	}
	pc, red, err := poolConfig(cfg.DSN, cfg.Workers, cfg.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	mr := &Mirror{cfg: cfg, pc: pc, red: red, target: Target(cfg.DSN), log: cfg.Logger.Named("mirror"),
		keys: map[layout.Key]*tstate{}, wake: make(chan struct{}), down: make(chan struct{}, 1)}
	mr.leases = lease.New(lease.Config{Table: cfg.Table, MachineID: cfg.MachineID, TTL: cfg.LeaseTTL, Wait: cfg.LeaseWait, Idle: cfg.LeaseIdle,
		ReleaseTimeout: cfg.ConnectTimeout, Clock: cfg.Clock, Logger: mr.log, Up: mr.up, OnFenced: mr.fail})
	return mr, nil
}

// Leases are the leases of the sessions this machine writes; their
// CheckAppend is the writers' AppendGate.
func (mr *Mirror) Leases() *lease.Leases { return mr.leases }

// up reports whether PostgreSQL answers and holds the tables.
func (mr *Mirror) up() bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.connected && mr.schema
}

// Target is where the mirror writes, without the password.
func (mr *Mirror) Target() string { return mr.target + " table=" + mr.cfg.Table }

// Start connects (in the background: PostgreSQL may be down), lists
// every local transcript to compare it with its cursor, and mirrors what
// changes until ctx ends or Close.
func (mr *Mirror) Start(ctx context.Context, src Source) error {
	pool, err := pgxpool.NewWithConfig(context.Background(), mr.pc)
	if err != nil {
		return errors.New(mr.red.clean(err.Error()))
	}
	mr.src, mr.pool = src, pool
	mr.leases.SetPool(pool)
	ctx, mr.cancel = context.WithCancel(ctx)
	mr.log.Info("mirroring transcripts to PostgreSQL", zap.String("target", mr.Target()))
	mr.wg.Add(3 + mr.cfg.Workers)
	go func() { defer mr.wg.Done(); mr.listLocal(ctx) }()
	go func() { defer mr.wg.Done(); mr.leases.Run(ctx) }()
	go func() { defer mr.wg.Done(); mr.connector(ctx) }()
	for range mr.cfg.Workers {
		go func() { defer mr.wg.Done(); mr.worker(ctx) }()
	}
	return nil
}

// Drain gives every transcript with something to mirror its turn now,
// without waiting for its pace, and waits until nothing is behind, ctx
// ends or PostgreSQL stops answering. sessiond drains at shutdown, once
// no append comes any more and before its leases are released: the
// sessions are then whole in PostgreSQL for the machine that takes one
// over next.
func (mr *Mirror) Drain(ctx context.Context) error {
	mr.mu.Lock()
	mr.draining = true
	mr.signalLocked()
	mr.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		mr.mu.Lock()
		idle, connected, failed := len(mr.queue) == 0, mr.connected, mr.failedConnect
		for _, ts := range mr.keys {
			idle = idle && !ts.busy
		}
		mr.mu.Unlock()
		switch {
		case !connected && !failed:
			// Still connecting (sessiond stopped right after its start):
			// wait for the first answer.
		case !connected:
			return fmt.Errorf("mirror not drained: PostgreSQL does not answer (%d entries stay behind until the next start)", mr.Status().EntriesBehind)
		case idle && connected:
			if st := mr.Status(); st.EntriesBehind > 0 {
				// Transcripts that failed wait for their retry, fenced
				// ones forever: say so rather than wait.
				return fmt.Errorf("mirror drained but %d entries stay behind until the next start (last error: %s)", st.EntriesBehind, st.LastError)
			}
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("mirror not drained: %w (%d entries stay behind until the next start)", ctx.Err(), mr.Status().EntriesBehind)
		}
	}
}

// Close stops the mirror: a transaction in flight is rolled back, and
// what is not mirrored yet is at the next start.
func (mr *Mirror) Close() {
	mr.mu.Lock()
	mr.closed = true
	mr.mu.Unlock()
	if mr.cancel != nil {
		mr.cancel()
	}
	mr.wg.Wait()
	// Once nothing writes any more: the sessions are free for other
	// machines at once, instead of when their leases expire.
	mr.leases.ReleaseAll()
	if mr.pool != nil {
		mr.pool.Close()
	}
}

// Notify is writer.Config.Changed: it records what changed and wakes a
// worker, without waiting for anything.
func (mr *Mirror) Notify(c writer.Change) {
	now := mr.cfg.Clock.Now()
	mr.mu.Lock()
	defer mr.mu.Unlock()
	ts := mr.stateLocked(c.Key)
	if c.Gone || c.Family || c.Sidecars {
		ts.asked++
	}
	switch {
	case c.Gone:
		ts.gone = true
		ts.notBefore = time.Time{} // not paced: a delete, a restore or a sidecar goes at once
	case c.Family:
		ts.family = true
		ts.sideDirty = ts.sideDirty || c.Key.Subpath == ""
		ts.notBefore = time.Time{}
	case c.Sidecars:
		ts.sideDirty = true
		ts.notBefore = time.Time{}
	default:
		if c.Lineage != 0 && c.Lineage != ts.told {
			ts.told = c.Lineage
			if c.Lineage != ts.lineage {
				ts.moved++
			}
		}
		ts.local, ts.localBytes, ts.localKnown = c.Entries, c.Bytes, true
		if !ts.known {
			ts.added += c.Added
		}
		if ts.known && c.Entries > ts.cur.entries || !ts.known && ts.added > 0 {
			ts.lag.note(c.Entries, now)
		}
	}
	mr.enqueueLocked(c.Key)
}

func (mr *Mirror) stateLocked(k layout.Key) *tstate {
	ts := mr.keys[k]
	if ts == nil {
		ts = &tstate{}
		mr.keys[k] = ts
	}
	return ts
}

func (mr *Mirror) enqueueLocked(k layout.Key) {
	ts := mr.stateLocked(k)
	if ts.queued {
		return
	}
	ts.queued = true
	mr.queue = append(mr.queue, k)
	mr.signalLocked()
}

func (mr *Mirror) signalLocked() {
	close(mr.wake)
	mr.wake = make(chan struct{})
}

// listLocal queues every local transcript, to compare it with its cursor
// (the scan at start): what was appended while sessiond or PostgreSQL was
// down, or rewritten by another program meanwhile, is mirrored then.
func (mr *Mirror) listLocal(ctx context.Context) {
	for delay := mr.cfg.RetryMin; ; delay = min(2*delay, mr.cfg.RetryMax) {
		keys, err := mr.src.AllKeys("", true)
		if err == nil {
			mr.mu.Lock()
			for _, k := range keys {
				mr.stateLocked(k).sideScan = k.Subpath == ""
				mr.enqueueLocked(k)
			}
			mr.listed = true
			mr.mu.Unlock()
			mr.log.Debug("listed the local transcripts", zap.Int("transcripts", len(keys)))
			return
		}
		mr.fail(err)
		if !mr.sleep(ctx, delay) {
			return
		}
	}
}

// sleep waits d on the mirror's clock; false when ctx ended first.
func (mr *Mirror) sleep(ctx context.Context, d time.Duration) bool {
	t := mr.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// fail records err as the last error (without the password) and logs it.
func (mr *Mirror) fail(err error) {
	mr.mu.Lock()
	msg, repeat := mr.failLocked(err)
	mr.mu.Unlock()
	mr.logFail(msg, repeat)
}

// failLocked records err as the last error (mr.mu held) and returns its
// message, and whether it repeats the one before.
func (mr *Mirror) failLocked(err error) (msg string, repeat bool) {
	msg = mr.red.clean(err.Error())
	repeat = msg == mr.lastErr
	mr.lastErr, mr.lastErrAt = msg, mr.cfg.Clock.Now()
	mr.errs++
	return msg, repeat
}

// logFail logs a recorded error unless it repeats the one before.
func (mr *Mirror) logFail(msg string, repeat bool) {
	if !repeat {
		mr.log.Warn("mirror error", zap.String("error", msg))
	}
}

// worker mirrors the queued transcripts one at a time while PostgreSQL
// answers; a transcript is never mirrored by two workers at once.
func (mr *Mirror) worker(ctx context.Context) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		mr.mu.Lock()
		k, ok, until := mr.nextLocked(time.Now())
		wake := mr.wake
		mr.mu.Unlock()
		if !ok {
			var due <-chan time.Time
			if until > 0 {
				if timer == nil {
					timer = time.NewTimer(until)
				} else {
					timer.Reset(until)
				}
				due = timer.C
			}
			select {
			case <-wake:
			case <-due:
			case <-ctx.Done():
				return
			}
			continue
		}
		err := mr.sync(ctx, k)
		mr.finish(ctx, k, err)
	}
}

// nextLocked takes the first queued transcript that no worker holds and
// whose pace allows a turn now. Otherwise it says how long until the
// first one's pace does (0: none is waiting for its pace).
func (mr *Mirror) nextLocked(now time.Time) (layout.Key, bool, time.Duration) {
	if !mr.connected {
		return layout.Key{}, false, 0
	}
	var until time.Duration
	for i, q := range mr.queue {
		ts := mr.keys[q]
		if ts.busy {
			continue
		}
		if wait := ts.notBefore.Sub(now); wait > 0 && !mr.draining {
			if until == 0 || wait < until {
				until = wait
			}
			continue
		}
		if i == 0 {
			mr.queue = mr.queue[1:] // the usual case: no copy
		} else {
			mr.queue = append(mr.queue[:i:i], mr.queue[i+1:]...)
		}
		ts.queued, ts.busy = false, true
		return q, true, 0
	}
	return layout.Key{}, false, until
}

// finish records how k's turn went and when it comes again.
func (mr *Mirror) finish(ctx context.Context, k layout.Key, err error) {
	mr.mu.Lock()
	ts := mr.keys[k]
	ts.busy = false
	if err == nil {
		ts.failures = 0
		if mr.cfg.Pace > 0 {
			ts.notBefore = time.Now().Add(mr.cfg.Pace)
		}
		if ts.queued {
			mr.signalLocked() // changed meanwhile: a worker may take it now
		}
		mr.mu.Unlock()
		return
	}
	// Whatever failed, the cursor is read again before the next try: a
	// commit cut off by a lost connection may have gone through.
	ts.stale, ts.lineage = true, 0
	ts.failures++
	failures := ts.failures
	mr.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	var de dbErr
	switch {
	case errors.Is(err, errCursorMoved) && failures < 3:
		mr.requeue(k) // read the cursor again and go on
		return
	case errors.As(err, &de) && connectionLost(de.err):
		mr.fail(err)
		mr.requeue(k)
		mr.lost()
		return
	case errors.Is(err, lease.ErrFenced):
		// Another machine holds the session: nothing of it is mirrored
		// from here any more (noteLease logged and recorded it).
		return
	case errors.Is(err, errForeignRows), errors.Is(err, lease.ErrDiverged):
		// Nothing changes by trying again; the next change of the
		// transcript (or the next start) tries again.
		mr.fail(err)
		return
	}
	mr.fail(err)
	delay := mr.cfg.RetryMin << min(failures, 16)
	delay = min(delay, mr.cfg.RetryMax)
	mr.wg.Add(1)
	go func() {
		defer mr.wg.Done()
		if mr.sleep(ctx, delay) {
			mr.requeue(k)
		}
	}()
}

func (mr *Mirror) requeue(k layout.Key) {
	mr.mu.Lock()
	if !mr.closed {
		mr.enqueueLocked(k)
	}
	mr.mu.Unlock()
}

// dbErr marks an error PostgreSQL (or the way to it) gave, as opposed to
// one reading the local transcript.
type dbErr struct{ err error }

func (e dbErr) Error() string { return "postgresql: " + e.err.Error() }
func (e dbErr) Unwrap() error { return e.err }

// connectionLost tells a lost or refused connection, or a server
// shutting down, from an error in what was asked of it.
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "57", "53", "58": // connection, operator intervention, resources, system
			return true
		}
		return false
	}
	return !errors.Is(err, errCursorMoved) && !errors.Is(err, errForeignRows) && !errors.Is(err, lease.ErrFenced) && !errors.Is(err, lease.ErrDiverged)
}
