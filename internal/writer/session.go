package writer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/transcript"
)

// reply is how the writer answers a request: it sets err and closes done.
type reply struct {
	err  error
	done chan struct{}
	// passRef: the caller's reference to the writer (session.refs) went
	// into the queue with the request; whoever takes the request out of
	// the queue drops it (session.took).
	passRef bool
}

func newReply() reply { return reply{done: make(chan struct{})} }

type appendReq struct {
	reply
	opt     sessionstore.AppendOptions
	entries []transcript.Entry
	bytes   int
	res     *AppendResult
}

type ctrlReq struct {
	reply
	op     func(*state) error
	retire retireMode
}

// retireMode says whether a writer retires right after a control request
// instead of at its idle retirement. Either way it retires only when
// nobody else uses it (no reference, follower or queued request).
type retireMode uint8

const (
	// stay: the writer lives on until its idle retirement.
	stay retireMode = iota
	// retireIfDone: retire when op succeeded and left nothing pending
	// (recovery's replay: a writer it opened, or one a read opened before
	// the replay got to it, would otherwise hold its files until the idle
	// retirement).
	retireIfDone
	// retireIfOpened: retire when the writer was opened for this request,
	// whatever op returned; what is pending is compacted first and stays
	// in the journal if that fails. For walks over every session (List
	// and Info, FlushAll, CheckAll and fork's source through view): they
	// meet the journals writers left when their last compaction failed,
	// and writers kept until the idle retirement would hold hundreds of
	// files at once, until the daemon ran out of descriptors (it did, in
	// TestHostileDescriptorExhaustion).
	retireIfOpened
)

// phase is where a session writer is in its life. Only the writer
// goroutine moves it, and only through enter, along these transitions:
//
//	opening -> fresh                (opened)
//	opening -> closing              (the session could not be opened)
//	fresh   -> serving              (served its first request)
//	fresh, serving -> retiring      (idle, or asked to by its request)
//	fresh, serving -> stopping      (Close, delete, restore)
//	fresh, serving -> closing       (a write failed, or Close ran out of time)
//	stopping -> closing             (drained and compacted)
//	retiring, closing -> exited
//
// Requests to stop come from other goroutines through stopCh and abortCh;
// the writer acts on them by entering stopping or closing.
type phase uint8

const (
	// opening: waiting for the writer it replaces to exit, then loading
	// the session from disk.
	opening phase = iota
	// fresh: open, and no request served yet: opened for the first one
	// queued (retireIfOpened retires such a writer after its request).
	fresh
	// serving: has served a request; retires when idle long enough.
	serving
	// stopping: asked to stop (Close, or a delete or restore of the
	// session): answers what is queued, compacts, then closes.
	stopping
	// retiring: healthy and out of the registry, nobody using it: drops
	// an empty log, closes its files, hands its entry back to the index.
	retiring
	// closing: out of the registry; answers every request still queued
	// or about to be with an error, until nobody holds a reference, then
	// closes its files.
	closing
	// exited: the goroutine is gone (session.exited is closed).
	exited
)

var phaseNames = [...]string{"opening", "fresh", "serving", "stopping", "retiring", "closing", "exited"}

func (p phase) String() string { return phaseNames[p] }

// next lists the phases each phase may move to.
var next = [...][]phase{
	opening:  {fresh, closing},
	fresh:    {serving, stopping, retiring, closing},
	serving:  {stopping, retiring, closing},
	stopping: {closing},
	retiring: {exited},
	closing:  {exited},
	exited:   nil,
}

// enter moves the writer to phase p. A move the lifecycle does not allow
// is a bug in the writer, never a condition to handle.
func (s *session) enter(p phase) {
	if p == s.phase && p == serving {
		return
	}
	for _, q := range next[s.phase] {
		if q == p {
			s.phase = p
			return
		}
	}
	panic(fmt.Sprintf("writer of %s: no move from %s to %s", s.key, s.phase, p))
}

