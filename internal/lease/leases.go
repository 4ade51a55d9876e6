package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/layout"
)

// Config is what Leases needs; every duration must be set.
type Config struct {
	// Table is the store table whose sessions are leased: two tables in
	// one database lease their sessions apart.
	Table string
	// MachineID names this sessiond as a lease holder: two machines
	// sharing the database must have different ones.
	MachineID string
	// TTL is how long a lease lasts unless renewed (every third of it);
	// Wait bounds how long an append waits for PostgreSQL's word on a
	// lease this machine does not hold; Idle: a session without appends
	// for this long has its lease released.
	TTL, Wait, Idle time.Duration
	// ReleaseTimeout bounds giving every lease back at stop.
	ReleaseTimeout time.Duration
	Clock          clock.Clock
	Logger         *zap.Logger
	// Up reports whether PostgreSQL answers and holds the tables: while
	// it does not, appends go on without asking (and the mirror takes
	// the lease before it writes their rows).
	Up func() bool
	// OnFenced is told of each session newly fenced, with its refusal,
	// before Status lists it: the mirror records it as its last error, so
	// that a status never shows the one without the other.
	OnFenced func(err error)
}

// Leases is this machine's view of the leases of the sessions it appends
// to or mirrors, so that an append asks PostgreSQL only when the view
// does not answer (a session's first append since it went idle) and never
// waits longer than Config.Wait for it.
type Leases struct {
	cfg  Config
	pool atomic.Pointer[pgxpool.Pool]
	// takeover, when set (OnTakeover), brings down what another machine
	// wrote of a session before this one appends to it.
	takeover atomic.Pointer[func(ctx context.Context, fam layout.Key, from string) error]

	mu sync.Mutex
	m  map[layout.Key]*state // by Family
}

type state struct {
	// held: this machine holds the lease under token until expires.
	held    bool
	token   int64
	expires time.Time
	// other: another machine holds it (as last seen), refusing appends
	// until other.Expires.
	other *Row
	// fenced: this machine held it or wrote under no lease, and another
	// took it over; nothing of the session is mirrored any more and
	// appends are refused (sticky until sessiond restarts: the local copy
	// and PostgreSQL's have parted ways, and a pull must settle it).
	fenced   bool
	fencedBy Row
	// from: the machine this one took the lease over from, if another:
	// until it is released, the mirror does not replace the session's
	// rows with a local copy that differs from them (see Diverged).
	from string
	// lastUse: the last append (or mirrored write) of the session, so it
	// is renewed while used and released once idle.
	lastUse time.Time
	// lacks: the machine this one took the lease over from, until what
	// that machine wrote is brought here (the takeover hook): appends
	// wait for it (or are refused when it fails), and the mirror writes
	// nothing of the session meanwhile (kept while idle; until sessiond
	// restarts). catching serialises the hook's runs.
	lacks    string
	catching *sync.Mutex
}

// New returns Leases that ask PostgreSQL nothing until SetPool.
func New(cfg Config) *Leases {
	return &Leases{cfg: cfg, m: map[layout.Key]*state{}}
}

// SetPool gives the leases the mirror's pool, before Config.Up can
// first say PostgreSQL answers.
func (l *Leases) SetPool(pool *pgxpool.Pool) { l.pool.Store(pool) }

// Run renews the leases of the sessions in use, and releases the idle
// ones, every third of the TTL until ctx ends.
func (l *Leases) Run(ctx context.Context) {
	for l.sleep(ctx, l.cfg.TTL/3) {
		l.Renew(ctx)
	}
}

func (l *Leases) get(fam layout.Key) *state {
	st := l.m[fam]
	if st == nil {
		st = &state{catching: new(sync.Mutex)}
		l.m[fam] = st
	}
	return st
}

func (st *state) fencing(fam layout.Key) *LeasedError {
	return &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.fencedBy.Holder, Expires: st.fencedBy.Expires, TakenOver: true}
}

// CheckAppend is writer.Config.AppendGate: it refuses an append to a
// session another machine holds (an errdefs.ErrLeased naming the holder
// and the expiry), and takes the lease for this machine when it is free.
// The local view answers at once while this machine holds the lease;
// otherwise PostgreSQL is asked, waiting at most Config.Wait: when it
// does not answer in time (or is down), the append goes on locally and
// the mirror takes the lease before it writes the rows (and is fenced,
// the local entries kept, if another machine holds it then).
func (l *Leases) CheckAppend(ctx context.Context, key layout.Key) error {
	fam := Family(key)
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	st := l.get(fam)
	st.lastUse = now
	switch {
	case st.fenced:
		l.mu.Unlock()
		return st.fencing(fam)
	case st.held && now.Before(st.expires) && (st.lacks == "" || catchingUp(ctx, fam)):
		l.mu.Unlock()
		return nil
	case st.held && now.Before(st.expires):
		token := st.token
		l.mu.Unlock()
		return l.catchUp(ctx, fam, token)
	case st.other != nil && now.Before(st.other.Expires):
		err := &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.other.Holder, Expires: st.other.Expires}
		l.mu.Unlock()
		return err
	}
	token := st.token
	l.mu.Unlock()
	if !l.cfg.Up() {
		return nil // unknown: append locally (see above)
	}
	wctx, cancel := context.WithTimeout(ctx, l.cfg.Wait)
	defer cancel()
	cur, ok, err := l.acquire(wctx, fam, token, now)
	if err != nil {
		l.cfg.Logger.Debug("lease not checked in time; appending locally", zap.Stringer("session", fam), zap.Error(err))
		return nil
	}
	if err := l.note(fam, cur, ok, false); err != nil {
		return err
	}
	if token == 0 {
		return l.catchUp(ctx, fam, cur.Token)
	}
	return nil
}

