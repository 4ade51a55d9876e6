package fsys

import (
	"errors"
	"fmt"
)

// Leaser is a File that can take a write lease (Linux's file leases): a
// lease is granted only while no other open file, in this process or
// another, refers to the file, and while it is held anyone's open of the
// file waits until it is given up. So a holder that finds its lease still
// whole knows nobody opened the file since it took it: nobody can write
// to it but through files opened after that.
type Leaser interface {
	// Lease takes a write lease on the file. It fails with an error
	// wrapping ErrLeaseConflict while another open file refers to the
	// file, and with one wrapping errors.ErrUnsupported where the
	// filesystem or the process cannot take leases.
	Lease() error
	// Unlease gives the lease up (Close does too) and reports whether it
	// was whole: nobody opened the file since Lease. A broken lease is
	// not an error.
	Unlease() (whole bool, err error)
}

// ErrLeaseConflict says a lease was refused because another open file
// refers to the file.
var ErrLeaseConflict = errors.New("another open file refers to it")

// Lease takes a write lease on f (see Leaser), or returns an error
// wrapping errors.ErrUnsupported when f cannot take one.
func Lease(f File) error {
	l, ok := f.(Leaser)
	if !ok {
		return fmt.Errorf("lease %s: %w", f.Name(), errors.ErrUnsupported)
	}
	return l.Lease()
}

// Unlease gives up the lease Lease took on f and reports whether it was
// whole.
func Unlease(f File) (whole bool, err error) {
	l, ok := f.(Leaser)
	if !ok {
		return false, fmt.Errorf("lease %s: %w", f.Name(), errors.ErrUnsupported)
	}
	return l.Unlease()
}
