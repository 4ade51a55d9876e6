package fsys

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// oNoFollow keeps OpenFile from following a symlink planted at a session's
// path.
const oNoFollow = syscall.O_NOFOLLOW

// datasync uses fdatasync: the journal only needs its data and size durable,
// not its timestamps.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
