package mirror

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// leaseView is this machine's local view of the leases of the sessions
// it appends to or mirrors, so that an append asks PostgreSQL only when
// the view does not answer (a session's first append since it went idle)
// and never waits longer than Config.LeaseWait for it.
type leaseView struct {
	mu sync.Mutex
	m  map[layout.Key]*leaseState // by session (Subpath "")
}

type leaseState struct {
	// held: this machine holds the lease under token until expires.
	held    bool
	token   int64
	expires time.Time
	// other: another machine holds it (as last seen), refusing appends
	// until other.expires.
	other *lease
	// fenced: this machine held it or wrote under no lease, and another
	// took it over; nothing of the session is mirrored any more and
	// appends are refused (sticky until sessiond restarts: the local copy
	// and PostgreSQL's have parted ways, and a pull must settle it).
	fenced   bool
	fencedBy lease
	// from: the machine this one took the lease over from, if another:
	// until it is released, the mirror does not replace the session's
	// rows with a local copy that differs from them (see diverged).
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

func (v *leaseView) get(fam layout.Key) *leaseState {
	if v.m == nil {
		v.m = map[layout.Key]*leaseState{}
	}
	st := v.m[fam]
	if st == nil {
		st = &leaseState{catching: new(sync.Mutex)}
		v.m[fam] = st
	}
	return st
}

// CheckAppend is writer.Config.AppendGate: it refuses an append to a
// session another machine holds (an errdefs.ErrFailedPrecondition naming
// the holder and the expiry), and takes the lease for this machine when
// it is free. The local view answers at once while this machine holds the
// lease; otherwise PostgreSQL is asked, waiting at most Config.LeaseWait:
// when it does not answer in time (or is down), the append goes on
// locally and the mirror takes the lease before it writes the rows (and
// is fenced, the local entries kept, if another machine holds it then).
func (mr *Mirror) CheckAppend(ctx context.Context, key layout.Key) error {
	fam := familyKey(key)
	now := mr.cfg.Clock.Now()
	mr.lv.mu.Lock()
	st := mr.lv.get(fam)
	st.lastUse = now
	switch {
	case st.fenced:
		err := &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.fencedBy.holder, Expires: st.fencedBy.expires, TakenOver: true}
		mr.lv.mu.Unlock()
		return err
	case st.held && now.Before(st.expires) && (st.lacks == "" || catchingUp(ctx, fam)):
		mr.lv.mu.Unlock()
		return nil
	case st.held && now.Before(st.expires):
		token := st.token
		mr.lv.mu.Unlock()
		return mr.catchUp(ctx, fam, token)
	case st.other != nil && now.Before(st.other.expires):
		err := &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.other.holder, Expires: st.other.expires}
		mr.lv.mu.Unlock()
		return err
	}
	token := st.token
	mr.lv.mu.Unlock()
	mr.mu.Lock()
	up := mr.connected && mr.schema
	mr.mu.Unlock()
	if !up {
		return nil // unknown: append locally (see above)
	}
	wctx, cancel := context.WithTimeout(ctx, mr.cfg.LeaseWait)
	defer cancel()
	acquire := tryAcquire
	if token != 0 {
		// Held before and not renewed in time: only that token may go on.
		acquire = renewLease
	}
	cur, ok, err := acquire(wctx, mr.pool, mr.cfg.Table, fam, mr.cfg.MachineID, token, now, mr.cfg.LeaseTTL)
	if err != nil {
		mr.log.Debug("lease not checked in time; appending locally", zap.Stringer("session", fam), zap.Error(err))
		return nil
	}
	if err := mr.noteLease(fam, cur, ok, false); err != nil {
		return err
	}
	if token == 0 {
		return mr.catchUp(ctx, fam, cur.token)
	}
	return nil
}

// OnTakeover sets what CheckAppend runs when this machine takes a
// session's lease over from another machine: f brings down the lines
// that machine wrote and this one lacks (a pull), before the append goes
// on after them. Set it before the first append.
func (mr *Mirror) OnTakeover(f func(ctx context.Context, fam layout.Key, from string) error) {
	mr.takeover.Store(&f)
}

// errLacking: the session was taken over from another machine whose
// lines could not be brought here.
var errLacking = errors.New("what the former holder wrote could not be brought here")

