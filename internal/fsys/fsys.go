// Package fsys is the one door through which sessiond touches durable files.
// Everything that must survive a crash (journals, canonical transcripts, temp
// files, their folders) goes through FS, so tests can swap in a filesystem
// that fails chosen operations or forgets whatever was not synced.
package fsys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// File is an open file. Sync makes the file's data (and the size needed to
// read it back) durable; it is the only promise of durability a File gives.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Seeker
	io.Closer
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Name() string
}

// FS is the set of filesystem operations sessiond needs. Directory entries
// (creations, renames, removals) are durable only after SyncDir of the folder
// that holds them.
type FS interface {
	// OpenFile opens name; it never follows a symlink in the last component.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	// Link makes newpath name oldpath's file; it fails if newpath exists,
	// which makes it the way to publish a file without ever replacing one.
	Link(oldpath, newpath string) error
	Remove(name string) error
	Mkdir(name string, perm fs.FileMode) error
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir makes the folder's entries durable.
	SyncDir(name string) error
	// Lock takes an exclusive lock on the folder name without waiting,
	// held until the returned Closer is closed or the process ends
	// however it ends. It fails with an error wrapping ErrLocked while
	// another holder has it, and with one matching fs.ErrNotExist when
	// the folder is missing. It follows symlinks: the lock is the
	// folder's, whatever path reaches it.
	Lock(name string) (io.Closer, error)
}

// OS is the real filesystem.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag|oNoFollow, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f}, nil
}

func (osFS) Rename(o, n string) error                   { return os.Rename(o, n) }
func (osFS) Link(o, n string) error                     { return os.Link(o, n) }
func (osFS) Remove(name string) error                   { return os.Remove(name) }
func (osFS) Mkdir(name string, perm fs.FileMode) error  { return os.Mkdir(name, perm) }
func (osFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
func (osFS) Lstat(name string) (fs.FileInfo, error)     { return os.Lstat(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Lock(name string) (io.Closer, error)        { return lockFolder(name) }

func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", name, err)
	}
	return nil
}

type osFile struct{ *os.File }

func (f *osFile) Sync() error { return datasync(f.File) }

// MkdirAll creates dir and any missing parents with perm, and makes every
// folder on the path durable: it syncs the parent of each folder it
// creates, and also of each folder it finds, because a folder that exists
// is not necessarily durable (its creator may have been killed before
// syncing its parent, a sync of the parent may have failed, or another
// program made it without syncing), and files made durable inside a folder
// whose own entry is not are lost with it. On an FS wrapped by Remembering
// each folder found is synced once per process, not on every call. A path
// component that exists but is not a folder (a symlink included) is an
// error.
func MkdirAll(fsys FS, dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	memo, _ := fsys.(*memoFS)
	if memo != nil && memo.known(dir) {
		// Known durable; still check it was not removed behind our back.
		if fi, err := fsys.Lstat(dir); err == nil && fi.IsDir() {
			return nil
		}
		memo.forget(dir)
	}
	parent := filepath.Dir(dir)
	fi, err := fsys.Lstat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s exists and is not a folder", dir)
	case err == nil:
		if parent != dir {
			if err := MkdirAll(fsys, parent, perm); err != nil {
				return err
			}
			if err := fsys.SyncDir(parent); err != nil {
				return err
			}
		}
		memo.mark(dir)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if parent != dir {
		if err := MkdirAll(fsys, parent, perm); err != nil {
			return err
		}
	}
	if err := fsys.Mkdir(dir, perm); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		if fi, serr := fsys.Lstat(dir); serr != nil || !fi.IsDir() {
			return err
		}
		// Made meanwhile by someone else: still sync it below.
	}
	if err := fsys.SyncDir(parent); err != nil {
		return err
	}
	memo.mark(dir)
	return nil
}

// Remembering wraps f so that MkdirAll syncs the parent of a folder it
// finds only the first time in this process, then remembers the folder as
// durable (RemoveAll and Move forget what they take away). Without it every
// MkdirAll call syncs every folder of the path.
func Remembering(f FS) FS {
	if m, ok := f.(*memoFS); ok {
		return m
	}
	return &memoFS{FS: f, durable: map[string]bool{}}
}

// memoFS is an FS that remembers the folders this process made durable.
type memoFS struct {
	FS
	mu      sync.Mutex
	durable map[string]bool
}

func (m *memoFS) known(dir string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.durable[dir]
}

func (m *memoFS) mark(dir string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.durable[dir] = true
	m.mu.Unlock()
}

// forget drops dir and everything below it.
func (m *memoFS) forget(dir string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := dir + string(filepath.Separator)
	for d := range m.durable {
		if d == dir || strings.HasPrefix(d, prefix) {
			delete(m.durable, d)
		}
	}
}

// WriteFileAtomic makes path hold exactly what write produces, or leaves it
// as it was: write goes to a temp file in the same folder (named by tmpName,
// which must never look like a transcript), the temp file is synced, renamed
// over path and the folder synced. On any error the temp file is removed.
func WriteFileAtomic(fsys FS, path, tmpName string, perm fs.FileMode, write func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, tmpName)
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		ok = true
		return err
	}
	ok = true
	return fsys.SyncDir(dir)
}

