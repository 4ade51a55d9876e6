package fstest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
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

// OpenFile opens or creates name. O_CREATE, O_EXCL, O_TRUNC, O_APPEND,
// O_RDONLY, O_WRONLY and O_RDWR behave as on Linux; a folder opens only for
// reading.
func (c *CrashFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpOpen, name); err != nil {
		return nil, pathErr("open", name, err)
	}
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	writable := acc == os.O_WRONLY || acc == os.O_RDWR
	d, base, err := c.parent(name)
	if err != nil {
		if errors.Is(err, syscall.EBUSY) { // the root folder
			if writable {
				return nil, pathErr("open", name, syscall.EISDIR)
			}
			return &crashFile{fs: c, ino: c.root, name: name, flag: flag}, nil
		}
		return nil, pathErr("open", name, err)
	}
	n, exists := d.ents[base]
	switch {
	case exists && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, syscall.EEXIST)
	case exists && n.dir && (writable || flag&os.O_TRUNC != 0):
		return nil, pathErr("open", name, syscall.EISDIR)
	case exists:
		if flag&os.O_TRUNC != 0 && writable && len(n.data) > 0 {
			n.truncate(0)
		}
	case flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, syscall.ENOENT)
	default:
		n = &inode{perm: perm.Perm(), mtime: time.Now()}
		d.change(c.dirOp(dirChange{base, n}))
	}
	return &crashFile{fs: c, ino: n, name: name, flag: flag}, nil
}

// Rename renames oldpath to newpath, replacing a file (or an empty folder,
// for a folder) already there, as rename(2) does.
func (c *CrashFS) Rename(oldpath, newpath string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	linkErr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err} }
	if err := c.op(OpRename, newpath); err != nil {
		return linkErr(err)
	}
	od, oname, err := c.parent(oldpath)
	if err != nil {
		return linkErr(err)
	}
	n, ok := od.ents[oname]
	if !ok {
		return linkErr(syscall.ENOENT)
	}
	nd, nname, err := c.parent(newpath)
	if err != nil {
		return linkErr(err)
	}
	if old, ok := nd.ents[nname]; ok {
		switch {
		case old == n:
			return nil // two names of one file: rename(2) does nothing
		case n.dir && !old.dir:
			return linkErr(syscall.ENOTDIR)
		case !n.dir && old.dir:
			return linkErr(syscall.EISDIR)
		case old.dir && len(old.ents) > 0:
			return linkErr(syscall.ENOTEMPTY)
		}
	}
	if n.dir && c.inside(nd, n) {
		return linkErr(syscall.EINVAL) // a folder cannot move into itself
	}
	if od == nd {
		od.change(c.dirOp(dirChange{oname, nil}, dirChange{nname, n}))
	} else {
		op := c.dirOp(dirChange{oname, nil})
		half := dirOp{id: op.id, ch: []dirChange{{nname, n}}}
		if n.dir {
			op.peer, half.peer = nd, od
		}
		od.change(op)
		nd.change(half)
	}
	return nil
}

// inside reports whether folder d is dir or below it.
func (c *CrashFS) inside(d, dir *inode) bool {
	var walk func(n *inode) bool
	walk = func(n *inode) bool {
		if n == d {
			return true
		}
		for _, e := range n.ents {
			if e.dir && walk(e) {
				return true
			}
		}
		return false
	}
	return walk(dir)
}

// Link makes newpath another name of the file oldpath; it fails with
// EEXIST if newpath exists.
func (c *CrashFS) Link(oldpath, newpath string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	linkErr := func(err error) error { return &os.LinkError{Op: "link", Old: oldpath, New: newpath, Err: err} }
	if err := c.op(OpLink, newpath); err != nil {
		return linkErr(err)
	}
	n, err := c.lookup(oldpath)
	if err != nil {
		return linkErr(err)
	}
	if n.dir {
		return linkErr(syscall.EPERM)
	}
	nd, nname, err := c.parent(newpath)
	if err != nil {
		return linkErr(err)
	}
	if _, ok := nd.ents[nname]; ok {
		return linkErr(syscall.EEXIST)
	}
	nd.change(c.dirOp(dirChange{nname, n}))
	return nil
}

// Remove removes a file or an empty folder.
func (c *CrashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpRemove, name); err != nil {
		return pathErr("remove", name, err)
	}
	d, base, err := c.parent(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n, ok := d.ents[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir && len(n.ents) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	d.change(c.dirOp(dirChange{base, nil}))
	return nil
}

// Mkdir creates a folder.
func (c *CrashFS) Mkdir(name string, perm fs.FileMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpMkdir, name); err != nil {
		return pathErr("mkdir", name, err)
	}
	d, base, err := c.parent(name)
	if err != nil {
		if errors.Is(err, syscall.EBUSY) {
			err = syscall.EEXIST
		}
		return pathErr("mkdir", name, err)
	}
	if _, ok := d.ents[base]; ok {
		return pathErr("mkdir", name, syscall.EEXIST)
	}
	d.change(c.dirOp(dirChange{base, newDir(perm)}))
	return nil
}

// Stat describes name.
func (c *CrashFS) Stat(name string) (fs.FileInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpStat, name); err != nil {
		return nil, pathErr("stat", name, err)
	}
	n, err := c.lookup(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(path.Base(name)), nil
}

