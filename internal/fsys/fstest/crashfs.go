package fstest

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
)

// ErrCrashed is what every operation of a crashed CrashFS returns (wrapped
// in a *fs.PathError or *os.LinkError): the simulated machine lost power,
// and the process that held its handles is gone.
var ErrCrashed = errors.New("fstest: simulated crash")

// CrashFS is an in-memory filesystem that knows what a crash would keep.
//
// The durability model is the strict POSIX one that Pebble's crashable
// MemFS and ALICE use, not the kinder one of a particular filesystem:
//
//   - A file's content is durable up to its last File.Sync. Later writes
//     and truncations are kept in order as pending operations.
//   - A folder's entries (creations, renames in and out, links, removals,
//     new sub-folders) are durable only after SyncDir of that folder. A
//     rename between two folders is two changes, one in each: syncing only
//     the source loses the file, syncing only the target leaves it in both.
//     A random crash (CrashClone with a source) keeps or drops the unsynced
//     halves of one rename together, as journaling filesystems commit a
//     rename as one transaction. A folder never ends up with two parents:
//     syncing either side of a folder's rename makes the whole rename
//     durable, as on every real filesystem.
//   - A file or folder is reachable after a crash only through durable
//     entries; data synced into a file whose name was never made durable is
//     gone with it.
//
// Paths are absolute and slash-separated; the root "/" always exists.
// Symlinks do not exist, so Lstat is Stat and O_NOFOLLOW is ignored. It is
// safe for concurrent use.
type CrashFS struct {
	mu         sync.Mutex
	root       *inode
	ops        int64
	crashAt    int64 // 0: never
	crashed    bool
	crashEvent Event
	countReads bool
	// allocate lets files reserve space (fsys.Allocator); off, Allocate
	// says the filesystem cannot, as some real ones do. Off by default:
	// a reservation is held in memory as zeros, and tests of large logs
	// would hold megabytes per crash point.
	allocate bool
	trace    func(Event)
	lastOpID uint64
	// locks are the folders' locks held (Lock); a crash drops them all.
	locks map[*inode]*crashLock
}

var _ fsys.FS = (*CrashFS)(nil)

// inode is a file or a folder. Handles and folder entries point at inodes,
// so a renamed or unlinked file stays readable through an open handle, as
// on a real filesystem.
type inode struct {
	dir   bool
	perm  fs.FileMode
	mtime time.Time

	// Files: data is what reads see; synced is what is on disk; pend are
	// the writes and truncations since the last sync, in order. Normally
	// apply(synced, pend) == data; after a sync failure that lost the
	// pending writes (LoseUnsynced) data keeps them while the disk never
	// gets them, as Linux does with pages whose writeback failed.
	data   []byte
	synced []byte
	pend   []fileOp

	// Folders: ents is what lookups see; sents is what is on disk; dops
	// are the entry changes since the last SyncDir, in order.
	ents  map[string]*inode
	sents map[string]*inode
	dops  []dirOp

	// handles counts the open handles on the inode; lease is the one
	// holding a lease on it (fsys.Leaser), broken once another opened it.
	handles     int
	lease       *crashFile
	leaseBroken bool
}

// fileOp is a write of data at off, or (trunc) a truncation to size.
type fileOp struct {
	trunc bool
	off   int64
	data  []byte
	size  int64
}

// dirOp is one change to a folder's entries, applied as a unit: a rename
// within one folder removes the old name and sets the new one at once. A
// rename between folders is one dirOp in each, with the same id: a random
// crash keeps both halves or neither (every journaling filesystem commits a
// rename as one transaction), while SyncDir makes each half durable on its
// own (the strict model: only syncing both folders promises both halves).
type dirOp struct {
	id uint64
	ch []dirChange
	// peer is the other folder of a folder's rename between folders: a
	// SyncDir of either side makes both halves durable.
	peer *inode
}

// dirChange sets name to ino, or removes name when ino is nil.
type dirChange struct {
	name string
	ino  *inode
}

func newDir(perm fs.FileMode) *inode {
	return &inode{dir: true, perm: perm.Perm(), mtime: time.Now(), ents: map[string]*inode{}, sents: map[string]*inode{}}
}

// NewCrashFS returns an empty filesystem holding only the root folder.
func NewCrashFS() *CrashFS { return &CrashFS{root: newDir(0o755)} }

