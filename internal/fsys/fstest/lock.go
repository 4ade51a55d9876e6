package fstest

import (
	"io"
	"os"
	"syscall"

	"github.com/sessiond/sessiond/internal/fsys"
)

// Lock takes the folder's lock, as flock does: one holder at a time,
// released by Close or by a crash (the process that held it is gone). A
// clone starts with no lock held, as a new boot does. It is a read-class
// operation (OpLock): it changes nothing on disk.
func (c *CrashFS) Lock(name string) (io.Closer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpLock, name); err != nil {
		return nil, pathErr("flock", name, err)
	}
	n, err := c.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if !n.dir {
		return nil, pathErr("open", name, syscall.ENOTDIR)
	}
	if c.locks == nil {
		c.locks = map[*inode]*crashLock{}
	}
	if c.locks[n] != nil {
		return nil, pathErr("flock", name, fsys.ErrLocked)
	}
	l := &crashLock{fs: c, ino: n}
	c.locks[n] = l
	return l, nil
}

// LockHeld reports whether the folder's lock is held.
func (c *CrashFS) LockHeld(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.lookup(name)
	return err == nil && c.locks[n] != nil
}

type crashLock struct {
	fs     *CrashFS
	ino    *inode
	closed bool
}

func (l *crashLock) Close() error {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	if l.closed {
		return pathErr("close", "lock", os.ErrClosed)
	}
	l.closed = true
	if l.fs.locks[l.ino] == l {
		delete(l.fs.locks, l.ino)
	}
	return nil
}

// Lock is counted as OpLock, a read-class operation, and passed on.
func (f *FaultFS) Lock(name string) (io.Closer, error) {
	if a := f.check(OpLock, name); a != nil {
		return nil, pathErr("flock", name, a.err())
	}
	return f.inner.Lock(name)
}
