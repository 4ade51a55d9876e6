package session

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// loop is the open writer's event loop: what it serves, and the timers of
// its idle compaction, its retirement and the file a compaction replaced.
type loop struct {
	s   *Writer
	st  *State
	env *sessionEnv

	idle       clock.Timer
	lastActive time.Time
	// within is CompactWithin less a random part of up to a quarter of
	// it, drawn once per writer: sessions that started together (a fleet
	// launched at once, a warm-up) would otherwise reach their bound
	// together, every CompactWithin, and their compactions would crowd
	// the disk and the slots at once while their appends wait behind.
	within time.Duration
	// tried is when the loop last ran a compaction rule's work.
	tried time.Time
	// slot is the compaction slots (Config.CompactParallel) while an idle
	// or retiring compaction waits for one (none was free at the tick),
	// nil otherwise: the wait is a case of the loop's select, so appends
	// and control requests are served meanwhile instead of queuing behind
	// other sessions' compactions.
	slot chan struct{}

	// heldC fires heldGrace after a compaction held the file it
	// replaced (another program may write to it: foreign.go): the file,
	// its late lines rescued, is let go then, whatever the session does
	// meanwhile. Held until the next idle tick instead, a session
	// appended to every second kept one descriptor (and the old file's
	// disk space) for as long as it lived.
	heldT    clock.Timer
	heldC    <-chan time.Time
	heldFile fsys.File
}

func newLoop(s *Writer, st *State) *loop {
	env := &s.env
	l := &loop{s: s, st: st, env: env, lastActive: env.clock.Now(), within: env.compactWithin}
	if q := env.compactWithin / 4; q > 0 {
		l.within -= rand.N(q)
	}
	l.idle = env.clock.NewTimer(l.wake())
	return l
}

func (l *loop) stopTimers() {
	if l.heldT != nil {
		l.heldT.Stop()
	}
	l.idle.Stop()
}

// serve runs the loop until the writer retires or exits.
func (l *loop) serve() {
	s, st := l.s, l.st
	for {
		l.watchHeld()
		if l.step() {
			return
		}
		if st.failed != nil {
			st.log.Error("session writer failed; it will reopen from disk on the next request", zap.Error(st.failed))
			s.exit(st, &notProcessed{fmt.Errorf("session writer failed and is reopening (%w); retry: %w", st.failed, errdefs.ErrUnavailable)})
			return
		}
	}
}

// step serves the next event; it reports whether the writer is gone.
func (l *loop) step() bool {
	s, st := l.s, l.st
	select {
	case <-l.heldC:
		st.rescueLate(true)
		st.held.Drop()
		l.heldC, l.heldFile = nil, nil
	case r := <-s.reqs:
		return l.append(r)
	case c := <-s.ctrl:
		return l.control(c)
	case <-l.idle.C():
		return l.idleTick()
	case l.slot <- struct{}{}:
		l.slot = nil
		return l.withSlot()
	case <-s.stopCh:
		select {
		case <-s.abortCh: // abort wins: the time for a clean stop is over
		default:
			l.stop()
		}
		s.exit(st, errShutdown)
		return true
	case <-s.abortCh:
		s.exit(st, errShutdown)
		return true
	}
	return false
}

// append serves r; it reports whether the writer retired (the compaction
// that may follow the answer can outlast IdleRetire with nothing queued).
func (l *loop) append(r *AppendRequest) bool {
	s, st := l.s, l.st
	s.enter(serving)
	st.commit(s.group(r))
	s.hasContent.Store(st.Exists())
	l.touch()
	// Appended to again: not idle any more, the next tick decides
	// anew. (A control request keeps the wait: idleWork checks
	// again what is due once it has the slot.)
	l.slot = nil
	// Entries that waited long enough go into the file now, right
	// after their group's answer: an agent thinks after an answer, so
	// the rewrite seldom delays its next append. One that did not happen
	// (no room, a file another program keeps changing) is not tried
	// again at every append, only at the timer's pace (wake).
	if st.failed == nil && l.due() && clock.Since(l.env.clock, l.tried) >= l.retry() {
		return l.compactSoon()
	}
	return false
}

// control runs control request c; it reports whether the writer retired.
func (l *loop) control(c *ControlRequest) bool {
	s, st := l.s, l.st
	s.took(&c.Reply)
	opened := s.phase == fresh
	s.enter(serving)
	c.err = c.op(st)
	s.hasContent.Store(st.Exists())
	l.touch()
	// Retired before the answer: the caller finds it gone.
	gone := s.retireAfter(st, c, opened)
	close(c.done)
	return gone
}

func (l *loop) touch() {
	l.lastActive = l.env.clock.Now()
	l.idle.Reset(l.wake())
}

// idleFor is how long the writer has gone without activity.
func (l *loop) idleFor() time.Duration { return clock.Since(l.env.clock, l.lastActive) }

// due reports whether a compaction rule other than retirement asks for
// one now: a new transcript once the session idles, or entries that
// waited CompactWithin (compact.go's newDue and staleDue).
func (l *loop) due() bool {
	st := l.st
	return st.newDue() && l.idleFor() >= l.env.idleCompact ||
		st.staleDue(l.env.clock.Now(), l.within)
}

