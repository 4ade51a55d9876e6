package fstest

import (
	"io"
	"io/fs"
	"sync"

	"github.com/sessiond/sessiond/internal/fsys"
)

// Call is one operation of a HookFS or of a file it opened, as its hooks
// see it.
type Call struct {
	// Name is the operation: of the filesystem "open", "rename", "link",
	// "remove", "mkdir", "stat", "lstat", "readdir", "syncdir" or "lock";
	// of an open file "read", "readat", "write", "seek", "sync",
	// "truncate", "fstat", "allocate", "lease", "unlease" or "close".
	Name string
	// Op is the operation's kind as CrashFS and FaultFS count it; 0 for
	// seek, close, lease and unlease, which touch no disk.
	Op Op
	// Path is the file or folder operated on: the old name for rename and
	// link, the name it was opened with for a file's operations.
	Path string
	// NewPath is the new name of rename and link.
	NewPath string
	// File is the open file a file's operation is on, the same for every
	// operation on it; nil for the filesystem's operations.
	File fsys.File
}

// Hooks are what a HookFS calls around each operation. They run on the
// caller's goroutine, without any lock of the HookFS held, so they must be
// safe for concurrent use; each may be nil.
type Hooks struct {
	// Before runs before the operation. An error it returns is the
	// operation's, which then does not run; it may also wait, to delay
	// the operation.
	Before func(c Call) error
	// After runs after an operation that ran, with the operation's error.
	After func(c Call, err error)
	// Stat may replace what a successful stat, lstat or fstat returns
	// (see Resized).
	Stat func(c Call, fi fs.FileInfo) fs.FileInfo
}

// HookFS wraps an FS and calls its hooks around every operation of the
// filesystem and of the files it opens: a test watches operations, runs
// something at a chosen moment (after a rename, at a read's end of file),
// delays or fails chosen operations, or makes files look another size.
// Files of the inner FS that can change their mode and owner (the real
// filesystem's) keep those methods, outside the hooks. It is safe for
// concurrent use.
type HookFS struct {
	inner fsys.FS

	mu    sync.Mutex
	hooks Hooks
}

var _ fsys.FS = (*HookFS)(nil)

// NewHookFS wraps inner with hooks h.
func NewHookFS(inner fsys.FS, h Hooks) *HookFS { return &HookFS{inner: inner, hooks: h} }

// Inner returns the wrapped filesystem.
func (h *HookFS) Inner() fsys.FS { return h.inner }

// SetHooks replaces the hooks, for the operations that start from now on.
func (h *HookFS) SetHooks(hk Hooks) {
	h.mu.Lock()
	h.hooks = hk
	h.mu.Unlock()
}

func (h *HookFS) current() Hooks {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hooks
}

// run runs op between the hooks.
func (h *HookFS) run(c Call, op func() error) error {
	hk := h.current()
	if hk.Before != nil {
		if err := hk.Before(c); err != nil {
			return err
		}
	}
	err := op()
	if hk.After != nil {
		hk.After(c, err)
	}
	return err
}

// stat runs a stat between the hooks and lets the Stat hook change its
// result.
func (h *HookFS) stat(c Call, op func() (fs.FileInfo, error)) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := h.run(c, func() (err error) {
		fi, err = op()
		return err
	})
	if err != nil {
		return nil, err
	}
	if hk := h.current(); hk.Stat != nil {
		fi = hk.Stat(c, fi)
	}
	return fi, nil
}

// OpenFile opens name on the inner FS; the file's operations go through
// the hooks too.
func (h *HookFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	var f fsys.File
	err := h.run(Call{Name: "open", Op: OpOpen, Path: name}, func() (err error) {
		f, err = h.inner.OpenFile(name, flag, perm)
		return err
	})
	if err != nil {
		return nil, err
	}
	hf := &hookFile{File: f, fs: h, name: name}
	if _, ok := f.(attrSetter); ok {
		return &hookAttrFile{hf}, nil
	}
	return hf, nil
}

func (h *HookFS) Rename(oldpath, newpath string) error {
	return h.run(Call{Name: "rename", Op: OpRename, Path: oldpath, NewPath: newpath}, func() error {
		return h.inner.Rename(oldpath, newpath)
	})
}

func (h *HookFS) Link(oldpath, newpath string) error {
	return h.run(Call{Name: "link", Op: OpLink, Path: oldpath, NewPath: newpath}, func() error {
		return h.inner.Link(oldpath, newpath)
	})
}

func (h *HookFS) Remove(name string) error {
	return h.run(Call{Name: "remove", Op: OpRemove, Path: name}, func() error { return h.inner.Remove(name) })
}

func (h *HookFS) Mkdir(name string, perm fs.FileMode) error {
	return h.run(Call{Name: "mkdir", Op: OpMkdir, Path: name}, func() error { return h.inner.Mkdir(name, perm) })
}