// Lstat is Stat: there are no symlinks.
func (c *CrashFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := c.Stat(name)
	if pe, ok := err.(*fs.PathError); ok {
		pe.Op = "lstat"
	}
	return fi, err
}

// ReadDir lists a folder, sorted by name.
func (c *CrashFS) ReadDir(name string) ([]fs.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpReadDir, name); err != nil {
		return nil, pathErr("readdirent", name, err)
	}
	n, err := c.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if !n.dir {
		return nil, pathErr("readdirent", name, syscall.ENOTDIR)
	}
	out := make([]fs.DirEntry, 0, len(n.ents))
	for _, k := range sortedNames(n.ents) {
		out = append(out, fs.FileInfoToDirEntry(n.ents[k].info(k)))
	}
	return out, nil
}

// SyncDir makes the folder's current entries durable.
func (c *CrashFS) SyncDir(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.op(OpSyncDir, name); err != nil {
		return pathErr("fsync", name, err)
	}
	n, err := c.lookup(name)
	if err != nil {
		return pathErr("open", name, err)
	}
	if !n.dir {
		return pathErr("fsync", name, syscall.ENOTDIR)
	}
	for _, op := range n.dops {
		if op.peer != nil {
			op.peer.syncHalf(op.id)
		}
	}
	n.sents = cloneEnts(n.ents, nil)
	n.dops = nil
	return nil
}

// syncHalf makes the pending change id of folder d durable on its own.
func (d *inode) syncHalf(id uint64) {
	for i, op := range d.dops {
		if op.id != id {
			continue
		}
		for _, ch := range op.ch {
			if ch.ino == nil {
				delete(d.sents, ch.name)
			} else {
				d.sents[ch.name] = ch.ino
			}
		}
		d.dops = append(d.dops[:i:i], d.dops[i+1:]...)
		return
	}
}

// dirOp numbers a new folder change.
func (c *CrashFS) dirOp(ch ...dirChange) dirOp {
	c.lastOpID++
	return dirOp{id: c.lastOpID, ch: ch}
}

func sortedNames(m map[string]*inode) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// cloneEnts copies a folder map, mapping inodes through f when it is set.
func cloneEnts(m map[string]*inode, f func(*inode) *inode) map[string]*inode {
	out := make(map[string]*inode, len(m))
	for k, v := range m {
		if f != nil {
			v = f(v)
		}
		out[k] = v
	}
	return out
}

// ReadFile returns the current content of name. It is for tests'
// inspection: it is not counted and works on a crashed filesystem.
func (c *CrashFS) ReadFile(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n.dir {
		return nil, pathErr("read", name, syscall.EISDIR)
	}
	return append([]byte(nil), n.data...), nil
}

// WriteFile makes name (and its missing parent folders) hold data, all of
// it durable at once. It is for tests' setup: it is not counted.
func (c *CrashFS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	parts, err := split(name)
	if err != nil || len(parts) == 0 {
		return pathErr("open", name, syscall.EINVAL)
	}
	d := c.root
	for _, p := range parts[:len(parts)-1] {
		next, ok := d.ents[p]
		if !ok {
			next = newDir(0o700)
			d.ents[p] = next
			d.sents[p] = next
		}
		if !next.dir {
			return pathErr("open", name, syscall.ENOTDIR)
		}
		d = next
	}
	base := parts[len(parts)-1]
	n, ok := d.ents[base]
	if !ok {
		n = &inode{perm: perm.Perm()}
		d.ents[base] = n
		d.sents[base] = n
	}
	if n.dir {
		return pathErr("open", name, syscall.EISDIR)
	}
	n.data = append([]byte(nil), data...)
	n.synced = append([]byte(nil), data...)
	n.pend = nil
	n.mtime = time.Now()
	return nil
}

// Walk lists every path below root (root included), sorted, with a
// trailing "/" on folders. It is for tests' inspection: it is not counted.
func (c *CrashFS) Walk(root string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.lookup(root)
	if err != nil {
		return nil
	}
	var out []string
	var walk func(p string, n *inode)
	walk = func(p string, n *inode) {
		if !n.dir {
			out = append(out, p)
			return
		}
		out = append(out, strings.TrimSuffix(p, "/")+"/")
		for _, k := range sortedNames(n.ents) {
			walk(path.Join(p, k), n.ents[k])
		}
	}
	walk(path.Clean(root), n)
	return out
}

// Dump describes the whole tree with sizes and what is not yet durable,
// for test failure messages.
func (c *CrashFS) Dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	var walk func(p string, n *inode, depth int)
	walk = func(p string, n *inode, depth int) {
		ind := strings.Repeat("  ", depth)
		if !n.dir {
			fmt.Fprintf(&b, "%s%s %d bytes (synced %d, %d pending ops)\n", ind, p, len(n.data), len(n.synced), len(n.pend))
			return
		}
		fmt.Fprintf(&b, "%s%s/ (%d pending entry changes)\n", ind, p, len(n.dops))
		for _, k := range sortedNames(n.ents) {
			walk(k, n.ents[k], depth+1)
		}
	}
	walk("", c.root, 0)
	return b.String()
}
