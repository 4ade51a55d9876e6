package fstest

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"
)

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
