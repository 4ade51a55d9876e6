package fstest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/sessiond/sessiond/internal/fsys"
)

// crashFile is an open handle. It holds its inode, not its name.
type crashFile struct {
	fs     *CrashFS
	ino    *inode
	name   string
	flag   int
	off    int64
	closed bool
}

// gate checks the handle may run op and counts it.
func (f *crashFile) gate(kind Op, what string, write bool) error {
	if f.closed {
		return pathErr(what, f.name, os.ErrClosed)
	}
	if err := f.fs.op(kind, f.name); err != nil {
		return pathErr(what, f.name, err)
	}
	acc := f.flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	if write && acc == os.O_RDONLY || !write && acc == os.O_WRONLY {
		return pathErr(what, f.name, syscall.EBADF)
	}
	if f.ino.dir && kind != OpSync && kind != OpStat {
		return pathErr(what, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *crashFile) Read(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.gate(OpRead, "read", false); err != nil {
		return 0, err
	}
	if f.off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.ino.data[f.off:])
	f.off += int64(n)
	return n, nil
}

func (f *crashFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.gate(OpRead, "read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.ino.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *crashFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.gate(OpWrite, "write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.off = int64(len(f.ino.data))
	}
	f.ino.write(b, f.off)
	f.off += int64(len(b))
	return len(b), nil
}

func (f *crashFile) Seek(offset int64, whence int) (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, pathErr("seek", f.name, os.ErrClosed)
	}
	if f.fs.crashed {
		return 0, pathErr("seek", f.name, ErrCrashed)
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += int64(len(f.ino.data))
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.off = offset
	return offset, nil
}

// Close releases the handle. It touches no disk, so it works even after a
// crash.
func (f *crashFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	f.ino.handles--
	if f.ino.lease == f {
		f.ino.lease = nil
	}
	return nil
}

// Lease takes a write lease (fsys.Leaser): granted while no other handle
// is open on the file. It touches no disk, so it works even after a crash.
func (f *crashFile) Lease() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return pathErr("lease", f.name, os.ErrClosed)
	case f.ino.dir:
		return pathErr("lease", f.name, errors.ErrUnsupported)
	case f.ino.handles > 1 || f.ino.lease != nil && f.ino.lease != f:
		return pathErr("lease", f.name, fsys.ErrLeaseConflict)
	}
	f.ino.lease, f.ino.leaseBroken = f, false
	return nil
}

// Unlease gives up the lease and reports whether no handle was opened on
// the file since Lease.
func (f *crashFile) Unlease() (bool, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.ino.lease != f {
		return false, nil
	}
	f.ino.lease = nil
	return !f.ino.leaseBroken, nil
}

// Sync makes the file's content durable (not its name: that takes SyncDir
// of its folder).
func (f *crashFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync", f.name, os.ErrClosed)
	}
	if err := f.fs.op(OpSync, f.name); err != nil {
		return pathErr("sync", f.name, err)
	}
	if !f.ino.dir {
		f.ino.sync()
	}
	return nil
}

// LoseUnsynced models a failed writeback on Linux (the "fsyncgate"
// behaviour): the pending writes stay visible to reads but are marked
// clean, so no later Sync ever makes them durable. FaultFS calls it when
// an injected Sync failure asks for it.
func (f *crashFile) LoseUnsynced() {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.ino.pend = nil
}

func (f *crashFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.gate(OpTruncate, "truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.ino.truncate(size)
	return nil
}

func (f *crashFile) Stat() (fs.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.gate(OpStat, "stat", false); err != nil && !errors.Is(err, syscall.EBADF) {
		return nil, err
	}
	return f.ino.info(path.Base(f.name)), nil
}

func (f *crashFile) Name() string { return f.name }

// Allocate models fallocate as what a reader and a crash see of it: a
// write of zeros from the end of the file to size (an OpWrite), durable at
// the next Sync like any write. Unless AllowAllocate was set it fails with
// fsys.ErrNoAllocate, touching nothing.
func (f *crashFile) Allocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if !f.fs.allocate {
		return pathErr("fallocate", f.name, fsys.ErrNoAllocate)
	}
	if err := f.gate(OpWrite, "fallocate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("fallocate", f.name, syscall.EINVAL)
	}
	if n := int64(len(f.ino.data)); size > n {
		f.ino.write(make([]byte, size-n), n)
	}
	return nil
}
