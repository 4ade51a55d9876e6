package writer

import (
	"fmt"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// registry keeps the live session writers, one per key, and the references
// callers hold on them: a writer retires or exits only once the registry
// says nobody can reach it any more.
type registry struct {
	// admit says whether key may take a writer (the trash refuses the
	// sessions it is moving: trash.Admit).
	admit func(layout.Key) error
	// env is what every writer the registry starts is given.
	env sessionEnv

	mu       sync.Mutex
	sessions map[layout.Key]*session
	// leaving are writers out of sessions whose goroutine has not ended
	// yet: a new writer of the same key waits for the old one.
	leaving map[layout.Key]*session
	closing bool
	wg      sync.WaitGroup
}

func newRegistry(admit func(layout.Key) error, env sessionEnv) *registry {
	r := &registry{admit: admit, env: env, sessions: make(map[layout.Key]*session), leaving: make(map[layout.Key]*session)}
	r.env.reg = r
	return r
}

// acquire returns the live writer of key, starting one if needed, and
// takes a reference that keeps it from retiring until release.
func (r *registry) acquire(key layout.Key) (*session, error) {
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
		s = newSession(r.env, key)
		if old := r.leaving[key]; old != nil {
			s.prev = old.exited
		}
		r.sessions[key] = s
		r.wg.Add(1)
		go s.run()
	}
	s.refs++
	return s, nil
}

func (r *registry) release(s *session) {
	r.mu.Lock()
	s.dropRefLocked()
	r.mu.Unlock()
}

// whenUnreferenced returns a channel closed once nobody holds a reference
// to s (see session.exit).
func (r *registry) whenUnreferenced(s *session) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.refs == 0 {
		return closedChan
	}
	if s.unref == nil {
		s.unref = make(chan struct{})
	}
	return s.unref
}

// isLive reports whether s is still the writer callers of its key reach.
func (r *registry) isLive(s *session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[s.key] == s
}

// follow marks key's live writer as followed, so it does not retire while
// a Follow stream waits on it; unfollow undoes it.
func (r *registry) follow(key layout.Key) (*session, error) {
	s, err := r.acquire(key)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	s.dropRefLocked()
	s.followers++
	r.mu.Unlock()
	return s, nil
}

func (r *registry) unfollow(s *session) {
	r.mu.Lock()
	s.followers--
	r.mu.Unlock()
}

// tryRemove takes s out of the map when nobody holds a reference and its
// queue is empty; after that no caller can reach it, so it may exit.
func (r *registry) tryRemove(s *session, force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && r.inUseLocked(s) {
		return false
	}
	if r.sessions[s.key] == s {
		delete(r.sessions, s.key)
		r.leaving[s.key] = s
	}
	return true
}

// inUse reports whether someone holds, follows or queues for s: a writer
// in use cannot retire.
func (r *registry) inUse(s *session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inUseLocked(s)
}

func (r *registry) inUseLocked(s *session) bool {
	return s.refs > 0 || s.followers > 0 || len(s.reqs) > 0 || len(s.ctrl) > 0
}

// exited is the last thing a writer goroutine does.
func (r *registry) exited(s *session) {
	r.mu.Lock()
	if r.leaving[s.key] == s {
		delete(r.leaving, s.key)
	}
	r.mu.Unlock()
	close(s.exited)
	r.wg.Done()
}

// lookup returns key's live writer, nil when it has none.
func (r *registry) lookup(key layout.Key) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[key]
}

// pathChecked reports whether key has a live writer whose paths an
// earlier Append already checked for symbolic links.
func (r *registry) pathChecked(key layout.Key) bool {
	s := r.lookup(key)
	return s != nil && s.pathChecked.Load()
}

// live returns the live writers whose key match accepts (every one when
// match is nil).
func (r *registry) live(match func(layout.Key) bool) []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*session
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
func (r *registry) shut() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	all := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	return all
}

// done returns a channel closed once every writer goroutine has ended.
func (r *registry) done() <-chan struct{} {
	c := make(chan struct{})
	go func() { r.wg.Wait(); close(c) }()
	return c
}
