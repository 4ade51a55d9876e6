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
)

// toStatus is the one place where sessiond's errors become gRPC statuses:
// the code is the one errdefs gives the error's kind, and the messages of
// the shortages a user can act on say what to do.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	st := status.New(codeOf(err), err.Error()+advice(err))
	// Every answer of sessiond's own says so: a client tells it from the
	// statuses gRPC makes on the way (its UNAVAILABLE with no daemon, a
	// deadline), whose text it replaces with its own. Clients in any
	// language match the reason, not the text.
	reason := sessiondv1.ReasonSessiond
	if errors.Is(err, errdefs.ErrConflict) {
		// The one conflict today: a summary folded from an old version.
		reason = sessiondv1.ReasonSummaryConflict
	}
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: sessiondv1.ErrorDomain}); derr == nil {
		return d.Err()
	}
	return st.Err()
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	if k, ok := errdefs.Of(err); ok {
		return k.Code
	}
	return codes.Internal
}

// advice is what the message of err adds for the user: what to do about
// a shortage or a disk that refuses sessiond ("" when the message says
// it already, or nothing can be done).
func advice(err error) string {
	k, _ := errdefs.Of(err)
	switch {
	case k.Err == errdefs.ErrNoDescriptors:
		return "; sessiond has run out of file descriptors (too many sessions or connections open at once): retry once the load drops, or raise its limit (ulimit -n, or LimitNOFILE= in its systemd unit)"
	case k.Err == errdefs.ErrNoSpace:
		// The message of a SpaceError already says how much was needed
		// and free there; the user is told which disk to free.
		where := "sessiond's files"
		var se *errdefs.SpaceError
		if errors.As(err, &se) {
			where = se.Dir
		}
		return "; the disk holding " + where + " is full: free some space on it, then retry"
	case k.Err == errdefs.ErrUnsafePath && errors.Is(err, syscall.ELOOP):
		return "; a symbolic link sits where sessiond keeps one of its files, and sessiond never follows links: replace it with the real file, or remove it"
	case k.Err == errdefs.ErrFailedPrecondition && errors.Is(err, fs.ErrPermission):
		return "; sessiond is not allowed to change that path (its owner or mode, an immutable flag, or a read-only mount): give the user sessiond runs as write access to it, then retry"
	}
	return ""
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