// session is the handle callers use to reach one writer goroutine.
type session struct {
	env  sessionEnv
	key  layout.Key
	reqs chan *appendReq
	ctrl chan *ctrlReq

	// phase belongs to the writer goroutine (see phase).
	phase phase

	stopCh  chan struct{} // Close, delete, restore: finish, compact, exit
	abortCh chan struct{} // Close ran out of time: exit now
	exited  chan struct{} // closed when the goroutine is gone
	// prev is the exited channel of the writer this one replaces, when
	// that one had left the sessions map but was still finishing (closing
	// or removing its files, releasing its index entry): this writer
	// touches the session's files only after it.
	prev      <-chan struct{}
	stopOnce  sync.Once
	abortOnce sync.Once

	// Guarded by the registry's mu. refs counts callers about to queue a
	// request: the writer may not exit before they are answered.
	// followers counts open Follow streams: they only keep the writer from
	// retiring when idle. unref, once the closing writer waits for it, is
	// closed when refs reaches zero.
	refs      int
	followers int
	unref     chan struct{}

	// hasContent mirrors the writer's state.exists() after each request,
	// so "does this session exist" needs no round trip: a writer started
	// for a fork that failed must not make the session look created.
	hasContent atomic.Bool
	// pathChecked is set once an Append found the key's paths free of
	// symbolic links (layout.CheckOnDisk) after this writer started: the
	// writer's files are open from then on, so later appends skip the
	// lstat chain (it was a tenth of the daemon's CPU per append).
	pathChecked atomic.Bool
}

// sessionEnv is everything a session writer is given: the registry that
// holds it, what the writers share (the journal, the index, the ledger,
// the counters) and the settings of its loop. It reaches nothing else.
type sessionEnv struct {
	reg  *registry
	deps *deps
	log  *zap.Logger

	clock         clock.Clock
	queueDepth    int
	maxGroupBytes int
	idleCompact   time.Duration
	idleRetire    time.Duration
}

func newSession(env sessionEnv, key layout.Key) *session {
	return &session{
		env:     env,
		key:     key,
		reqs:    make(chan *appendReq, env.queueDepth),
		ctrl:    make(chan *ctrlReq, 16),
		stopCh:  make(chan struct{}),
		abortCh: make(chan struct{}),
		exited:  make(chan struct{}),
	}
}

func (s *session) stop() { s.stopOnce.Do(func() { close(s.stopCh) }) }

func (s *session) abort() { s.abortOnce.Do(func() { close(s.abortCh) }) }

// dropRefLocked drops a reference to s; the caller holds the registry's mu.
func (s *session) dropRefLocked() {
	s.refs--
	if s.refs == 0 && s.unref != nil {
		close(s.unref)
		s.unref = nil
	}
}

// errShutdown answers what a writer stopped by Close did not serve.
var errShutdown = fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable)

// run is the writer goroutine: the only code that touches this session's
// files while it lives.
func (s *session) run() {
	defer func() {
		s.enter(exited)
		s.env.reg.exited(s)
	}()
	if s.prev != nil {
		// The predecessor may be removing the journal this writer would
		// open: writing into a file unlinked after it was opened would
		// lose acknowledged entries at the next crash.
		<-s.prev
	}
	log := s.env.log.With(zap.Stringer("session", s.key))
	st := newState(s.env.deps, s.key, log)
	st.abort = s.abortCh
	if err := st.open(); err != nil {
		log.Error("cannot open session", zap.Error(err))
		s.exit(st, err)
		return
	}
	s.enter(fresh)
	defer st.closeFiles()
	l := newLoop(s, st)
	defer l.stopTimers()
	l.serve()
}

