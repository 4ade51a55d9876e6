package fstest

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"sort"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
)

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
			return c.handle(c.root, name, flag), nil
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
	return c.handle(n, name, flag), nil
}

// handle opens a handle on n; the caller holds c.mu. Opening a file
// breaks another handle's lease on it, as on Linux (where the open would
// wait for the holder to give it up: with one process, it goes on at once).
func (c *CrashFS) handle(n *inode, name string, flag int) *crashFile {
	n.handles++
	if n.lease != nil {
		n.leaseBroken = true
	}
	return &crashFile{fs: c, ino: n, name: name, flag: flag}
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
