package server

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// toStatus is the one place where sessiond's error kinds become gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := err.Error()
	switch {
	case outOfDescriptors(err):
		msg += "; sessiond has run out of file descriptors (too many sessions or connections open at once): retry once the load drops, or raise its limit (ulimit -n, or LimitNOFILE= in its systemd unit)"
	case diskFull(err):
		// The message of a SpaceError already says how much was needed
		// and free there; the user is told which disk to free.
		where := "sessiond's files"
		var se *errdefs.SpaceError
		if errors.As(err, &se) {
			where = se.Dir
		}
		msg += "; the disk holding " + where + " is full: free some space on it, then retry"
	case errors.Is(err, syscall.ELOOP):
		msg += "; a symbolic link sits where sessiond keeps one of its files, and sessiond never follows links: replace it with the real file, or remove it"
	case errors.Is(err, fs.ErrPermission):
		msg += "; sessiond is not allowed to change that path (its owner or mode, an immutable flag, or a read-only mount): give the user sessiond runs as write access to it, then retry"
	}
	st := status.New(codeOf(err), msg)
	if errors.Is(err, errdefs.ErrConflict) {
		// The one conflict today: a summary folded from an old version.
		// Clients in any language match the reason, not the text.
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: sessiondv1.ReasonSummaryConflict, Domain: sessiondv1.ErrorDomain}); derr == nil {
			return d.Err()
		}
	}
	return st.Err()
}

// outOfDescriptors reports whether err comes from the process (EMFILE) or
// the system (ENFILE) running out of file descriptors: a passing shortage,
// not a broken disk.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// diskFull reports whether err says the disk (or the user's quota) is
// full: classified as errdefs.ErrNoSpace, or a raw ENOSPC/EDQUOT that a
// code path passed up without classifying it (a fork's temp copy, for
// instance), which must not become INTERNAL.
func diskFull(err error) bool {
	return errors.Is(err, errdefs.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, errdefs.ErrTooLarge):
		return codes.InvalidArgument
	case errors.Is(err, errdefs.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, errdefs.ErrConflict):
		return codes.Aborted
	case errors.Is(err, errdefs.ErrAmbiguous), errors.Is(err, layout.ErrUnsafePath), errors.Is(err, errdefs.ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrLeased):
		// Another machine writes the session: not this request's fault,
		// and no retry helps before the holder's lease expires.
		return codes.FailedPrecondition
	case errors.Is(err, syscall.ELOOP), errors.Is(err, fs.ErrPermission):
		// An open with O_NOFOLLOW met a link planted on disk, or the disk
		// refused sessiond access (EACCES, EPERM): the request is fine,
		// the disk needs a human. (Refusing a caller of another uid is
		// PermissionDenied, decided where the caller is checked.)
		return codes.FailedPrecondition
	case diskFull(err), outOfDescriptors(err):
		return codes.ResourceExhausted
	case errors.Is(err, errdefs.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, errdefs.ErrCorrupt):
		return codes.DataLoss
	default:
		return codes.Internal
	}
}

// notProcessed is the answer to a call that arrives while draining.
func notProcessed() error {
	st := status.New(codes.Unavailable, "sessiond is shutting down and takes no new requests; retry once it is back")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: sessiondv1.ReasonNotProcessed, Domain: sessiondv1.ErrorDomain}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// appendError carries err, as toStatus would answer it, inside an
// AppendStream response: a refused request does not end the stream.
func appendError(err error) *sessiondv1.AppendError {
	st := status.Convert(toStatus(err))
	out := &sessiondv1.AppendError{Code: int32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			out.Reason = info.GetReason()
		}
	}
	return out
}