// catchingKey marks the context of a takeover hook's run: its own
// appends (the lines it brings down) go through.
type catchingKey struct{ fam layout.Key }

func catchingUp(ctx context.Context, fam layout.Key) bool {
	return ctx.Value(catchingKey{fam}) != nil
}

// Pulling marks ctx as a pull's, bringing down session fam: its appends
// take the lease as any append does, but do not run the takeover hook
// (the pull is already bringing down what the former holder wrote; the
// hook's own pull would append the same lines again, and a line without
// a uuid would then be stored twice).
func Pulling(ctx context.Context, fam layout.Key) context.Context {
	return context.WithValue(ctx, catchingKey{familyKey(fam)}, true)
}

// Pulled records that session fam here now holds everything PostgreSQL
// had of it (a pull ended): no catch-up is owed any more.
func (mr *Mirror) Pulled(fam layout.Key) {
	mr.lv.mu.Lock()
	defer mr.lv.mu.Unlock()
	if st := mr.lv.m[familyKey(fam)]; st != nil {
		st.lacks = ""
	}
}

// catchUp runs the takeover hook for fam, leased under token, when
// the lease came from another machine (noteLease set lacks): the lines
// that machine wrote and this one lacks are brought down before anything
// is appended or mirrored after them; appends meanwhile wait for it.
// When that fails, the append (or the mirror's write) is refused:
// appended after a copy lacking the former holder's last lines, it would
// part the two copies for good. The lease is then given back at once, so
// that the former holder may go on meanwhile.
func (mr *Mirror) catchUp(ctx context.Context, fam layout.Key, token int64) error {
	hook := mr.takeover.Load()
	if hook == nil || catchingUp(ctx, fam) {
		return nil
	}
	mr.lv.mu.Lock()
	st := mr.lv.get(fam)
	catching := st.catching
	mr.lv.mu.Unlock()
	catching.Lock()
	defer catching.Unlock()
	mr.lv.mu.Lock()
	st = mr.lv.get(fam)
	from := st.lacks // again: a run that held the mutex may have caught up
	mr.lv.mu.Unlock()
	if from == "" {
		return nil
	}
	err := (*hook)(context.WithValue(ctx, catchingKey{fam}, true), fam, from)
	mr.lv.mu.Lock()
	st = mr.lv.get(fam)
	if err == nil {
		st.lacks = ""
		mr.lv.mu.Unlock()
		mr.log.Info("took a session over from another machine, after bringing down what it wrote", zap.Stringer("session", fam), zap.String("from", from), zap.Int64("token", token))
		return nil
	}
	st.lacks = from
	if st.held && st.token == token {
		st.held, st.token = false, 0
	}
	mr.lv.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mr.cfg.LeaseWait)
	defer cancel()
	if rerr := releaseLease(rctx, mr.pool, mr.cfg.Table, fam, mr.cfg.MachineID, token, mr.cfg.Clock.Now()); rerr != nil {
		mr.log.Debug("lease release failed; it expires by itself", zap.Stringer("session", fam), zap.Error(rerr))
	}
	werr := fmt.Errorf("session %s was last written by machine %q, and %w before anything is written after it (the lease is given back; nothing was written): %w", fam, from, errLacking, err)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		// Trying again changes nothing until the copy here does.
		werr = fmt.Errorf("%w: %w", werr, errForeignRows)
	}
	return werr
}

// noteLease records what PostgreSQL said of fam's lease: ok, this
// machine holds cur; else another does. A machine that held it (or, with
// fence, was about to write under none) and finds it another's is fenced:
// logged, and recorded as the mirror's last error. It returns the refusal
// an append gets.
func (mr *Mirror) noteLease(fam layout.Key, cur lease, ok, fence bool) error {
	// The fencing and its last error are recorded under mr.mu, as Status
	// reads them: a status never shows one without the other.
	mr.mu.Lock()
	fenced, err := mr.noteLeaseLocked(fam, cur, ok, fence)
	var msg string
	var repeat bool
	if fenced {
		msg, repeat = mr.failLocked(fencedError{err.(*LeasedError)})
	}
	mr.mu.Unlock()
	if fenced {
		mr.log.Warn("fenced: the session was taken over by another machine; its rows are not mirrored from here any more, its local entries are kept, and appends here are refused",
			zap.Stringer("session", fam), zap.String("holder", cur.holder), zap.Time("lease_expires", cur.expires), zap.Int64("token", cur.token))
		mr.logFail(msg, repeat)
	}
	return err
}

