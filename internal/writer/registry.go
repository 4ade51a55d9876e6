package writer

import (
	"fmt"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// registry keeps the live session writers, one per key, and the references
// callers hold on them: a writer retires or exits only once the registry
// says nobody can reach it any more (it is the writers' session.Registry).
type registry struct {
	// admit says whether key may take a writer (the trash refuses the
	// sessions it is moving: trash.Admit).
	admit func(layout.Key) error
	// env is what every writer the registry starts is given.
	env *session.Env

	mu       sync.Mutex
	sessions map[layout.Key]*session.Writer
	// leaving are writers out of sessions whose goroutine has not ended
	// yet: a new writer of the same key waits for the old one.
	leaving map[layout.Key]*session.Writer
	// holds are the references to each writer whose goroutine has not
	// ended yet.
	holds   map[*session.Writer]*hold
	closing bool
	wg      sync.WaitGroup
}

// hold is what the registry counts of one writer. refs counts callers
// about to queue a request: the writer may not exit before they are
// answered. followers counts open Follow streams: they only keep the
// writer from retiring when idle. unref, once the closing writer waits
// for it, is closed when refs reaches zero. exited: the goroutine ended;
// the hold goes once nothing counts on it either (a follower may let go
// after the writer exited).
type hold struct {
	refs      int
	followers int
	unref     chan struct{}
	exited    bool
}

// forgetLocked drops s's hold once its goroutine ended and nobody counts
// on it any more; the caller holds mu.
func (r *registry) forgetLocked(s *session.Writer, h *hold) {
	if h.exited && h.refs == 0 && h.followers == 0 {
		delete(r.holds, s)
	}
}

func newRegistry(admit func(layout.Key) error, env *session.Env) *registry {
	return &registry{admit: admit, env: env, sessions: make(map[layout.Key]*session.Writer),
		leaving: make(map[layout.Key]*session.Writer), holds: make(map[*session.Writer]*hold)}
}

// acquire returns the live writer of key, starting one if needed, and
// takes a reference that keeps it from retiring until Release.
func (r *registry) acquire(key layout.Key) (*session.Writer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return nil, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable)
	}
	if err := r.admit(key); err != nil {
		return nil, err
	}
	s := r.sessions[key]
	if s == nil {
		var prev <-chan struct{}
		if old := r.leaving[key]; old != nil {
			prev = old.Exited()
		}
		s = session.New(r.env, r, key, prev)
		r.sessions[key] = s
		r.holds[s] = &hold{}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			s.Run()
		}()
	}
	r.holds[s].refs++
	return s, nil
}

// Release drops a reference acquire took; the writer calls it too, for a
// reference a request brought along (session.Registry).
func (r *registry) Release(s *session.Writer) {
	r.mu.Lock()
	r.dropRefLocked(s)
	r.mu.Unlock()
}

// dropRefLocked drops a reference to s; the caller holds mu.
func (r *registry) dropRefLocked(s *session.Writer) {
	h := r.holds[s]
	h.refs--
	if h.refs == 0 && h.unref != nil {
		close(h.unref)
		h.unref = nil
	}
	r.forgetLocked(s, h)
}

// WhenUnreferenced returns a channel closed once nobody holds a reference
// to s (see session.Writer's exit).
func (r *registry) WhenUnreferenced(s *session.Writer) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.holds[s]
	if h.refs == 0 {
		return closedChan
	}
	if h.unref == nil {
		h.unref = make(chan struct{})
	}
	return h.unref
}

// isLive reports whether s is still the writer callers of its key reach.
func (r *registry) isLive(s *session.Writer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[s.Key()] == s
}

// follow marks key's live writer as followed, so it does not retire while
// a Follow stream waits on it; unfollow undoes it.
func (r *registry) follow(key layout.Key) (*session.Writer, error) {
	s, err := r.acquire(key)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.dropRefLocked(s)
	r.holds[s].followers++
	r.mu.Unlock()
	return s, nil
}

func (r *registry) unfollow(s *session.Writer) {
	r.mu.Lock()
	h := r.holds[s]
	h.followers--
	r.forgetLocked(s, h)
	r.mu.Unlock()
}

// TryRemove takes s out of the map when nobody holds a reference and its
// queue is empty; after that no caller can reach it, so it may exit.
func (r *registry) TryRemove(s *session.Writer, force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && r.inUseLocked(s) {
		return false
	}
	if k := s.Key(); r.sessions[k] == s {
		delete(r.sessions, k)
		r.leaving[k] = s
	}
	return true
}

// InUse reports whether someone holds, follows or queues for s: a writer
// in use cannot retire.
func (r *registry) InUse(s *session.Writer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inUseLocked(s)
}

func (r *registry) inUseLocked(s *session.Writer) bool {
	h := r.holds[s]
	return h.refs > 0 || h.followers > 0 || s.Queued()
}

// Exited is told as a writer goroutine ends, before its Exited channel
// closes.
func (r *registry) Exited(s *session.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := s.Key(); r.leaving[k] == s {
		delete(r.leaving, k)
	}
	h := r.holds[s]
	h.exited = true
	r.forgetLocked(s, h)
}

// lookup returns key's live writer, nil when it has none.
func (r *registry) lookup(key layout.Key) *session.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[key]
}

// pathChecked reports whether key has a live writer whose paths an
// earlier Append already checked for symbolic links.
func (r *registry) pathChecked(key layout.Key) bool {
	s := r.lookup(key)
	return s != nil && s.PathChecked()
}

// live returns the live writers whose key match accepts (every one when
// match is nil).
func (r *registry) live(match func(layout.Key) bool) []*session.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*session.Writer
	for k, s := range r.sessions {
		if match == nil || match(k) {
			out = append(out, s)
		}
	}
	return out
}

// count is how many writers are live.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// shut refuses every later acquire and returns the writers live now.
func (r *registry) shut() []*session.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	all := make([]*session.Writer, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	return all
}

// closedChan is always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// done returns a channel closed once every writer goroutine has ended.
func (r *registry) done() <-chan struct{} {
	c := make(chan struct{})
	go func() { r.wg.Wait(); close(c) }()
	return c
}
