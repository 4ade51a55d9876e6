package fsys

import (
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrLocked is wrapped by FS.Lock's error when another holder has the lock.
var ErrLocked = errors.New("locked by another process")

// lockFolder takes an exclusive flock on the folder dir without waiting.
// flock, not fcntl: its lock belongs to the open file description, so
// closing some other descriptor of the same folder (SyncDir opens and
// closes it all the time) never drops it, and the kernel drops it when the
// process dies, however it dies. Two descriptors opened by one process
// exclude each other too, which lets tests play two processes.
func lockFolder(dir string) (io.Closer, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &os.PathError{Op: "flock", Path: dir, Err: ErrLocked}
		}
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return f, nil
}

// Real reports whether f is the machine's own filesystem (OS, or OS
// wrapped by Remembering), whose paths other processes see too.
func Real(f FS) bool {
	if m, ok := f.(*memoFS); ok {
		f = m.FS
	}
	_, ok := f.(osFS)
	return ok
}
