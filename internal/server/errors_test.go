package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestToStatus: the error kinds become the documented codes, and the
// messages of the shortages a user can act on say what to do.
func TestToStatus(t *testing.T) {
	emfile := &os.PathError{Op: "open", Path: "/s/journal/p/x.wal", Err: syscall.EMFILE}
	eloop := &os.PathError{Op: "open", Path: "/r/projects/p/x.jsonl", Err: syscall.ELOOP}
	cases := []struct {
		err  error
		code codes.Code
		frag string
	}{
		{fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument), codes.InvalidArgument, "bad"},
		{fmt.Errorf("big: %w", errdefs.ErrTooLarge), codes.InvalidArgument, "big"},
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), codes.NotFound, "x"},
		{fmt.Errorf("x: %w", errdefs.ErrAlreadyExists), codes.AlreadyExists, "x"},
		{fmt.Errorf("x: %w", errdefs.ErrAmbiguous), codes.FailedPrecondition, "x"},
		{fmt.Errorf("link: %w", layout.ErrUnsafePath), codes.FailedPrecondition, "link"},
		{fmt.Errorf("x: %w", errdefs.ErrUnavailable), codes.Unavailable, "x"},
		{errdefs.FromIO(syscall.ENOSPC), codes.ResourceExhausted, "no space"},
		{fmt.Errorf("open journal: %w", errdefs.FromIO(emfile)), codes.ResourceExhausted, "run out of file descriptors"},
		{fmt.Errorf("open: %w", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENFILE}), codes.ResourceExhausted, "raise its limit"},
		{fmt.Errorf("open: %w", errdefs.FromIO(eloop)), codes.FailedPrecondition, "never follows links"},
		{fmt.Errorf("compact: %w", errdefs.FromIO(&os.PathError{Op: "open", Path: "/r/p/.x.tmp", Err: syscall.EPERM})), codes.FailedPrecondition, "give the user sessiond runs as write access"},
		{fmt.Errorf("create: %w", errdefs.FromIO(&os.PathError{Op: "open", Path: "/r/p", Err: syscall.EACCES})), codes.FailedPrecondition, "not allowed to change that path"},
		{fmt.Errorf("x: %w", errdefs.ErrCorrupt), codes.DataLoss, "x"},
		{fmt.Errorf("fold again: %w", errdefs.ErrConflict), codes.Aborted, "fold again"},
		{fmt.Errorf("setup: %w", errdefs.ErrFailedPrecondition), codes.FailedPrecondition, "setup"},
		{fmt.Errorf("session p/s is leased to machine \"A\": %w", errdefs.ErrLeased), codes.FailedPrecondition, `leased to machine "A"`},
		{errdefs.FromIO(syscall.EIO), codes.Internal, "input/output error"},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled, "x"},
		{errors.New("plain"), codes.Internal, "plain"},
		{status.Error(codes.PermissionDenied, "kept"), codes.PermissionDenied, "kept"},
	}
	for _, c := range cases {
		st, _ := status.FromError(toStatus(c.err))
		if st.Code() != c.code || !strings.Contains(st.Message(), c.frag) {
			t.Errorf("toStatus(%v) = %v %q, want %v with %q", c.err, st.Code(), st.Message(), c.code, c.frag)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
}

// TestConflictCarriesReason: a lost summary compare-and-swap is ABORTED
// with sessiond's SUMMARY_CONFLICT ErrorInfo, which adapters match on (in
// the unary answer and in an AppendStream's error alike); every other
// error of sessiond's own carries the SESSIOND reason, so that a client
// shows its message instead of taking it for gRPC's own (an UNAVAILABLE
// from a busy session is not "no daemon").
func TestConflictCarriesReason(t *testing.T) {
	err := toStatus(fmt.Errorf("summary moved on: %w", errdefs.ErrConflict))
	st := status.Convert(err)
	var reason, domain string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason, domain = info.GetReason(), info.GetDomain()
		}
	}
	if st.Code() != codes.Aborted || reason != sessiondv1.ReasonSummaryConflict || domain != sessiondv1.ErrorDomain {
		t.Fatalf("conflict = %v, reason %q domain %q", st, reason, domain)
	}
	if ae := appendError(fmt.Errorf("x: %w", errdefs.ErrConflict)); ae.GetReason() != sessiondv1.ReasonSummaryConflict || ae.GetCode() != int32(codes.Aborted) {
		t.Fatalf("AppendStream error = %+v", ae)
	}
	for _, kind := range []error{errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable, errdefs.ErrIO, errors.New("a bug")} {
		d := status.Convert(toStatus(fmt.Errorf("x: %w", kind))).Details()
		if info, ok := firstInfo(d); !ok || info.GetReason() != sessiondv1.ReasonSessiond || info.GetDomain() != sessiondv1.ErrorDomain {
			t.Fatalf("%v carries details %v, want the SESSIOND reason", kind, d)
		}
	}
	if ae := appendError(fmt.Errorf("x: %w", errdefs.ErrUnavailable)); ae.GetReason() != sessiondv1.ReasonSessiond {
		t.Fatalf("AppendStream error = %+v", ae)
	}
}

func firstInfo(details []any) (*errdetails.ErrorInfo, bool) {
	for _, d := range details {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info, true
		}
	}
	return nil, false
}
