package writer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
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
	opt     AppendOptions
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

// session is the handle callers use to reach one writer goroutine.
type session struct {
	m    *Manager
	key  layout.Key
	reqs chan *appendReq
	ctrl chan *ctrlReq

	stopCh  chan struct{} // Close: finish, compact, exit
	abortCh chan struct{} // Close ran out of time: exit now
	exited  chan struct{} // closed when the goroutine is gone
	// prev is the exited channel of the writer this one replaces, when
	// that one had left the sessions map but was still finishing (closing
	// or removing its files, releasing its index entry): this writer
	// touches the session's files only after it.
	prev      <-chan struct{}
	stopOnce  sync.Once
	abortOnce sync.Once

	// Guarded by m.mu. refs counts callers about to queue a request: the
	// writer may not exit before they are answered. followers counts open
	// Follow streams: they only keep the writer from retiring when idle.
	refs      int
	followers int

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

func newSession(m *Manager, key layout.Key) *session {
	return &session{
		m:       m,
		key:     key,
		reqs:    make(chan *appendReq, m.cfg.QueueDepth),
		ctrl:    make(chan *ctrlReq, 16),
		stopCh:  make(chan struct{}),
		abortCh: make(chan struct{}),
		exited:  make(chan struct{}),
	}
}

func (s *session) stop() { s.stopOnce.Do(func() { close(s.stopCh) }) }

func (s *session) abort() { s.abortOnce.Do(func() { close(s.abortCh) }) }

// run is the writer goroutine: the only code that touches this session's
// files while it lives.
func (s *session) run() {
	defer s.m.wg.Done()
	defer s.m.exited(s)
	if s.prev != nil {
		// The predecessor may be removing the journal this writer would
		// open: writing into a file unlinked after it was opened would
		// lose acknowledged entries at the next crash.
		<-s.prev
	}
	log := s.m.log.With(zap.Stringer("session", s.key))
	st := newState(&s.m.deps, s.key, log)
	if err := st.open(); err != nil {
		log.Error("cannot open session", zap.Error(err))
		s.exit(st, err)
		return
	}
	defer st.closeFiles()

	cfg := &s.m.cfg
	idle := time.NewTimer(cfg.IdleCompact)
	defer idle.Stop()
	lastActive := time.Now()
	touch := func() {
		lastActive = time.Now()
		idle.Reset(cfg.IdleCompact)
	}
	fresh := true // no request served yet: opened for the first one
	for {
		select {
		case r := <-s.reqs:
			fresh = false
			st.commit(s.group(r))
			s.hasContent.Store(st.exists())
			touch()
		case c := <-s.ctrl:
			s.took(&c.reply)
			opened := fresh
			fresh = false
			c.err = c.op(st)
			s.hasContent.Store(st.exists())
			touch()
			// Retired before the answer: the caller finds it gone.
			if s.retireAfter(st, c, opened) {
				close(c.done)
				return
			}
			close(c.done)
		case <-idle.C:
			if st.failed == nil && st.idleDue() {
				if err := st.compact("idle"); err != nil {
					log.Warn("idle compaction failed", zap.Error(err))
				}
			}
			if time.Since(lastActive) >= cfg.IdleRetire && st.failed == nil {
				// Whatever the idle rule left pending goes into the file
				// now: once the writer is gone nothing would move it there
				// until the session is written again (official readers
				// would see a stale file for good). One rewrite per
				// retirement bounds what this costs.
				if len(st.pending) > 0 {
					if err := st.compact("retire"); err != nil {
						log.Warn("compaction before retiring failed; the journal keeps the entries", zap.Error(err))
					}
				}
				if s.retire(st) {
					return
				}
			}
			wait := cfg.IdleRetire - time.Since(lastActive)
			if wait < cfg.IdleCompact {
				wait = cfg.IdleCompact
			}
			idle.Reset(wait)
		case <-s.stopCh:
			select {
			case <-s.abortCh: // abort wins: the time for a clean stop is over
				s.exit(st, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable))
				return
			default:
			}
			s.drain(st)
			if st.failed == nil {
				if err := st.compact("shutdown"); err != nil {
					log.Error("shutdown compaction failed; the journal keeps the entries for the next start", zap.Error(err))
				} else {
					st.dropEmptyJournal()
				}
			}
			s.exit(st, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable))
			return
		case <-s.abortCh:
			s.exit(st, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable))
			return
		}
		if st.failed != nil {
			log.Error("session writer failed; it will reopen from disk on the next request", zap.Error(st.failed))
			s.exit(st, &notProcessed{fmt.Errorf("session writer failed and is reopening (%w); retry: %w", st.failed, errdefs.ErrUnavailable)})
			return
		}
	}
}

// retire ends the writer when it is healthy and nobody holds or queues
// for it: the next request opens a new one from disk. It reports whether
// the writer is gone.
func (s *session) retire(st *state) bool {
	if st.failed != nil || !s.m.tryRemove(s, false) {
		return false
	}
	st.dropEmptyJournal()
	st.closeFiles()
	st.release()
	st.notifyChange()
	return true
}

// retireAfter retires the writer after control request c when c asks
// for it (c.retire) and the writer can; it reports whether it is gone.
func (s *session) retireAfter(st *state, c *ctrlReq, opened bool) bool {
	switch c.retire {
	case retireIfDone:
		return c.err == nil && len(st.pending) == 0 && s.retire(st)
	case retireIfOpened:
		if !opened || st.failed != nil || s.m.inUse(s) {
			return false
		}
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
		s.m.release(s)
	}
}

// group takes first plus whatever else is queued, up to the group byte cap.
func (s *session) group(first *appendReq) []*appendReq {
	g := []*appendReq{first}
	total := first.bytes
	for total < s.m.cfg.MaxGroupBytes {
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
	// that failed tells the log store where to cut it back to for the new
	// writer.
	st.closeFiles()
	s.m.tryRemove(s, true)
	// Wake followers now: they move on to a fresh writer.
	st.notifyChange()
	fail := func() {
		for {
			select {
			case r := <-s.reqs:
				r.err = err
				close(r.done)
			case c := <-s.ctrl:
				s.took(&c.reply)
				c.err = err
				close(c.done)
			default:
				return
			}
		}
	}
	for {
		fail()
		s.m.mu.Lock()
		idle := s.refs == 0 && len(s.reqs) == 0 && len(s.ctrl) == 0
		s.m.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(time.Millisecond)
	}
	st.closeFiles()
	st.release()
}

// notProcessed marks the answer given to a request the writer never looked
// at because it was exiting; the manager retries such requests on a fresh
// writer.
type notProcessed struct{ err error }

func (e *notProcessed) Error() string { return e.err.Error() }

func (e *notProcessed) Unwrap() error { return e.err }
