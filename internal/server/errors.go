package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// ReasonNotProcessed is the ErrorInfo reason on an UNAVAILABLE answer given
// before a request was looked at (the daemon is draining). A client may
// retry such a request even when its entries carry no uuid.
const ReasonNotProcessed = "NOT_PROCESSED"

// ErrorDomain is the ErrorInfo domain of sessiond's error details.
const ErrorDomain = "sessiond"

// toStatus is the one place where sessiond's error kinds become gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
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
	case errors.Is(err, errdefs.ErrAmbiguous):
		return codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrNoSpace):
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
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotProcessed, Domain: ErrorDomain}); err == nil {
		return d.Err()
	}
	return st.Err()
}
