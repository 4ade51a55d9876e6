package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
)

var (
	// ErrFenced marks a write refused because another machine took the
	// session over: nothing of it is written from here any more.
	ErrFenced = errors.New("fenced")
	// ErrGone: the lease Ensure took was released (the session went idle)
	// before the transaction ran; it is taken again on a retry.
	ErrGone = errors.New("the session's lease was released meanwhile")
	// ErrDiverged: the copy here and the rows another machine wrote have
	// parted ways; trying again changes nothing until a pull (or a
	// delete) settles it.
	ErrDiverged = errors.New("the local copy differs from the rows the former holder wrote")
	// ErrLacking: the session was taken over from another machine whose
	// lines could not be brought here.
	ErrLacking = errors.New("what the former holder wrote could not be brought here")
)

// LeasedError refuses a write to a session another machine holds: an
// append (errdefs.ErrLeased) or the mirror's rows.
type LeasedError struct {
	ProjectKey, SessionID string
	Holder                string
	Expires               time.Time
	// TakenOver: this machine held it and lost it (it was fenced).
	TakenOver bool
}

func (e *LeasedError) Error() string {
	if e.TakenOver {
		return fmt.Sprintf("session %s/%s was taken over by machine %q (its lease runs to %s): this machine was fenced and writes to it no more; "+
			"its local entries are kept. Append on %s, or wait until its lease expires and pull the session here",
			e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339), e.Holder)
	}
	return fmt.Sprintf("session %s/%s is leased to machine %q until %s (it is being written there): append on %s, or retry after the lease expires",
		e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339), e.Holder)
}

func (e *LeasedError) Unwrap() error { return errdefs.ErrLeased }

// Short is the fencing as Status lists it.
func (e *LeasedError) Short() string {
	return fmt.Sprintf("%s/%s: fenced, taken over by %s (lease until %s)", e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339))
}

// fencedError is a LeasedError that also stops the mirror's writes.
type fencedError struct{ *LeasedError }

func (e fencedError) Unwrap() []error { return []error{ErrFenced, e.LeasedError} }