// AllowAllocate lets files reserve space ahead (fsys.Allocate), modelled
// as a write of zeros; clones inherit the setting.
func (c *CrashFS) AllowAllocate(on bool) {
	c.mu.Lock()
	c.allocate = on
	c.mu.Unlock()
}

// CountReads makes reads (Read, ReadAt, Stat, Lstat, ReadDir) count as
// operations, so CrashAt can stop at them too.
func (c *CrashFS) CountReads(on bool) {
	c.mu.Lock()
	c.countReads = on
	c.mu.Unlock()
}

// Trace calls fn (under the filesystem's lock: it must not call back) for
// every counted operation, before it runs.
func (c *CrashFS) Trace(fn func(Event)) {
	c.mu.Lock()
	c.trace = fn
	c.mu.Unlock()
}

// CrashAt makes the nth counted operation (1-based, counting from the
// filesystem's creation) and every operation after it fail with
// ErrCrashed, without running: the power went out just before it. What
// was synced before stays for CrashClone. n <= 0 disarms.
func (c *CrashFS) CrashAt(n int64) {
	c.mu.Lock()
	c.crashAt = n
	if n > 0 && c.ops >= n {
		c.crashLocked(Event{N: c.ops + 1})
	}
	c.mu.Unlock()
}

// Crash stops the filesystem now: every later operation fails with
// ErrCrashed.
func (c *CrashFS) Crash() {
	c.mu.Lock()
	if !c.crashed {
		c.crashLocked(Event{N: c.ops + 1})
	}
	c.mu.Unlock()
}

func (c *CrashFS) crashLocked(ev Event) {
	c.crashed = true
	c.crashEvent = ev
	c.locks = nil // the process that held them is gone
}

// Crashed reports whether the filesystem crashed, and at which operation
// (the one that did not run).
func (c *CrashFS) Crashed() (bool, Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed, c.crashEvent
}

// Ops is the number of operations counted so far.
func (c *CrashFS) Ops() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// op counts one operation and says whether it may run.
func (c *CrashFS) op(kind Op, name string) error {
	if c.crashed {
		return ErrCrashed
	}
	if kind.IsRead() && !c.countReads {
		return nil
	}
	c.ops++
	ev := Event{N: c.ops, Op: kind, Path: name}
	if c.trace != nil {
		c.trace(ev)
	}
	if c.crashAt > 0 && c.ops >= c.crashAt {
		c.crashLocked(ev)
		return ErrCrashed
	}
	return nil
}

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// split cleans an absolute path into its components.
func split(name string) ([]string, error) {
	if !strings.HasPrefix(name, "/") {
		return nil, syscall.EINVAL
	}
	name = path.Clean(name)
	if name == "/" {
		return nil, nil
	}
	return strings.Split(name[1:], "/"), nil
}

// lookup resolves name to its inode.
func (c *CrashFS) lookup(name string) (*inode, error) {
	parts, err := split(name)
	if err != nil {
		return nil, err
	}
	n := c.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		next, ok := n.ents[p]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = next
	}
	return n, nil
}

// parent resolves the folder holding name and name's last component.
func (c *CrashFS) parent(name string) (*inode, string, error) {
	parts, err := split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", syscall.EBUSY // the root has no parent to change
	}
	d := c.root
	for _, p := range parts[:len(parts)-1] {
		next, ok := d.ents[p]
		if !ok {
			return nil, "", syscall.ENOENT
		}
		if !next.dir {
			return nil, "", syscall.ENOTDIR
		}
		d = next
	}
	return d, parts[len(parts)-1], nil
}

// change applies op to folder d now and records it as pending.
func (d *inode) change(op dirOp) {
	for _, ch := range op.ch {
		if ch.ino == nil {
			delete(d.ents, ch.name)
		} else {
			d.ents[ch.name] = ch.ino
		}
	}
	d.dops = append(d.dops, op)
	d.mtime = time.Now()
}

func (n *inode) info(name string) fs.FileInfo {
	fi := fileInfo{name: name, mode: n.perm, mtime: n.mtime}
	if n.dir {
		fi.mode |= fs.ModeDir
	} else {
		fi.size = int64(len(n.data))
	}
	return fi
}