// acquire takes fam's lease, or renews it under token when this machine
// held it before and did not renew it in time: only that token may go
// on.
func (l *Leases) acquire(ctx context.Context, fam layout.Key, token int64, now time.Time) (Row, bool, error) {
	take := tryAcquire
	if token != 0 {
		take = renewLease
	}
	return take(ctx, l.pool.Load(), l.cfg.Table, fam, l.cfg.MachineID, token, now, l.cfg.TTL)
}

// note records what PostgreSQL said of fam's lease: ok, this machine
// holds cur; else another does. A machine that held it (or, with fence,
// was about to write under none) and finds it another's is fenced:
// logged, and told to Config.OnFenced. It returns the refusal an append
// gets.
func (l *Leases) note(fam layout.Key, cur Row, ok, fence bool) error {
	l.mu.Lock()
	fenced, err := l.noteLocked(fam, cur, ok, fence)
	if fenced {
		// Under l.mu, so that no Status lists the fencing before it is
		// recorded.
		l.cfg.OnFenced(fencedError{err})
	}
	l.mu.Unlock()
	if fenced {
		l.cfg.Logger.Warn("fenced: the session was taken over by another machine; its rows are not mirrored from here any more, its local entries are kept, and appends here are refused",
			zap.Stringer("session", fam), zap.String("holder", cur.Holder), zap.Time("lease_expires", cur.Expires), zap.Int64("token", cur.Token))
	}
	if err == nil {
		return nil
	}
	return err
}

func (l *Leases) noteLocked(fam layout.Key, cur Row, ok, fence bool) (newlyFenced bool, refusal *LeasedError) {
	st := l.get(fam)
	if st.fenced {
		return false, st.fencing(fam)
	}
	if ok {
		if !st.held {
			l.cfg.Logger.Debug("lease taken", zap.Stringer("session", fam), zap.Int64("token", cur.Token), zap.Time("expires", cur.Expires))
		}
		if !st.held && cur.prev != "" && cur.prev != l.cfg.MachineID {
			st.from = cur.prev
			if l.takeover.Load() != nil {
				st.lacks = cur.prev // until catchUp brings its lines here
			}
		}
		st.held, st.token, st.expires, st.other = true, cur.Token, cur.Expires, nil
		return false, nil
	}
	if st.held || st.token != 0 || fence {
		st.held, st.fenced, st.fencedBy = false, true, cur
		return true, st.fencing(fam)
	}
	c := cur
	st.other = &c
	return false, &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: cur.Holder, Expires: cur.Expires}
}

// Diverged refuses to replace the rows of a session this machine took
// over from another, with a local copy that does not start with them:
// that would drop what the former holder wrote (the copy was not pulled
// first). Nothing is written; it says what to do.
func (l *Leases) Diverged(k layout.Key) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.m[Family(k)]
	if st == nil || st.from == "" {
		return nil
	}
	return fmt.Errorf("%s: %w (machine %q): its rows are not replaced; pull the session before appending here, or delete the local copy", k, ErrDiverged, st.from)
}

// Fenced is the error a fenced session's mirroring stops with (nil when
// it is not fenced).
func (l *Leases) Fenced(k layout.Key) error {
	fam := Family(k)
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.m[fam]
	if st == nil || !st.fenced {
		return nil
	}
	return fencedError{st.fencing(fam)}
}

// Holds reports whether this machine holds key's session's lease, as far
// as its view tells (Ensure then asks PostgreSQL nothing).
func (l *Leases) Holds(key layout.Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.m[Family(key)]
	return st != nil && st.held && !st.fenced
}

