package server

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// TestToStatusDiskFull: a full disk is RESOURCE_EXHAUSTED with a message
// that says so, whether the error was classified (errdefs.FromIO) or came
// up raw from a path that did not classify it (a fork's temp copy wraps
// the write error with %w only).
func TestToStatusDiskFull(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "/r/projects/p/.x.compact-1.tmp", Err: syscall.ENOSPC}
	for _, err := range []error{
		errdefs.FromIO(enospc),
		fmt.Errorf("journal append to p/x: %w", errdefs.FromIO(enospc)),
		fmt.Errorf("fork p/x: %w", enospc),
		fmt.Errorf("write: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.EDQUOT}),
	} {
		st, _ := status.FromError(toStatus(err))
		if st.Code() != codes.ResourceExhausted {
			t.Errorf("toStatus(%v) = %v, want ResourceExhausted", err, st.Code())
		}
		if !strings.Contains(st.Message(), err.Error()) || !strings.Contains(st.Message(), "disk holding sessiond's files is full") {
			t.Errorf("toStatus(%v) message %q does not keep the cause and say the disk is full", err, st.Message())
		}
	}
}
