package fstest

import (
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/sessiond/sessiond/internal/fsys"
)

// Fault says which operations a FaultFS fails, and how.
type Fault struct {
	// Op limits the fault to one kind of operation; 0 means any counted
	// operation (reads only when the FaultFS counts reads).
	Op Op
	// Path limits the fault to operations on matching paths (for rename
	// and link, either name); nil means any.
	Path func(string) bool
	// Nth fails the Nth matching operation after Inject (1-based); 0 is
	// the same as 1.
	Nth int64
	// Err is the error the operation returns, wrapped in a *fs.PathError
	// or *os.LinkError: syscall.EIO, syscall.ENOSPC, syscall.EROFS... nil
	// means EIO.
	Err error
	// Short makes a failing Write first write the first half of its bytes,
	// as a disk that fills up in the middle of a write does.
	Short bool
	// Sticky keeps failing every later matching operation, like a dead or
	// read-only disk; otherwise the fault fires once.
	Sticky bool
	// LoseUnsynced makes a failing Sync also lose the file's unsynced
	// writes for good while reads still see them (Linux marks pages whose
	// writeback failed clean). It needs a file that implements
	// LoseUnsynced, as CrashFS's do.
	LoseUnsynced bool
}

// FaultFS wraps an FS and fails the operations its faults select. It
// counts every operation that touches the disk (see Op), so a test can run
// a workload once to count them and then fail each in turn. It is safe for
// concurrent use.
type FaultFS struct {
	inner fsys.FS

	mu         sync.Mutex
	ops        int64
	byKind     map[Op]int64
	countReads bool
	faults     []*armed
	fired      []Event
	trace      func(Event)
}

type armed struct {
	Fault
	seen  int64 // matching operations since Inject
	fired bool
}

var _ fsys.FS = (*FaultFS)(nil)

// NewFaultFS wraps inner.
func NewFaultFS(inner fsys.FS) *FaultFS {
	return &FaultFS{inner: inner, byKind: map[Op]int64{}}
}

// Inner returns the wrapped filesystem.
func (f *FaultFS) Inner() fsys.FS { return f.inner }

// CountReads makes reads (Read, ReadAt, Stat, Lstat, ReadDir) count as
// operations, so faults with Op 0 can hit them too.
func (f *FaultFS) CountReads(on bool) {
	f.mu.Lock()
	f.countReads = on
	f.mu.Unlock()
}

// Trace calls fn (under the FaultFS's lock: it must not call back) for
// every counted operation, before it runs.
func (f *FaultFS) Trace(fn func(Event)) {
	f.mu.Lock()
	f.trace = fn
	f.mu.Unlock()
}

// Inject arms a fault. Several may be armed at once; the first that fires
// on an operation decides its error.
func (f *FaultFS) Inject(fl Fault) {
	f.mu.Lock()
	f.faults = append(f.faults, &armed{Fault: fl})
	f.mu.Unlock()
}

// Clear disarms every fault: the disk is healthy again.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	f.faults = nil
	f.mu.Unlock()
}

// Ops is the number of operations counted so far.
func (f *FaultFS) Ops() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// OpsOf is the number of operations of one kind counted so far.
func (f *FaultFS) OpsOf(kind Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byKind[kind]
}

// Fired lists the operations that failed because of a fault.
func (f *FaultFS) Fired() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.fired...)
}

// check counts an operation on paths and returns the fault that fails it,
// or nil.
func (f *FaultFS) check(kind Op, paths ...string) *armed {
	f.mu.Lock()
	defer f.mu.Unlock()
	counted := !kind.IsRead() || f.countReads
	ev := Event{Op: kind, Path: paths[len(paths)-1]}
	if counted {
		f.ops++
		f.byKind[kind]++
		ev.N = f.ops
		if f.trace != nil {
			f.trace(ev)
		}
	}
	var hit *armed
	for _, a := range f.faults {
		if !a.matches(kind, counted, paths) {
			continue
		}
		if a.fired {
			if a.Sticky && hit == nil {
				hit = a
			}
			continue
		}
		a.seen++
		nth := a.Nth
		if nth <= 0 {
			nth = 1
		}
		if a.seen == nth && hit == nil {
			a.fired = true
			hit = a
		}
	}
	if hit != nil {
		f.fired = append(f.fired, ev)
	}
	return hit
}

func (a *armed) matches(kind Op, counted bool, paths []string) bool {
	if a.Op != 0 && a.Op != kind || a.Op == 0 && !counted {
		return false
	}
	if a.Path == nil {
		return true
	}
	for _, p := range paths {
		if a.Path(p) {
			return true
		}
	}
	return false
}

func (a *armed) err() error {
	if a.Err == nil {
		return syscall.EIO
	}
	return a.Err
}

