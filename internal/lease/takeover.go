package lease

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// OnTakeover sets what CheckAppend (or Ensure) runs when this machine
// takes a session's lease over from another machine: f brings down the
// lines that machine wrote and this one lacks (a pull), before anything
// goes on after them. Set it before the first append.
func (l *Leases) OnTakeover(f func(ctx context.Context, fam layout.Key, from string) error) {
	l.takeover.Store(&f)
}

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
	return context.WithValue(ctx, catchingKey{Family(fam)}, true)
}

// Pulled records that session fam here now holds everything PostgreSQL
// had of it (a pull ended): no catch-up is owed any more.
func (l *Leases) Pulled(fam layout.Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.m[Family(fam)]; st != nil {
		st.lacks = ""
	}
}

// catchUp runs the takeover hook for fam, leased under token, when the
// lease came from another machine (note set lacks): the lines that
// machine wrote and this one lacks are brought down before anything is
// appended or mirrored after them; appends meanwhile wait for it. When
// that fails, the append (or the mirror's write) is refused: appended
// after a copy lacking the former holder's last lines, it would part the
// two copies for good. The lease is then given back at once, so that the
// former holder may go on meanwhile.
func (l *Leases) catchUp(ctx context.Context, fam layout.Key, token int64) error {
	hook := l.takeover.Load()
	if hook == nil || catchingUp(ctx, fam) {
		return nil
	}
	l.mu.Lock()
	catching := l.get(fam).catching
	l.mu.Unlock()
	catching.Lock()
	defer catching.Unlock()
	l.mu.Lock()
	from := l.get(fam).lacks // again: a run that held the mutex may have caught up
	l.mu.Unlock()
	if from == "" {
		return nil
	}
	err := (*hook)(context.WithValue(ctx, catchingKey{fam}, true), fam, from)
	if err == nil {
		l.mu.Lock()
		l.get(fam).lacks = ""
		l.mu.Unlock()
		l.cfg.Logger.Info("took a session over from another machine, after bringing down what it wrote", zap.Stringer("session", fam), zap.String("from", from), zap.Int64("token", token))
		return nil
	}
	l.giveBack(ctx, fam, token, from)
	werr := fmt.Errorf("session %s was last written by machine %q, and %w before anything is written after it (the lease is given back; nothing was written): %w", fam, from, ErrLacking, err)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		// Trying again changes nothing until the copy here does.
		werr = fmt.Errorf("%w: %w", werr, ErrDiverged)
	}
	return werr
}

// giveBack releases fam's lease, taken under token from machine from,
// whose lines could not be brought here: the next lease taken must catch
// up first.
func (l *Leases) giveBack(ctx context.Context, fam layout.Key, token int64, from string) {
	l.mu.Lock()
	st := l.get(fam)
	st.lacks = from
	if st.held && st.token == token {
		st.held, st.token = false, 0
	}
	l.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Wait)
	defer cancel()
	if err := releaseLease(rctx, l.pool.Load(), l.cfg.Table, fam, l.cfg.MachineID, token, l.cfg.Clock.Now()); err != nil {
		l.cfg.Logger.Debug("lease release failed; it expires by itself", zap.Stringer("session", fam), zap.Error(err))
	}
}