func (mr *Mirror) noteLeaseLocked(fam layout.Key, cur lease, ok, fence bool) (newlyFenced bool, refusal error) {
	mr.lv.mu.Lock()
	defer mr.lv.mu.Unlock()
	st := mr.lv.get(fam)
	if st.fenced {
		return false, &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.fencedBy.holder, Expires: st.fencedBy.expires, TakenOver: true}
	}
	if ok {
		if !st.held {
			mr.log.Debug("lease taken", zap.Stringer("session", fam), zap.Int64("token", cur.token), zap.Time("expires", cur.expires))
		}
		if !st.held && cur.prev != "" && cur.prev != mr.cfg.MachineID {
			st.from = cur.prev
			if mr.takeover.Load() != nil {
				st.lacks = cur.prev // until catchUp brings its lines here
			}
		}
		st.held, st.token, st.expires, st.other = true, cur.token, cur.expires, nil
		return false, nil
	}
	if st.held || st.token != 0 || fence {
		st.held, st.fenced, st.fencedBy = false, true, cur
		return true, &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: cur.holder, Expires: cur.expires, TakenOver: true}
	}
	c := cur
	st.other = &c
	return false, &LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: cur.holder, Expires: cur.expires}
}

// errDiverged: a session taken over from another machine whose local
// copy does not start with the rows PostgreSQL holds.
var errDiverged = errors.New("the local copy differs from the rows the former holder wrote")

// diverged refuses to replace the rows of a session this machine took
// over from another, with a local copy that does not start with them:
// that would drop what the former holder wrote (the copy was not pulled
// first). Nothing is written; it says what to do.
func (mr *Mirror) diverged(k layout.Key) error {
	fam := familyKey(k)
	mr.lv.mu.Lock()
	defer mr.lv.mu.Unlock()
	st := mr.lv.m[fam]
	if st == nil || st.from == "" {
		return nil
	}
	return fmt.Errorf("%s: %w (machine %q): its rows are not replaced; pull the session before appending here, or delete the local copy: %w",
		k, errDiverged, st.from, errForeignRows)
}

// fencedErr is the error a fenced session's mirroring stops with.
func (mr *Mirror) fencedErr(k layout.Key) error {
	fam := familyKey(k)
	mr.lv.mu.Lock()
	defer mr.lv.mu.Unlock()
	st := mr.lv.m[fam]
	if st == nil || !st.fenced {
		return nil
	}
	return fencedError{&LeasedError{ProjectKey: fam.ProjectKey, SessionID: fam.SessionID, Holder: st.fencedBy.holder, Expires: st.fencedBy.expires, TakenOver: true}}
}

