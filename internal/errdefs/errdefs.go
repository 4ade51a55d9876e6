// Package errdefs holds the few kinds of error sessiond's packages return,
// and the gRPC code each kind is answered with. Code deep inside wraps one
// of these sentinels with %w and adds context; the server's edge looks the
// kind up here (Of) in one place, so handlers never pick codes themselves.
package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"google.golang.org/grpc/codes"
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
	// ErrNoDescriptors: the process or the system ran out of file
	// descriptors; a passing shortage, not a broken disk.
	ErrNoDescriptors = errors.New("out of file descriptors")
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
	// sessiond's root, or the disk refuses sessiond access, for instance);
	// a human must change the setup.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrLeased: another machine holds the session's lease (the PostgreSQL
	// mirror's one writer per session), or took it over from this one; the
	// message names the holder and when its lease expires.
	ErrLeased = errors.New("leased by another machine")
)

// Kind is one kind of error: its sentinel, the gRPC code the edge answers
// it with, and the errors of the system that are of that kind even when
// nothing classified them (a raw ENOSPC passed up by a fork's temp copy
// must not become INTERNAL).
type Kind struct {
	Err    error
	Code   codes.Code
	errnos []error
}

// Kinds are every kind, in the order they are recognised: an error that
// carries several kinds (an ErrUnavailable holding an EMFILE, say) is of
// the first. ErrIO, the kind of whatever else the disk refused, is last.
var Kinds = []Kind{
	{Err: ErrInvalidArgument, Code: codes.InvalidArgument},
	{Err: ErrTooLarge, Code: codes.InvalidArgument},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: ErrAlreadyExists, Code: codes.AlreadyExists},
	{Err: ErrConflict, Code: codes.Aborted},
	{Err: ErrAmbiguous, Code: codes.FailedPrecondition},
	// An open with O_NOFOLLOW that met a link planted on disk.
	{Err: ErrUnsafePath, Code: codes.FailedPrecondition, errnos: []error{syscall.ELOOP}},
	// The disk refused sessiond access (EACCES, EPERM): the request is
	// fine, the disk needs a human. (Refusing a caller of another uid is
	// PermissionDenied, decided where the caller is checked.)
	{Err: ErrFailedPrecondition, Code: codes.FailedPrecondition, errnos: []error{fs.ErrPermission}},
	// Another machine writes the session: not this request's fault, and
	// no retry helps before the holder's lease expires.
	{Err: ErrLeased, Code: codes.FailedPrecondition},
	{Err: ErrNoSpace, Code: codes.ResourceExhausted, errnos: []error{syscall.ENOSPC, syscall.EDQUOT}},
	{Err: ErrNoDescriptors, Code: codes.ResourceExhausted, errnos: []error{syscall.EMFILE, syscall.ENFILE}},
	{Err: ErrUnavailable, Code: codes.Unavailable},
	{Err: ErrCorrupt, Code: codes.DataLoss},
	{Err: ErrIO, Code: codes.Internal},
}

// Of is the kind of err: the first of Kinds whose sentinel or system
// errors err's chain holds. ok is false when it holds none.
func Of(err error) (k Kind, ok bool) {
	if err == nil {
		return Kind{}, false
	}
	for _, k := range Kinds {
		if errors.Is(err, k.Err) {
			return k, true
		}
		for _, e := range k.errnos {
			if errors.Is(err, e) {
				return k, true
			}
		}
	}
	return Kind{}, false
}

// Tagged reports whether err carries one of the kinds' sentinels (not
// merely a system error of that kind): sessiond's own verdict.
func Tagged(err error) bool {
	for _, k := range Kinds {
		if errors.Is(err, k.Err) {
			return true
		}
	}
	return false
}

// FromIO classifies an error returned by the filesystem: a full disk
// becomes ErrNoSpace, a descriptor shortage ErrNoDescriptors, a link met
// with O_NOFOLLOW ErrUnsafePath, a refused access ErrFailedPrecondition,
// and any other failure ErrIO. An error that already carries its kind
// comes back as it is. The original error stays in the chain.
func FromIO(err error) error {
	if err == nil {
		return nil
	}
	k, ok := Of(err)
	switch {
	case !ok:
		return &kinded{kind: ErrIO, err: err}
	case errors.Is(err, k.Err):
		return err
	}
	return &kinded{kind: k.Err, err: err}
}

// Unreadable is the error of a read of sessiond's own state (a sidecar, a
// ledger, an intent, the trash) that failed for another reason than the
// file's absence, so that the operation needing it did nothing: ErrIO and
// ErrUnavailable (the edge answers UNAVAILABLE, which clients retry, since
// a descriptor shortage or a passing I/O error is the usual cause), with
// the cause kept in the chain, so that EMFILE and ENFILE are answered
// RESOURCE_EXHAUSTED instead, saying to raise the limit. what names the
// state.
func Unreadable(what string, err error) error {
	return fmt.Errorf("cannot read %s, and nothing was done without it: %w; retry: %w", what, FromIO(err), ErrUnavailable)
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