// retire ends the writer when it is healthy and nobody holds or queues
// for it: the next request opens a new one from disk. It reports whether
// the writer is gone.
func (s *session) retire(st *state) bool {
	if st.failed != nil || !s.env.reg.tryRemove(s, false) {
		return false
	}
	s.enter(retiring)
	st.dropEmptyJournal()
	st.closeFiles()
	st.release()
	// Followers move on to the next writer. Config.Changed is not told:
	// the transcript holds what it held, and the next writer's Change
	// says so with its own lineage. Told, the mirror turned for nothing,
	// and for a session whose compaction waits for space its turn's read
	// opened a writer that retired again: a turn every pace, for as long
	// as the disk stayed full.
	st.wakeFollowers()
	return true
}

// retireAfter retires the writer after control request c when c asks
// for it (c.retire) and the writer can; it reports whether it is gone.
func (s *session) retireAfter(st *state, c *ctrlReq, opened bool) bool {
	switch c.retire {
	case retireIfDone:
		return c.err == nil && len(st.pending) == 0 && s.retire(st)
	case retireIfOpened:
		if !opened || st.failed != nil || s.env.reg.inUse(s) {
			return false
		}
		st.rescueLate(true)
		st.dropHeld()
		if len(st.pending) > 0 {
			// As the idle retirement does: once the writer is gone
			// nothing moves the entries into the file until the session
			// is written again.
			if err := st.compact("retire"); err != nil {
				st.log.Warn("compaction before retiring failed; the journal keeps the entries", zap.Error(err))
			}
			st.publish()
		}
		return s.retire(st)
	}
	return false
}

// took drops the reference a request brought along (reply.passRef); every
// place that takes a request out of the queue calls it, or the writer
// could never again find itself unreferenced.
func (s *session) took(r *reply) {
	if r.passRef {
		s.env.reg.release(s)
	}
}

// group takes first plus whatever else is queued, up to the group byte cap.
func (s *session) group(first *appendReq) []*appendReq {
	g := []*appendReq{first}
	total := first.bytes
	for total < s.env.maxGroupBytes {
		select {
		case r := <-s.reqs:
			g = append(g, r)
			total += r.bytes
		default:
			return g
		}
	}
	return g
}

// drain processes everything already queued (used at shutdown, when no new
// callers can arrive).
func (s *session) drain(st *state) {
	for {
		select {
		case r := <-s.reqs:
			st.commit(s.group(r))
		case c := <-s.ctrl:
			s.took(&c.reply)
			c.err = c.op(st)
			close(c.done)
		default:
			return
		}
		if st.failed != nil {
			return
		}
	}
}

// exit takes the writer out of the manager, then answers every request
// still queued or about to be queued with err, until no caller holds a
// reference. Only then can the goroutine end without stranding anyone.
func (s *session) exit(st *state, err error) {
	// Before anyone can reach a new writer of this session: closing a log
	// that failed tells the journal store where to cut it back to for the new
	// writer.
	st.closeFiles()
	s.env.reg.tryRemove(s, true)
	s.enter(closing)
	// Wake followers now: they move on to a fresh writer.
	st.notifyChange()
	// Out of the registry, nobody new can reach the writer, and a request
	// is only ever queued by a caller holding a reference (a retiring one
	// hands its reference on with the request, dropped as it is taken).
	// So once the references are gone, what is queued is all there will
	// ever be.
	unref := s.env.reg.whenUnreferenced(s)
	for done := false; !done; {
		select {
		case r := <-s.reqs:
			r.err = err
			close(r.done)
		case c := <-s.ctrl:
			s.took(&c.reply)
			c.err = err
			close(c.done)
		case <-unref:
			done = len(s.reqs) == 0 && len(s.ctrl) == 0
			unref = closedChan
		}
	}
	st.closeFiles()
	st.release()
}

// closedChan is always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// notProcessed marks the answer given to a request the writer never looked
// at because it was exiting; the manager retries such requests on a fresh
// writer.
type notProcessed struct{ err error }

func (e *notProcessed) Error() string { return e.err.Error() }

func (e *notProcessed) Unwrap() error { return e.err }