// ensureLease makes sure this machine holds key's session's lease before
// a transaction writes its rows: a session it does not hold (the catch-up
// at start, rows of a session idle since, appends made while PostgreSQL
// was down) is leased first, in a transaction of its own, so that
// fence, inside the writing transaction, sees it committed. When another
// machine holds it, the session is fenced (errFenced).
func (mr *Mirror) ensureLease(ctx context.Context, key layout.Key) error {
	fam := familyKey(key)
	now := mr.cfg.Clock.Now()
	mr.lv.mu.Lock()
	st := mr.lv.get(fam)
	if st.lastUse.IsZero() {
		st.lastUse = now // so that a lease taken here is released once idle
	}
	fenced, held, token, lacks := st.fenced, st.held, st.token, st.lacks
	mr.lv.mu.Unlock()
	if fenced {
		return mr.fencedErr(key)
	}
	if held && lacks != "" {
		return mr.catchUp(ctx, fam, token)
	}
	if held {
		return nil // fence checks the token
	}
	acquire := tryAcquire
	if token != 0 {
		acquire = renewLease
	}
	cur, ok, err := acquire(ctx, mr.pool, mr.cfg.Table, fam, mr.cfg.MachineID, token, now, mr.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	if err := mr.noteLease(fam, cur, ok, true); err != nil {
		return fencedError{err.(*LeasedError)}
	}
	return mr.catchUp(ctx, fam, cur.token)
}

// errLeaseGone: the lease ensureLease took was released (the session
// went idle) before the transaction ran; it is taken again on the retry.
var errLeaseGone = fmt.Errorf("%w (the session's lease was released meanwhile)", errCursorMoved)

// fence runs in every transaction that writes a transcript's rows, with
// the cursor locked (after ensureLease): it locks the session's lease row
// and lets the transaction go on only if this machine's token is still
// the current one. Otherwise the transaction aborts (errFenced), and the
// mirror writes the session no more.
func (mr *Mirror) fence(ctx context.Context, tx pgx.Tx, key layout.Key) error {
	cur, exists, err := readLease(ctx, tx, mr.cfg.Table, familyKey(key), true)
	if err != nil {
		return err
	}
	return mr.checkFence(key, cur, exists)
}

// checkFence is fence's verdict on the session's lease row as read
// (locked) in the transaction.
func (mr *Mirror) checkFence(key layout.Key, cur lease, exists bool) error {
	fam := familyKey(key)
	mr.lv.mu.Lock()
	st := mr.lv.get(fam)
	fenced, held, token := st.fenced, st.held, st.token
	mr.lv.mu.Unlock()
	switch {
	case fenced:
		return mr.fencedErr(key)
	case exists && cur.holder == mr.cfg.MachineID && cur.token == token && token != 0:
		// Expired or not: nobody took it over, as the token would have
		// changed; and the row stays locked until this commits.
		return nil
	case !held && token == 0:
		return errLeaseGone
	}
	return fencedError{mr.noteLease(fam, cur, false, true).(*LeasedError)}
}

// renewer renews the leases of the sessions in use, every third of
// LeaseTTL, and releases those idle for LeaseIdle.
func (mr *Mirror) renewer(ctx context.Context) {
	for mr.sleep(ctx, mr.cfg.LeaseTTL/3) {
		mr.renewAll(ctx)
	}
}

func (mr *Mirror) renewAll(ctx context.Context) {
	now := mr.cfg.Clock.Now()
	type todo struct {
		fam     layout.Key
		token   int64
		release bool
	}
	var work []todo
	mr.lv.mu.Lock()
	for fam, st := range mr.lv.m {
		switch {
		case st.fenced:
		case now.Sub(st.lastUse) >= mr.cfg.LeaseIdle:
			if st.held {
				work = append(work, todo{fam, st.token, true})
			}
			if st.lacks != "" {
				// Remembered: the next lease taken must catch up first.
				st.held, st.token, st.other = false, 0, nil
				continue
			}
			delete(mr.lv.m, fam)
		case st.held:
			work = append(work, todo{fam, st.token, false})
		}
	}
	mr.lv.mu.Unlock()
	for _, w := range work {
		if w.release {
			if err := releaseLease(ctx, mr.pool, mr.cfg.Table, w.fam, mr.cfg.MachineID, w.token, now); err != nil {
				mr.log.Debug("lease release failed; it expires by itself", zap.Stringer("session", w.fam), zap.Error(err))
			} else {
				mr.log.Debug("lease released (session idle)", zap.Stringer("session", w.fam))
			}
			continue
		}
		cur, ok, err := renewLease(ctx, mr.pool, mr.cfg.Table, w.fam, mr.cfg.MachineID, w.token, now, mr.cfg.LeaseTTL)
		if err != nil {
			continue // PostgreSQL away: the fence decides once it is back
		}
		mr.noteLease(w.fam, cur, ok, false)
	}
}

// releaseAll gives up every lease held (sessiond stops).
func (mr *Mirror) releaseAll() {
	now := mr.cfg.Clock.Now()
	mr.lv.mu.Lock()
	held := map[layout.Key]int64{}
	for fam, st := range mr.lv.m {
		if st.held {
			held[fam] = st.token
			st.held = false
		}
	}
	mr.lv.mu.Unlock()
	if len(held) == 0 || mr.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), mr.cfg.ConnectTimeout)
	defer cancel()
	for fam, token := range held {
		if err := releaseLease(ctx, mr.pool, mr.cfg.Table, fam, mr.cfg.MachineID, token, now); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return
			}
		}
	}
}
