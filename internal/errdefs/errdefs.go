// Package errdefs holds the few kinds of error sessiond's packages return.
// Code deep inside wraps one of these sentinels with %w and adds context; the
// server maps the kind to a gRPC status code in one place (see
// internal/server), so handlers never pick codes themselves.
package errdefs

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrInvalidArgument: the caller sent something sessiond will not store
	// or cannot interpret (bad JSON, bad session id, bad subpath...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the session (or other named thing) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the target of a create already exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrAmbiguous: a session id alone matches sessions in several projects.
	ErrAmbiguous = errors.New("ambiguous")
	// ErrUnavailable: sessiond is shutting down or the session writer is
	// being reopened; the request was not processed and may be retried.
	ErrUnavailable = errors.New("unavailable")
	// ErrNoSpace: the disk (or quota) is full.
	ErrNoSpace = errors.New("no space left")
	// ErrTooLarge: an entry or batch exceeds a configured limit.
	ErrTooLarge = errors.New("too large")
	// ErrCorrupt: stored data failed its checksum in a way that is not a
	// torn tail; it was kept aside and needs a human.
	ErrCorrupt = errors.New("corrupt")
	// ErrIO: the disk refused an operation; the writer that hit it failed
	// and will reopen from what is on disk.
	ErrIO = errors.New("i/o error")
	// ErrUnsafePath: something on disk where a session's file or folder
	// belongs is a symbolic link or the wrong kind of file; sessiond never
	// follows or overwrites it, and a human must move it away.
	ErrUnsafePath = errors.New("unsafe path on disk")
	// ErrConflict: a compare-and-swap lost (the summary an append was
	// folded from is not the session's any more); nothing was changed, and
	// the caller redoes its work on the current state.
	ErrConflict = errors.New("conflict")
	// ErrFailedPrecondition: the request is well formed but the system is
	// not in a state where it may be carried out (the agent's config dir is
	// sessiond's root, for instance); a human must change the setup.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrLeased: another machine holds the session's lease (the PostgreSQL
	// mirror's one writer per session), or took it over from this one; the
	// message names the holder and when its lease expires.
	ErrLeased = errors.New("leased by another machine")
)

// Kinds are every error kind above, for code that must recognise them
// (sessionctl drops the kind a message ends with).
var Kinds = []error{ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrAmbiguous, ErrUnavailable, ErrNoSpace,
	ErrTooLarge, ErrCorrupt, ErrIO, ErrUnsafePath, ErrConflict, ErrFailedPrecondition, ErrLeased}

// Is reports whether err is of the given kind.
func Is(err, kind error) bool { return errors.Is(err, kind) }

// FromIO classifies an error returned by the filesystem: a full disk becomes
// ErrNoSpace, anything else ErrIO. The original error stays in the chain.
func FromIO(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &kinded{kind: ErrNoSpace, err: err}
	}
	if kindOf(err) != nil {
		return err
	}
	return &kinded{kind: ErrIO, err: err}
}

// SpaceError is a write that found its disk full, with what a user needs to
// act: the folder whose disk is full, how many bytes the write needed
// there, and how many were free when it failed (-1 when the disk could not
// say). Its kind is ErrNoSpace.
type SpaceError struct {
	Dir  string
	Need int64
	Free int64
	Err  error // the filesystem's error
}

func (e *SpaceError) Error() string {
	free := "free space unknown"
	if e.Free >= 0 {
		free = fmt.Sprintf("%d free", e.Free)
	}
	return fmt.Sprintf("%v (needs %d bytes in %s, %s)", e.Err, e.Need, e.Dir, free)
}

func (e *SpaceError) Unwrap() []error { return []error{ErrNoSpace, e.Err} }

// kinded attaches a kind to an error without changing its message.
type kinded struct {
	kind error
	err  error
}

func (k *kinded) Error() string   { return k.err.Error() }
func (k *kinded) Unwrap() []error { return []error{k.kind, k.err} }

var kinds = []error{ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrAmbiguous,
	ErrUnavailable, ErrNoSpace, ErrTooLarge, ErrCorrupt, ErrIO, ErrUnsafePath}

func kindOf(err error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
