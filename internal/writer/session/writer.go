package session

import (
	"context"
	"errors"
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

// Reply is how the writer answers a request: it sets err and closes done.
type Reply struct {
	err  error
	done chan struct{}
	// passRef: the caller's reference to the writer (its registry's count)
	// went into the queue with the request; whoever takes the request out
	// of the queue drops it (Writer.took).
	passRef bool
}

func newReply() Reply { return Reply{done: make(chan struct{})} }

// Wait waits for the writer's answer.
func (r *Reply) Wait() error {
	<-r.done
	return r.err
}

// PassesRef reports whether the caller's reference to the writer goes
// into the queue with the request, for the writer to drop as it takes it.
func (r *Reply) PassesRef() bool { return r.passRef }

// Retry readies a request answered NotProcessed for another writer.
func (r *Reply) Retry() { *r = Reply{done: make(chan struct{}), passRef: r.passRef} }

// AppendRequest is an append queued to a writer.
type AppendRequest struct {
	Reply
	opt     sessionstore.AppendOptions
	entries []transcript.Entry
	bytes   int
	res     *AppendResult
}

// NewAppend is the request to append entries (bytes long with their
// newlines) as opt says.
func NewAppend(opt sessionstore.AppendOptions, entries []transcript.Entry, bytes int) *AppendRequest {
	return &AppendRequest{Reply: newReply(), opt: opt, entries: entries, bytes: bytes}
}

// Result is the append's result, once Wait returned nil.
func (r *AppendRequest) Result() *AppendResult { return r.res }

// ControlRequest is an operation run on a writer's goroutine.
type ControlRequest struct {
	Reply
	op     func(*State) error
	retire Retire
}

// NewControl is the request to run op on the writer, which then retires
// as retire says. A retiring request takes the caller's reference to the
// writer along: the writer drops it when it takes the request, so that
// its retirement does not depend on whether the caller got round to
// releasing it yet.
func NewControl(op func(*State) error, retire Retire) *ControlRequest {
	c := &ControlRequest{Reply: newReply(), op: op, retire: retire}
	c.passRef = retire != Stay
	return c
}

// Retire says whether a writer retires right after a control request
// instead of at its idle retirement. Either way it retires only when
// nobody else uses it (no reference, follower or queued request).
type Retire uint8

const (
	// Stay: the writer lives on until its idle retirement.
	Stay Retire = iota
	// RetireIfDone: retire when op succeeded and left nothing pending
	// (recovery's replay: a writer it opened, or one a read opened before
	// the replay got to it, would otherwise hold its files until the idle
	// retirement).
	RetireIfDone
	// RetireIfOpened: retire when the writer was opened for this request,
	// whatever op returned; what is pending is compacted first and stays
	// in the journal if that fails. For walks over every session (List
	// and Info, FlushAll, CheckAll and fork's source through view): they
	// meet the journals writers left when their last compaction failed,
	// and writers kept until the idle retirement would hold hundreds of
	// files at once, until the daemon ran out of descriptors (it did, in
	// TestHostileDescriptorExhaustion).
	RetireIfOpened
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
	// queued (RetireIfOpened retires such a writer after its request).
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
	// exited: the goroutine is gone (Writer.Exited is closed).
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
func (s *Writer) enter(p phase) {
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

// Writer is the handle callers use to reach one writer goroutine.
type Writer struct {
	env  sessionEnv
	key  layout.Key
	reqs chan *AppendRequest
	ctrl chan *ControlRequest

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

	// hasContent mirrors the writer's State.Exists() after each request,
	// so "does this session exist" needs no round trip: a writer started
	// for a fork that failed must not make the session look created.
	hasContent atomic.Bool
	// pathChecked is set once an Append found the key's paths free of
	// symbolic links (layout.CheckOnDisk) after this writer started: the
	// writer's files are open from then on, so later appends skip the
	// lstat chain (it was a tenth of the daemon's CPU per append).
	pathChecked atomic.Bool
}

// Registry is what a writer asks of the registry that started it, which
// counts the references callers hold on it: a writer retires or exits
// only once the registry says nobody can reach it any more.
type Registry interface {
	// Release drops a reference a request brought along (Reply.PassesRef).
	Release(w *Writer)
	// InUse reports whether someone holds, follows or queues for w.
	InUse(w *Writer) bool
	// TryRemove takes w out of the registry when it is not in use (or,
	// with force, whether or not it is); it reports whether w is out.
	TryRemove(w *Writer, force bool) bool
	// WhenUnreferenced returns a channel closed once nobody holds a
	// reference to w.
	WhenUnreferenced(w *Writer) <-chan struct{}
	// Exited is told as the goroutine ends, before Writer.Exited closes.
	Exited(w *Writer)
}

// sessionEnv is everything a session writer is given: the registry that
// holds it, what the writers share (the journal, the index, the ledger,
// the counters) and the settings of its loop. It reaches nothing else.
type sessionEnv struct {
	reg  Registry
	deps *Env
	log  *zap.Logger

	clock         clock.Clock
	queueDepth    int
	maxGroupBytes int
	idleCompact   time.Duration
	compactWithin time.Duration
	idleRetire    time.Duration
}

// New returns the writer of key, which reg holds; Run runs it. prev,
// when not nil, is closed once the writer it replaces has exited.
func New(env *Env, reg Registry, key layout.Key, prev <-chan struct{}) *Writer {
	c := env.Config
	return &Writer{
		env: sessionEnv{reg: reg, deps: env, log: c.Logger, clock: c.Clock, queueDepth: c.QueueDepth,
			maxGroupBytes: c.MaxGroupBytes, idleCompact: c.IdleCompact, compactWithin: c.CompactWithin, idleRetire: c.IdleRetire},
		key:     key,
		prev:    prev,
		reqs:    make(chan *AppendRequest, c.QueueDepth),
		ctrl:    make(chan *ControlRequest, 16),
		stopCh:  make(chan struct{}),
		abortCh: make(chan struct{}),
		exited:  make(chan struct{}),
	}
}

// Key is the session the writer writes.
func (s *Writer) Key() layout.Key { return s.key }

// Stop asks the writer to finish what is queued, compact and exit.
func (s *Writer) Stop() { s.stopOnce.Do(func() { close(s.stopCh) }) }

// Abort asks the writer to exit now: the time for a clean stop is over.
func (s *Writer) Abort() { s.abortOnce.Do(func() { close(s.abortCh) }) }

// Exited is closed once the writer's goroutine has ended.
func (s *Writer) Exited() <-chan struct{} { return s.exited }

// Queued reports whether requests wait in the writer's queues.
func (s *Writer) Queued() bool { return len(s.reqs) > 0 || len(s.ctrl) > 0 }

// HasContent reports whether the session held content after the
// writer's last request (see hasContent).
func (s *Writer) HasContent() bool { return s.hasContent.Load() }

// PathChecked reports whether an Append found the key's paths free of
// symbolic links since the writer started; MarkPathChecked says one did.
func (s *Writer) PathChecked() bool { return s.pathChecked.Load() }

func (s *Writer) MarkPathChecked() { s.pathChecked.Store(true) }

// QueueAppend queues r; it reports false when the writer exited or ctx
// ended first.
func (s *Writer) QueueAppend(ctx context.Context, r *AppendRequest) bool {
	select {
	case s.reqs <- r:
		return true
	case <-s.exited:
	case <-ctx.Done():
	}
	return false
}

// QueueControl queues c, as QueueAppend does.
func (s *Writer) QueueControl(ctx context.Context, c *ControlRequest) bool {
	select {
	case s.ctrl <- c:
		return true
	case <-s.exited:
	case <-ctx.Done():
	}
	return false
}

// errShutdown answers what a writer stopped by Close did not serve.
var errShutdown = fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable)

// Run is the writer goroutine: the only code that touches this session's
// files while it lives.
func (s *Writer) Run() {
	defer func() {
		s.enter(exited)
		s.env.reg.Exited(s)
		close(s.exited)
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
	st.markOpenTail()
	s.enter(fresh)
	defer st.closeFiles()
	l := newLoop(s, st)
	defer l.stopTimers()
	l.serve()
}

// retire ends the writer when it is healthy and nobody holds or queues
// for it: the next request opens a new one from disk. It reports whether
// the writer is gone.
func (s *Writer) retire(st *State) bool {
	if st.failed != nil || !s.env.reg.TryRemove(s, false) {
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
func (s *Writer) retireAfter(st *State, c *ControlRequest, opened bool) bool {
	switch c.retire {
	case RetireIfDone:
		return c.err == nil && len(st.pending) == 0 && s.retire(st)
	case RetireIfOpened:
		if !opened || st.failed != nil || s.env.reg.InUse(s) {
			return false
		}
		st.rescueLate(true)
		st.held.Drop()
		if len(st.pending) > 0 {
			// As the idle retirement does: once the writer is gone
			// nothing moves the entries into the file until the session
			// is written again.
			if err := st.Compact(ReasonRetire); err != nil {
				st.log.Warn("compaction before retiring failed; the journal keeps the entries", zap.Error(err))
			}
			st.Publish()
		}
		return s.retire(st)
	}
	return false
}

// took drops the reference a request brought along (Reply.passRef); every
// place that takes a request out of the queue calls it, or the writer
// could never again find itself unreferenced.
func (s *Writer) took(r *Reply) {
	if r.passRef {
		s.env.reg.Release(s)
	}
}

// group takes first plus whatever else is queued, up to the group byte cap.
func (s *Writer) group(first *AppendRequest) []*AppendRequest {
	g := []*AppendRequest{first}
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
func (s *Writer) drain(st *State) {
	for {
		select {
		case r := <-s.reqs:
			st.commit(s.group(r))
		case c := <-s.ctrl:
			s.took(&c.Reply)
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

// exit takes the writer out of its registry, then answers every request
// still queued or about to be queued with err, until no caller holds a
// reference. Only then can the goroutine end without stranding anyone.
func (s *Writer) exit(st *State, err error) {
	// Before anyone can reach a new writer of this session: closing a log
	// that failed tells the journal store where to cut it back to for the new
	// writer.
	st.closeFiles()
	s.env.reg.TryRemove(s, true)
	s.enter(closing)
	// Wake followers now: they move on to a fresh writer.
	st.notifyChange()
	// Out of the registry, nobody new can reach the writer, and a request
	// is only ever queued by a caller holding a reference (a retiring one
	// hands its reference on with the request, dropped as it is taken).
	// So once the references are gone, what is queued is all there will
	// ever be.
	unref := s.env.reg.WhenUnreferenced(s)
	for done := false; !done; {
		select {
		case r := <-s.reqs:
			r.err = err
			close(r.done)
		case c := <-s.ctrl:
			s.took(&c.Reply)
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

// NotProcessed reports whether err answers a request the writer never
// looked at because it was exiting: the request may go to a fresh writer.
func NotProcessed(err error) bool {
	var np *notProcessed
	return errors.As(err, &np)
}

// notProcessed marks the answer given to a request the writer never looked
// at because it was exiting; the manager retries such requests on a fresh
// writer.
type notProcessed struct{ err error }

func (e *notProcessed) Error() string { return e.err.Error() }

func (e *notProcessed) Unwrap() error { return e.err }
