package errdefs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestFromIO: the filesystem's errors become the kinds they are; an error
// that already carries a kind (a conflict, a refused precondition, a
// lease held elsewhere...) is not made an I/O error too; the original
// error and message stay.
func TestFromIO(t *testing.T) {
	path := func(errno error) error { return &os.PathError{Op: "open", Path: "/r/p/x.jsonl", Err: errno} }
	cases := []struct {
		err  error
		want error
	}{
		{path(syscall.EIO), ErrIO},
		{path(syscall.ENOSPC), ErrNoSpace},
		{path(syscall.EDQUOT), ErrNoSpace},
		{path(syscall.EMFILE), ErrNoDescriptors},
		{path(syscall.ENFILE), ErrNoDescriptors},
		{path(syscall.ELOOP), ErrUnsafePath},
		{path(syscall.EACCES), ErrFailedPrecondition},
		{path(syscall.EPERM), ErrFailedPrecondition},
		{fmt.Errorf("fold again: %w", ErrConflict), ErrConflict},
		{fmt.Errorf("setup: %w", ErrFailedPrecondition), ErrFailedPrecondition},
		{fmt.Errorf("held by A: %w", ErrLeased), ErrLeased},
		{fmt.Errorf("gone: %w", ErrNotFound), ErrNotFound},
	}
	for _, c := range cases {
		got := FromIO(c.err)
		if k, _ := Of(got); k.Err != c.want || !errors.Is(got, c.want) {
			t.Errorf("FromIO(%v) is of kind %v, want %v", c.err, k.Err, c.want)
		}
		if c.want != ErrIO && errors.Is(got, ErrIO) {
			t.Errorf("FromIO(%v) is also an I/O error", c.err)
		}
		if !errors.Is(got, c.err) || got.Error() != c.err.Error() {
			t.Errorf("FromIO(%v) = %q, lost the original error", c.err, got)
		}
	}
	if FromIO(nil) != nil {
		t.Error("FromIO(nil) is not nil")
	}
}

// TestKindsAreDistinct: each sentinel is listed once, so that an error's
// kind (and its code at the edge) is never decided by two entries.
func TestKindsAreDistinct(t *testing.T) {
	seen := map[error]bool{}
	for _, k := range Kinds {
		if seen[k.Err] {
			t.Errorf("%v is listed twice", k.Err)
		}
		seen[k.Err] = true
		if got, ok := Of(fmt.Errorf("x: %w", k.Err)); !ok || got.Err != k.Err {
			t.Errorf("Of(a wrapped %v) = %v, %v", k.Err, got.Err, ok)
		}
		if !Tagged(fmt.Errorf("x: %w", k.Err)) {
			t.Errorf("a wrapped %v is not tagged", k.Err)
		}
	}
	if _, ok := Of(errors.New("plain")); ok || Tagged(errors.New("plain")) || Tagged(syscall.ENOSPC) {
		t.Error("a plain error has a kind")
	}
}

// TestUnreadable: a failed read of state is retryable and keeps its
// cause's kind and message, so that a descriptor shortage still says so.
func TestUnreadable(t *testing.T) {
	cause := &os.PathError{Op: "open", Path: "/s/x.json", Err: syscall.EMFILE}
	err := Unreadable("the intent /s/x.json", cause)
	for _, want := range []error{ErrUnavailable, ErrNoDescriptors, cause} {
		if !errors.Is(err, want) {
			t.Errorf("Unreadable(...) = %v, not %v", err, want)
		}
	}
	if want := "cannot read the intent /s/x.json, and nothing was done without it: " + cause.Error() + "; retry: " + ErrUnavailable.Error(); err.Error() != want {
		t.Errorf("Unreadable(...) says %q, want %q", err, want)
	}
	if !errors.Is(Unreadable("x", errors.New("disk")), ErrIO) {
		t.Error("an unclassified cause is not an I/O error")
	}
}
