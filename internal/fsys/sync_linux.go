package fsys

import (
	"io"
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

// copyRange copies with copy_file_range. handled is false when the kernel
// or the filesystem cannot (nothing was copied then), so the caller reads
// and writes instead.
func copyRange(dst, src *os.File, off, n int64) (done int64, err error, handled bool) {
	for done < n {
		roff := off + done
		c, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), nil, int(min(n-done, 1<<30)), 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil && done == 0 && (err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL):
			return 0, nil, false
		case err != nil:
			return done, &os.PathError{Op: "copy_file_range", Path: dst.Name(), Err: err}, true
		case c == 0:
			return done, &os.PathError{Op: "copy_file_range", Path: src.Name(), Err: io.ErrUnexpectedEOF}, true
		}
		done += int64(c)
	}
	return done, nil, true
}

// Allocate reserves blocks up to size with fallocate (mode 0: the size
// grows to size, the new bytes read as zeros).
func (f *osFile) Allocate(size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EOPNOTSUPP || err == unix.ENOSYS:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ErrNoAllocate}
		case err != nil:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
		return nil
	}
}
