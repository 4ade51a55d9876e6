package client

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrOutcomeUnknown is matched (errors.Is) by the error of an append that
// may or may not have been stored: its request may have reached the daemon
// before the connection broke, the daemon stopped or was killed, or the
// call's context ended. Any other error of Append or AppendBatch means
// nothing of the batch was stored.
//
// Send such a batch again with the same batch id (AppendBatch): sessiond
// answers it as a duplicate batch if it had stored it, and stores it once
// if not. Without a batch id, only entries that carry a uuid are safe from
// being stored twice.
var ErrOutcomeUnknown = errors.New("whether sessiond stored the batch is unknown")

// unknownOutcome marks an append error as ErrOutcomeUnknown, keeping the
// error's own status for status.Code and its chain for errors.As.
type unknownOutcome struct{ err error }

func (e *unknownOutcome) Error() string {
	return e.err.Error() + " (" + ErrOutcomeUnknown.Error() + ")"
}
func (e *unknownOutcome) Unwrap() []error            { return []error{e.err, ErrOutcomeUnknown} }
func (e *unknownOutcome) GRPCStatus() *status.Status { return status.Convert(e.err) }

// withOutcome returns err, marked as ErrOutcomeUnknown when unknown.
func withOutcome(err error, unknown bool) error {
	if err == nil || !unknown || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &unknownOutcome{err}
}

// refusal reports whether err, sessiond's answer to an append it
// received, says it stored nothing of the batch: the request was invalid,
// too large, for a session it cannot write now, or not looked at.
// Internal, DataLoss and Unknown are not refusals: the daemon may have
// failed after the batch reached its log (an fsync that failed, say).
func refusal(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.ResourceExhausted, codes.FailedPrecondition, codes.Aborted, codes.OutOfRange,
		codes.Unimplemented, codes.Unauthenticated:
		return true
	case codes.Unavailable:
		return notProcessed(err)
	}
	return false
}

// contextError is the error of a call that ended because its context did:
// errors.Is finds context.Canceled or context.DeadlineExceeded, and
// status.Code the matching gRPC code. last, when set, is what the call
// met before (the attempt a retry was waiting to repeat, for instance).
type contextError struct {
	ctx  error
	last error
}

func (e *contextError) Error() string {
	if e.last != nil {
		return e.ctx.Error() + " (after: " + e.last.Error() + ")"
	}
	return e.ctx.Error()
}
func (e *contextError) Unwrap() []error {
	if e.last == nil {
		return []error{e.ctx}
	}
	return []error{e.ctx, e.last}
}
func (e *contextError) GRPCStatus() *status.Status { return status.FromContextError(e.ctx) }

// ctxErr turns err, the error of a call made with ctx, into a
// contextError when ctx has ended and err is gRPC's report of that (not
// an answer that arrived as the context ended).
func ctxErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	var ce *contextError
	if errors.As(err, &ce) {
		return err
	}
	if c := status.Code(err); c != codes.Canceled && c != codes.DeadlineExceeded {
		return err
	}
	return &contextError{ctx: ctx.Err()}
}
