// Package ballast keeps an emergency reserve of disk space: a file of a
// set size in sessiond's state folder whose blocks are reserved
// (fallocate) and hold nothing. A compaction needs room for a transcript's
// new copy, the old file plus its logged entries, before the rename lets
// the old one go; on a full disk it cannot run, and the transcripts
// official readers see fall behind. When a write finds the disk full,
// sessiond deletes the ballast, and the compactions waiting for space get
// its room; once the disk has room for the ballast twice over again, the
// ballast is made anew. CockroachDB keeps a ballast in each store for the
// same reason.
//
// The ballast frees space only on its own filesystem: with the state folder
// and the transcripts on different disks, it helps the state folder's
// (where the journal is).
package ballast

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// Ballast is the reserve file. Its methods are safe for concurrent use.
type Ballast struct {
	fs   fsys.FS
	path string
	size int64
	// free tells the free space of a folder (fsys.FreeSpace).
	free func(dir string) (int64, error)

	mu       sync.Mutex
	present  bool // the file is in place, size bytes long
	released bool // Release deleted it and it is not back yet
}

// New returns the ballast at path, of size bytes (0: none). Nothing is
// touched until Ensure.
func New(fsy fsys.FS, path string, size int64, free func(dir string) (int64, error)) *Ballast {
	return &Ballast{fs: fsy, path: path, size: max(size, 0), free: free}
}

// Path is where the ballast lives.
func (b *Ballast) Path() string { return b.path }

// Size is the ballast's configured size; 0 means none is kept.
func (b *Ballast) Size() int64 { return b.size }

// Threshold is the free space Ensure waits for before it makes the
// ballast: twice its size, so that making it leaves at least its size
// free and never fills the disk itself.
func (b *Ballast) Threshold() int64 { return 2 * b.size }

// State reports whether the ballast is in place and whether it was
// released and is not back yet.
func (b *Ballast) State() (present, released bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.present, b.released
}

// Ensure puts the ballast in place: it keeps a file already there at the
// right size, replaces one of another size, and otherwise makes it when
// the disk has Threshold bytes free (or cannot say). It reports whether
// the ballast is in place; false with a nil error means the disk has not
// room enough yet. With size 0 it removes a ballast an earlier
// configuration left.
func (b *Ballast) Ensure() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.present {
		return true, nil
	}
	fi, err := b.fs.Lstat(b.path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return false, fmt.Errorf("ballast %s is not a regular file (%s); move it away: %w", b.path, fi.Mode().Type(), errdefs.ErrUnsafePath)
	case err == nil && b.size > 0 && fi.Size() == b.size:
		b.present, b.released = true, false
		return true, nil
	case err == nil:
		// Another size (the setting changed, or making it was cut
		// short): its space counts as free from here on.
		if err := b.fs.Remove(b.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove the ballast %s: %w", b.path, errdefs.FromIO(err))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("ballast %s: %w", b.path, errdefs.FromIO(err))
	}
	if b.size == 0 {
		return false, nil
	}
	dir := filepath.Dir(b.path)
	if free, err := b.free(dir); err == nil && free < b.Threshold() {
		return false, nil
	}
	if err := b.create(); err != nil {
		return false, fmt.Errorf("make the ballast %s (%d bytes): %w", b.path, b.size, errdefs.FromIO(err))
	}
	b.present, b.released = true, false
	return true, nil
}

// create writes the file: fallocate where the filesystem can, zeros
// otherwise (either way its blocks are taken from the free space now). It
// needs no sync: a ballast lost or cut short in a crash is made again at
// the next start. A failed one is removed.
func (b *Ballast) create() (err error) {
	f, err := b.fs.OpenFile(b.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.fs.Remove(b.path)
		}
	}()
	err = fsys.Allocate(f, b.size)
	if !errors.Is(err, fsys.ErrNoAllocate) {
		return err
	}
	zeros := make([]byte, min(b.size, 1<<20))
	for left := b.size; left > 0; {
		n, err := f.Write(zeros[:min(left, int64(len(zeros)))])
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		left -= int64(n)
	}
	return nil
}

// Release deletes the ballast, so that its space is free for what waits
// for it, and reports whether there was one to delete.
func (b *Ballast) Release() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.present {
		return false
	}
	err := b.fs.Remove(b.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	b.present, b.released = false, true
	return err == nil
}