func (h *HookFS) Stat(name string) (fs.FileInfo, error) {
	return h.stat(Call{Name: "stat", Op: OpStat, Path: name}, func() (fs.FileInfo, error) { return h.inner.Stat(name) })
}

func (h *HookFS) Lstat(name string) (fs.FileInfo, error) {
	return h.stat(Call{Name: "lstat", Op: OpStat, Path: name}, func() (fs.FileInfo, error) { return h.inner.Lstat(name) })
}

func (h *HookFS) ReadDir(name string) ([]fs.DirEntry, error) {
	var ents []fs.DirEntry
	err := h.run(Call{Name: "readdir", Op: OpReadDir, Path: name}, func() (err error) {
		ents, err = h.inner.ReadDir(name)
		return err
	})
	return ents, err
}

func (h *HookFS) SyncDir(name string) error {
	return h.run(Call{Name: "syncdir", Op: OpSyncDir, Path: name}, func() error { return h.inner.SyncDir(name) })
}

func (h *HookFS) Lock(name string) (io.Closer, error) {
	var c io.Closer
	err := h.run(Call{Name: "lock", Op: OpLock, Path: name}, func() (err error) {
		c, err = h.inner.Lock(name)
		return err
	})
	return c, err
}

// Resized returns fi with its size replaced by size: a file that looks
// longer or shorter than it is, as if another program changed it
// meanwhile.
func Resized(fi fs.FileInfo, size int64) fs.FileInfo { return resized{fi, size} }

type resized struct {
	fs.FileInfo
	size int64
}

func (r resized) Size() int64 { return r.size }

// hookFile runs each operation of an open file between its HookFS's hooks.
type hookFile struct {
	fsys.File
	fs   *HookFS
	name string
}

func (f *hookFile) call(name string, op Op) Call {
	return Call{Name: name, Op: op, Path: f.name, File: f}
}

func (f *hookFile) Read(b []byte) (n int, err error) {
	err = f.fs.run(f.call("read", OpRead), func() (err error) {
		n, err = f.File.Read(b)
		return err
	})
	return n, err
}

func (f *hookFile) ReadAt(b []byte, off int64) (n int, err error) {
	err = f.fs.run(f.call("readat", OpRead), func() (err error) {
		n, err = f.File.ReadAt(b, off)
		return err
	})
	return n, err
}

func (f *hookFile) Write(b []byte) (n int, err error) {
	err = f.fs.run(f.call("write", OpWrite), func() (err error) {
		n, err = f.File.Write(b)
		return err
	})
	return n, err
}

func (f *hookFile) Seek(offset int64, whence int) (pos int64, err error) {
	err = f.fs.run(f.call("seek", 0), func() (err error) {
		pos, err = f.File.Seek(offset, whence)
		return err
	})
	return pos, err
}

func (f *hookFile) Sync() error {
	return f.fs.run(f.call("sync", OpSync), f.File.Sync)
}

func (f *hookFile) Truncate(size int64) error {
	return f.fs.run(f.call("truncate", OpTruncate), func() error { return f.File.Truncate(size) })
}

func (f *hookFile) Stat() (fs.FileInfo, error) {
	return f.fs.stat(f.call("fstat", OpStat), f.File.Stat)
}

func (f *hookFile) Close() error {
	return f.fs.run(f.call("close", 0), f.File.Close)
}

// Allocate reserves space when the wrapped file can (fsys.Allocate).
func (f *hookFile) Allocate(size int64) error {
	return f.fs.run(f.call("allocate", OpWrite), func() error { return fsys.Allocate(f.File, size) })
}

// Lease takes a lease when the wrapped file can (fsys.Lease). On the real
// filesystem a hook must not open the leased file itself while the lease
// is held (between "lease" and "unlease"): the kernel makes that open wait
// for the lease's release, up to its lease-break time (45 s by default),
// and the test would stall with it.
func (f *hookFile) Lease() error {
	return f.fs.run(f.call("lease", 0), func() error { return fsys.Lease(f.File) })
}

// Unlease gives up the wrapped file's lease (fsys.Unlease).
func (f *hookFile) Unlease() (whole bool, err error) {
	err = f.fs.run(f.call("unlease", 0), func() (err error) {
		whole, err = fsys.Unlease(f.File)
		return err
	})
	return whole, err
}

// attrSetter is a file that can change its mode and owner (fsys.KeepAttrs).
type attrSetter interface {
	Chmod(fs.FileMode) error
	Chown(uid, gid int) error
}

// hookAttrFile is a hookFile over a file that can change its mode and
// owner: it keeps those methods, so a rewrite through a HookFS keeps a
// file's attributes as it would without it.
type hookAttrFile struct{ *hookFile }

func (f *hookAttrFile) Chmod(mode fs.FileMode) error { return f.File.(attrSetter).Chmod(mode) }

func (f *hookAttrFile) Chown(uid, gid int) error { return f.File.(attrSetter).Chown(uid, gid) }