// OpenFile opens name on the inner FS; the handle's operations are
// checked too.
func (f *FaultFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	if a := f.check(OpOpen, name); a != nil {
		return nil, pathErr("open", name, a.err())
	}
	inner, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: inner, fs: f}, nil
}

func (f *FaultFS) Rename(oldpath, newpath string) error {
	if a := f.check(OpRename, oldpath, newpath); a != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: a.err()}
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *FaultFS) Link(oldpath, newpath string) error {
	if a := f.check(OpLink, oldpath, newpath); a != nil {
		return &os.LinkError{Op: "link", Old: oldpath, New: newpath, Err: a.err()}
	}
	return f.inner.Link(oldpath, newpath)
}

func (f *FaultFS) Remove(name string) error {
	if a := f.check(OpRemove, name); a != nil {
		return pathErr("remove", name, a.err())
	}
	return f.inner.Remove(name)
}

func (f *FaultFS) Mkdir(name string, perm fs.FileMode) error {
	if a := f.check(OpMkdir, name); a != nil {
		return pathErr("mkdir", name, a.err())
	}
	return f.inner.Mkdir(name, perm)
}

func (f *FaultFS) Stat(name string) (fs.FileInfo, error) {
	if a := f.check(OpStat, name); a != nil {
		return nil, pathErr("stat", name, a.err())
	}
	return f.inner.Stat(name)
}

func (f *FaultFS) Lstat(name string) (fs.FileInfo, error) {
	if a := f.check(OpStat, name); a != nil {
		return nil, pathErr("lstat", name, a.err())
	}
	return f.inner.Lstat(name)
}

func (f *FaultFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if a := f.check(OpReadDir, name); a != nil {
		return nil, pathErr("readdirent", name, a.err())
	}
	return f.inner.ReadDir(name)
}

func (f *FaultFS) SyncDir(name string) error {
	if a := f.check(OpSyncDir, name); a != nil {
		return pathErr("fsync", name, a.err())
	}
	return f.inner.SyncDir(name)
}

// faultFile checks each operation of an open file against the faults.
// Seek, Close, Lease and Unlease touch no disk and are never failed.
type faultFile struct {
	fsys.File
	fs *FaultFS
}

func (f *faultFile) Read(b []byte) (int, error) {
	if a := f.fs.check(OpRead, f.Name()); a != nil {
		return 0, pathErr("read", f.Name(), a.err())
	}
	return f.File.Read(b)
}

func (f *faultFile) ReadAt(b []byte, off int64) (int, error) {
	if a := f.fs.check(OpRead, f.Name()); a != nil {
		return 0, pathErr("read", f.Name(), a.err())
	}
	return f.File.ReadAt(b, off)
}

func (f *faultFile) Write(b []byte) (int, error) {
	a := f.fs.check(OpWrite, f.Name())
	if a == nil {
		return f.File.Write(b)
	}
	n := 0
	if a.Short {
		// A short write stores a prefix and reports it together with the
		// error, as write(2) reports a partial write then fails the rest.
		n, _ = f.File.Write(b[:len(b)/2])
	}
	return n, pathErr("write", f.Name(), a.err())
}

func (f *faultFile) Sync() error {
	a := f.fs.check(OpSync, f.Name())
	if a == nil {
		return f.File.Sync()
	}
	if a.LoseUnsynced {
		if l, ok := f.File.(interface{ LoseUnsynced() }); ok {
			l.LoseUnsynced()
		}
	}
	return pathErr("sync", f.Name(), a.err())
}

func (f *faultFile) Truncate(size int64) error {
	if a := f.fs.check(OpTruncate, f.Name()); a != nil {
		return pathErr("truncate", f.Name(), a.err())
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Stat() (fs.FileInfo, error) {
	if a := f.fs.check(OpStat, f.Name()); a != nil {
		return nil, pathErr("stat", f.Name(), a.err())
	}
	return f.File.Stat()
}

// Errors lists the error kinds a fault-injection sweep tries: a failing
// disk, a full one and one remounted read-only.
var Errors = []error{syscall.EIO, syscall.ENOSPC, syscall.EROFS}

// Allocate is a write of zeros to the fault rules (OpWrite), passed on to
// the wrapped file when it can reserve space.
func (f *faultFile) Allocate(size int64) error {
	if a := f.fs.check(OpWrite, f.Name()); a != nil {
		return pathErr("fallocate", f.Name(), a.err())
	}
	return fsys.Allocate(f.File, size)
}

// Lease takes a lease when the wrapped file can (fsys.Lease).
func (f *faultFile) Lease() error { return fsys.Lease(f.File) }

// Unlease gives up the wrapped file's lease (fsys.Unlease).
func (f *faultFile) Unlease() (bool, error) { return fsys.Unlease(f.File) }