// WriteFileAtomicOwned is WriteFileAtomic for a file only this process
// writes, under a lock it holds, with a fixed temp name: a temp file of
// that name can only be left by a process killed midway, and is removed
// first, so that one kill does not fail every later write.
func WriteFileAtomicOwned(fsys FS, path, tmpName string, perm fs.FileMode, write func(w io.Writer) error) error {
	if err := fsys.Remove(filepath.Join(filepath.Dir(path), tmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return WriteFileAtomic(fsys, path, tmpName, perm, write)
}

// RemoveAll removes path and everything below it (never following links),
// syncing each folder it empties and the parent of path.
func RemoveAll(fsys FS, path string) error {
	fi, err := fsys.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		ents, err := fsys.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := RemoveAll(fsys, filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	if memo, ok := fsys.(*memoFS); ok && fi.IsDir() {
		memo.forget(filepath.Clean(path))
	}
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsys.SyncDir(filepath.Dir(path))
}

// Move renames src to dst (a file or a folder tree). Across filesystems,
// where rename cannot work, it copies the tree, syncing every file and
// folder, to a staging name beside dst, renames that to dst, and only then
// removes src, so a crash leaves at least one whole copy, and dst is never
// a partial one: a copy that failed or crashed midway is at the staging
// name, which the next Move of src removes before it copies again. src is
// renamed aside (MovedAside) before it is removed, so a crash midway leaves
// no partial src beside the whole dst, only that name for the caller's
// retry to remove.
func Move(fsys FS, src, dst string) error {
	if err := MkdirAll(fsys, filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if memo, ok := fsys.(*memoFS); ok {
		memo.forget(filepath.Clean(src))
	}
	err := fsys.Rename(src, dst)
	if err == nil {
		if err := fsys.SyncDir(filepath.Dir(dst)); err != nil {
			return err
		}
		return fsys.SyncDir(filepath.Dir(src))
	}
	var le *os.LinkError
	if !errors.As(err, &le) || !errors.Is(le.Err, syscall.EXDEV) {
		return err
	}
	stage := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+MovingSuffix)
	if err := RemoveAll(fsys, stage); err != nil {
		return err
	}
	if err := copyTree(fsys, src, stage); err != nil {
		return err
	}
	if err := fsys.Rename(stage, dst); err != nil {
		return err
	}
	if err := fsys.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	aside := MovedAside(src)
	if err := RemoveAll(fsys, aside); err != nil {
		return err
	}
	if err := fsys.Rename(src, aside); err != nil {
		return err
	}
	if err := fsys.SyncDir(filepath.Dir(src)); err != nil {
		return err
	}
	return RemoveAll(fsys, aside)
}

// MovingSuffix ends the staging name of a Move across filesystems.
const MovingSuffix = ".moving"

// MovedAside is where a Move across filesystems puts src, on its own
// filesystem, once the copy is in place, to remove it from there.
func MovedAside(src string) string {
	return filepath.Join(filepath.Dir(src), "."+filepath.Base(src)+".moved")
}

func copyTree(fsys FS, src, dst string) error {
	fi, err := fsys.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := fsys.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		ents, err := fsys.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := copyTree(fsys, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		if err := fsys.SyncDir(dst); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		in, err := fsys.OpenFile(src, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := fsys.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s is neither a file nor a folder; not moved", src)
	}
	return fsys.SyncDir(filepath.Dir(dst))
}

// CopyRange appends n bytes of src, from offset off, to dst at its current
// offset. Between two files of the real filesystem it lets the kernel copy
// (copy_file_range on Linux: the bytes never pass through sessiond, and a
// filesystem that can share extents shares them); otherwise, and for the
// test filesystems, it reads and writes. Compaction copies the whole
// canonical file each time, so this is most of its cost.
func CopyRange(dst, src File, off, n int64) (int64, error) {
	d, dok := dst.(*osFile)
	s, sok := src.(*osFile)
	if dok && sok {
		if done, err, handled := copyRange(d.File, s.File, off, n); handled {
			return done, err
		}
	}
	return io.Copy(dst, io.NewSectionReader(src, off, n))
}

// Allocator is a File that can reserve space ahead of its writes.
type Allocator interface {
	// Allocate makes the file at least size bytes long, the new bytes
	// reading as zeros, with the blocks reserved on disk (fallocate), so
	// later writes inside that range change no file size and allocate
	// nothing: their fdatasync has no metadata to commit.
	Allocate(size int64) error
}

// ErrNoAllocate says a file or its filesystem cannot reserve space ahead.
var ErrNoAllocate = errors.New("the filesystem cannot reserve space ahead")

// Allocate reserves space for f up to size bytes (see Allocator), or
// returns an error wrapping ErrNoAllocate when f cannot.
func Allocate(f File, size int64) error {
	a, ok := f.(Allocator)
	if !ok {
		return ErrNoAllocate
	}
	return a.Allocate(size)
}
