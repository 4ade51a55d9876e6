package server

import (
	"errors"
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

// TestToStatusDiskFullNamesFolder: a write that says where it found the
// disk full (errdefs.SpaceError) is refused with a message naming that
// folder and how much it needed there.
func TestToStatusDiskFullNamesFolder(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "/state/wal/0000000000000003.wal", Err: syscall.ENOSPC}
	err := fmt.Errorf("journal append to p/x: %w", &errdefs.SpaceError{Dir: "/state/wal", Need: 40960, Free: 4096, Err: errdefs.FromIO(enospc)})
	st, _ := status.FromError(toStatus(err))
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("toStatus(%v) = %v, want ResourceExhausted", err, st.Code())
	}
	for _, want := range []string{"no space left on device", "needs 40960 bytes in /state/wal, 4096 free", "the disk holding /state/wal is full"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not say %q", st.Message(), want)
		}
	}
	if !errors.Is(err, errdefs.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a SpaceError is not of kind ErrNoSpace with its cause: %v", err)
	}
}
