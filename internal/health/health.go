// Package health keeps the recovery failures sessiond's status reports. A
// failure that is not one session's (a damaged journal segment, an
// interrupted delete that could not be finished, an old journal that could
// not be imported) stays for the life of the process: it says what was lost
// or kept aside. A session whose replay failed (a full disk, say) is
// reported until it is healthy again, that is until a compaction puts its
// logged entries in its transcript; it then leaves the list and only counts
// among the past failures, so that status does not cry "RECOVERY FAILED"
// about a session that is fine.
package health

import (
	"sync"

	"github.com/sessiond/sessiond/internal/layout"
)

// Health is the list of failures. The zero value is ready; its methods are
// safe for concurrent use.
type Health struct {
	mu       sync.Mutex
	other    []string
	sessions []sessionFailure // in the order they failed
	past     uint64
}

type sessionFailure struct {
	key layout.Key
	msg string
}

// Failed records a failure that is not one session's.
func (h *Health) Failed(msg string) {
	h.mu.Lock()
	h.other = append(h.other, msg)
	h.mu.Unlock()
}

// SessionFailed records that key's recovery failed, replacing an earlier
// failure of key.
func (h *Health) SessionFailed(key layout.Key, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.sessions {
		if h.sessions[i].key == key {
			h.sessions[i].msg = msg
			return
		}
	}
	h.sessions = append(h.sessions, sessionFailure{key, msg})
}

// Healthy is told that key's logged entries are all in its transcript:
// its recovery failure, if any, is past.
func (h *Health) Healthy(key layout.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.sessions {
		if h.sessions[i].key == key {
			h.sessions = append(h.sessions[:i], h.sessions[i+1:]...)
			h.past++
			return
		}
	}
}

// Report returns the failures standing, oldest first, and how many of the
// sessions' failures are past.
func (h *Health) Report() (current []string, past uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	current = append(current, h.other...)
	for _, f := range h.sessions {
		current = append(current, f.msg)
	}
	return current, h.past
}