// wake is how long until the next rule may be due: the idle compaction
// of a new transcript, the oldest entry's CompactWithin, retirement. A
// deadline already past (its compaction did not happen: no room, another
// writer's file changing, a large file's tail waiting for retirement) is
// tried again IdleCompact later, never in a busy loop.
func (l *loop) wake() time.Duration {
	st := l.st
	next := func(left time.Duration) time.Duration {
		if left <= 0 {
			return l.retry()
		}
		return left
	}
	d := next(l.env.idleRetire - l.idleFor())
	if len(st.pending) > 0 {
		if st.newDue() {
			d = min(d, next(l.env.idleCompact-l.idleFor()))
		}
		d = min(d, next(l.within-clock.Since(l.env.clock, st.pendingSince)))
	}
	return d
}

// retry is how long a rule whose compaction did not happen waits before
// it is tried again.
func (l *loop) retry() time.Duration { return min(l.env.idleCompact, l.within) }

// idleTick is the timer's turn: the replaced file goes, a compaction that
// is due runs or waits for a slot, and the writer retires when it has
// been idle long enough. It reports whether the writer retired.
func (l *loop) idleTick() bool {
	st := l.st
	// The file the last compaction replaced is let go now, its late
	// lines rescued first (foreign.go).
	st.rescueLate(true)
	st.held.Drop()
	retireDue := l.idleFor() >= l.env.idleRetire
	switch {
	case st.failed != nil:
	case l.due() || retireDue && len(st.pending) > 0:
		if l.compactSoon() {
			return true
		}
	case retireDue:
		if l.s.retire(st) {
			return true
		}
	}
	l.idle.Reset(l.wake())
	return false
}

// compactSoon runs idleWork if a compaction slot is free, and otherwise
// lets the loop's select wait for one (appends are served meanwhile). It
// reports whether the writer retired.
func (l *loop) compactSoon() bool {
	select {
	case l.st.CompactSlots <- struct{}{}:
		l.slot = nil // an earlier wait is answered too
		return l.withSlot()
	default:
		l.slot = l.st.CompactSlots // withSlot runs once one is free
		return false
	}
}

// withSlot runs idleWork with the slot just taken, then gives it back.
func (l *loop) withSlot() bool {
	st := l.st
	l.tried = l.env.clock.Now()
	st.slotHeld = true
	defer func() {
		st.slotHeld = false
		<-st.CompactSlots
	}()
	return l.idleWork()
}

// idleWork is the idle tick's compaction and retirement, run with a slot
// held; it reports whether the writer retired.
func (l *loop) idleWork() bool {
	st := l.st
	if st.failed == nil && l.due() {
		reason := ReasonStale
		if st.newDue() {
			reason = ReasonIdle
		}
		if err := st.Compact(reason); err != nil {
			st.log.Warn("compaction failed; the journal keeps the entries", zap.String("reason", string(reason)), zap.Error(err))
		}
	}
	if l.idleFor() >= l.env.idleRetire && st.failed == nil {
		// Whatever the idle rule left pending goes into the file now:
		// once the writer is gone nothing would move it there until the
		// session is written again (official readers would see a stale
		// file for good). One rewrite per retirement bounds what this
		// costs.
		if len(st.pending) > 0 {
			if err := st.Compact(ReasonRetire); err != nil {
				st.log.Warn("compaction before retiring failed; the journal keeps the entries", zap.Error(err))
			}
		}
		return l.s.retire(st)
	}
	return false
}

// watchHeld (re)arms heldC when a compaction replaced the canonical file
// since the last turn, and disarms it once the replaced file is gone.
func (l *loop) watchHeld() {
	st := l.st
	switch {
	case st.held.File() == l.heldFile:
	case st.held.File() == nil:
		l.heldT.Stop()
		l.heldC, l.heldFile = nil, nil
	case l.heldT == nil:
		l.heldT = l.env.clock.NewTimer(heldGrace)
		l.heldC, l.heldFile = l.heldT.C(), st.held.File()
	default:
		l.heldT.Stop()
		l.heldT.Reset(heldGrace)
		l.heldC, l.heldFile = l.heldT.C(), st.held.File()
	}
}

// stop is the clean stop (Close, delete, restore): serve what is queued,
// then compact, so that the journal can go.
func (l *loop) stop() {
	s, st := l.s, l.st
	s.enter(stopping)
	s.drain(st)
	if st.failed != nil {
		return
	}
	if err := st.Compact(ReasonShutdown); errors.Is(err, errCompactAborted) {
		st.log.Debug("the time to stop ran out before this session's compaction; the journal keeps the entries for the next start")
	} else if err != nil {
		st.log.Error("shutdown compaction failed; the journal keeps the entries for the next start", zap.Error(err))
	} else {
		st.dropEmptyJournal()
	}
}

// heldGrace is how long a compaction keeps the file it replaced open
// when another program may still write to it (foreign.go): long enough
// for an agent that opened the old file just before the rename to finish
// its write (they open, write and close), short enough that the maxHeld
// slots shared by all sessions come free again quickly.
const heldGrace = 200 * time.Millisecond