// Ensure makes sure this machine holds key's session's lease before a
// transaction writes its rows: a session it does not hold (the catch-up
// at start, rows of a session idle since, appends made while PostgreSQL
// was down) is leased first, in a transaction of its own, so that Fence,
// inside the writing transaction, sees it committed. When another
// machine holds it, the session is fenced (ErrFenced), though this one
// never held it: the caller has something to write (lines PostgreSQL
// lacks, a rewrite, a delete, a sidecar that differs), so the copy here
// holds what the copy being written elsewhere does not, and the two have
// parted ways; appends here must stop until a pull settles it. A caller
// with nothing new to write must not call it: the mirror writes nothing,
// and takes no lease, for a copy that is PostgreSQL's or behind it (a
// pull's), and re-reads a cursor it did not read under the lease before
// deciding that lines are new.
func (l *Leases) Ensure(ctx context.Context, key layout.Key) error {
	fam := Family(key)
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	st := l.get(fam)
	if st.lastUse.IsZero() {
		st.lastUse = now // so that a lease taken here is released once idle
	}
	fenced, held, token, lacks := st.fenced, st.held, st.token, st.lacks
	l.mu.Unlock()
	switch {
	case fenced:
		return l.Fenced(key)
	case held && lacks != "":
		return l.catchUp(ctx, fam, token)
	case held:
		return nil // Fence checks the token
	}
	cur, ok, err := l.acquire(ctx, fam, token, now)
	if err != nil {
		return err
	}
	if err := l.note(fam, cur, ok, true); err != nil {
		var le *LeasedError
		errors.As(err, &le)
		return fencedError{le}
	}
	return l.catchUp(ctx, fam, cur.Token)
}

// Fence runs in every transaction that writes a transcript's rows (after
// Ensure): it locks the session's lease row and lets the transaction go
// on only if this machine's token is still the current one. Otherwise
// the transaction must abort: ErrFenced, and the session is written from
// here no more; or ErrGone, and a retry takes the lease again.
func (l *Leases) Fence(ctx context.Context, tx pgx.Tx, key layout.Key) error {
	cur, exists, err := Read(ctx, tx, l.cfg.Table, key, true)
	if err != nil {
		return err
	}
	return l.Check(key, cur, exists)
}

// Check is Fence's verdict on the session's lease row as read (locked)
// in the transaction.
func (l *Leases) Check(key layout.Key, cur Row, exists bool) error {
	fam := Family(key)
	l.mu.Lock()
	st := l.get(fam)
	fenced, held, token := st.fenced, st.held, st.token
	l.mu.Unlock()
	switch {
	case fenced:
		return l.Fenced(key)
	case exists && cur.Holder == l.cfg.MachineID && cur.Token == token && token != 0:
		// Expired or not: nobody took it over, as the token would have
		// changed; and the row stays locked until this commits.
		return nil
	case !held && token == 0:
		return ErrGone
	}
	var le *LeasedError
	errors.As(l.note(fam, cur, false, true), &le)
	return fencedError{le}
}

// Status is how many leases this machine holds, and the sessions it was
// fenced from (each saying by whom and until when), sorted.
func (l *Leases) Status() (held uint64, fenced []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for fam, st := range l.m {
		switch {
		case st.fenced:
			fenced = append(fenced, st.fencing(fam).Short())
		case st.held:
			held++
		}
	}
	slices.Sort(fenced)
	return held, fenced
}

// Renew renews the leases of the sessions in use and releases those idle
// for Config.Idle: what Start does every third of the TTL.
func (l *Leases) Renew(ctx context.Context) {
	now := l.cfg.Clock.Now()
	type todo struct {
		fam     layout.Key
		token   int64
		release bool
	}
	var work []todo
	l.mu.Lock()
	for fam, st := range l.m {
		switch {
		case st.fenced:
		case now.Sub(st.lastUse) >= l.cfg.Idle:
			if st.held {
				work = append(work, todo{fam, st.token, true})
			}
			if st.lacks != "" {
				// Remembered: the next lease taken must catch up first.
				st.held, st.token, st.other = false, 0, nil
				continue
			}
			delete(l.m, fam)
		case st.held:
			work = append(work, todo{fam, st.token, false})
		}
	}
	l.mu.Unlock()
	pool := l.pool.Load()
	for _, w := range work {
		if w.release {
			if err := releaseLease(ctx, pool, l.cfg.Table, w.fam, l.cfg.MachineID, w.token, now); err != nil {
				l.cfg.Logger.Debug("lease release failed; it expires by itself", zap.Stringer("session", w.fam), zap.Error(err))
			} else {
				l.cfg.Logger.Debug("lease released (session idle)", zap.Stringer("session", w.fam))
			}
			continue
		}
		cur, ok, err := renewLease(ctx, pool, l.cfg.Table, w.fam, l.cfg.MachineID, w.token, now, l.cfg.TTL)
		if err != nil {
			continue // PostgreSQL away: the fence decides once it is back
		}
		l.note(w.fam, cur, ok, false)
	}
}

// ReleaseAll gives up every lease held (sessiond stops, and nothing
// writes any more): the sessions are free for other machines at once,
// instead of when their leases expire.
func (l *Leases) ReleaseAll() {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	held := map[layout.Key]int64{}
	for fam, st := range l.m {
		if st.held {
			held[fam] = st.token
			st.held = false
		}
	}
	l.mu.Unlock()
	pool := l.pool.Load()
	if len(held) == 0 || pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
	defer cancel()
	for fam, token := range held {
		if err := releaseLease(ctx, pool, l.cfg.Table, fam, l.cfg.MachineID, token, now); errors.Is(err, context.DeadlineExceeded) {
			return
		}
	}
}

// sleep waits d on the leases' clock; false when ctx ended first.
func (l *Leases) sleep(ctx context.Context, d time.Duration) bool {
	t := l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
