package fstest

import (
	"math/rand"
	"time"
)

// write puts b at off in the visible content and records it as pending.
func (n *inode) write(b []byte, off int64) {
	n.data = writeAt(n.data, b, off)
	n.pend = append(n.pend, fileOp{off: off, data: append([]byte(nil), b...)})
	n.mtime = time.Now()
}

func (n *inode) truncate(size int64) {
	n.data = resize(n.data, size)
	n.pend = append(n.pend, fileOp{trunc: true, size: size})
	n.mtime = time.Now()
}

func (n *inode) sync() {
	n.synced = applyOps(n.synced, n.pend)
	n.pend = nil
}

// writeAt writes b at off into buf, growing it with zeros as needed. buf
// is owned by the caller and may be reused.
func writeAt(buf, b []byte, off int64) []byte {
	if end := off + int64(len(b)); end > int64(len(buf)) {
		buf = resize(buf, end)
	}
	copy(buf[off:], b)
	return buf
}

func resize(buf []byte, size int64) []byte {
	if size <= int64(len(buf)) {
		return buf[:size]
	}
	if size <= int64(cap(buf)) {
		old := len(buf)
		buf = buf[:size]
		clear(buf[old:])
		return buf
	}
	nb := make([]byte, size, size+size/2)
	copy(nb, buf)
	return nb
}

func applyOps(buf []byte, ops []fileOp) []byte {
	for _, o := range ops {
		if o.trunc {
			buf = resize(buf, o.size)
		} else {
			buf = writeAt(buf, o.data, o.off)
		}
	}
	return buf
}

// sector is the unit a disk writes atomically in tear's sector mode.
const sector = 512

// tear applies a random part of the write o to buf, as a power cut in the
// middle of its writeback leaves it: a prefix of any length, a prefix with
// the rest of a file extension zero-filled (the size reached the disk, the
// data did not), the end of the write without its beginning (pages written
// back out of order), or any subset of its 512-byte sectors with the file
// extended to the write's end (holes anywhere).
func tear(buf []byte, o fileOp, rng *rand.Rand) []byte {
	if o.trunc {
		return buf
	}
	end := o.off + int64(len(o.data))
	t := rng.Intn(len(o.data) + 1)
	switch rng.Intn(4) {
	case 0:
		return writeAt(buf, o.data[:t], o.off)
	case 1:
		if end > int64(len(buf)) {
			buf = resize(buf, end)
		}
		return writeAt(buf, o.data[:t], o.off)
	case 2:
		return writeAt(buf, o.data[t:], o.off+int64(t))
	default:
		if end > int64(len(buf)) {
			buf = resize(buf, end)
		}
		for s := o.off / sector * sector; s < end; s += sector {
			lo, hi := max(s, o.off), min(s+sector, end)
			if rng.Intn(2) == 0 {
				buf = writeAt(buf, o.data[lo-o.off:hi-o.off], lo)
			}
		}
		return buf
	}
}

// CrashClone returns the filesystem as a power loss now would leave it, as
// a new CrashFS whose every byte and entry is durable. With rng nil it
// holds exactly what was synced. With rng set it also keeps, chosen by rng,
// part of what was not: for each file a prefix of its pending writes, the
// next one possibly torn (see tear), and for each folder a subset of its
// pending entry changes, applied in order. c itself is not changed; call
// Crash or CrashAt first so nothing runs on it meanwhile.
func (c *CrashFS) CrashClone(rng *rand.Rand) *CrashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := map[uint64]bool{} // dirOp id -> kept, so both halves of a rename agree
	root := cloneTree(c.root, func(n, m *inode, clone func(*inode) *inode) {
		if !n.dir {
			data := append([]byte(nil), n.synced...)
			if rng != nil && len(n.pend) > 0 {
				k := rng.Intn(len(n.pend) + 1)
				data = applyOps(data, n.pend[:k])
				if k < len(n.pend) && rng.Intn(2) == 0 {
					data = tear(data, n.pend[k], rng)
				}
			}
			m.data = data
			m.synced = append([]byte(nil), data...)
			return
		}
		ents := cloneEnts(n.sents, nil)
		if rng != nil {
			for _, op := range n.dops {
				keep, decided := kept[op.id]
				if !decided {
					keep = rng.Intn(2) == 0
					kept[op.id] = keep
				}
				if !keep {
					continue
				}
				for _, ch := range op.ch {
					if ch.ino == nil {
						delete(ents, ch.name)
					} else {
						ents[ch.name] = ch.ino
					}
				}
			}
		}
		m.ents = make(map[string]*inode, len(ents))
		for _, k := range sortedNames(ents) { // sorted: rng draws in a fixed order
			m.ents[k] = clone(ents[k])
		}
		m.sents = cloneEnts(m.ents, nil)
	})
	return &CrashFS{root: root, allocate: c.allocate}
}

// KillClone returns what a new process sees after this one was killed
// (kill -9) while the machine kept running: every write and entry change,
// synced or not, with what is not synced still pending, so a power loss
// later can still take it away. c's open handles are not carried over.
func (c *CrashFS) KillClone() *CrashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	root := cloneTree(c.root, func(n, m *inode, clone func(*inode) *inode) {
		if !n.dir {
			m.data = append([]byte(nil), n.data...)
			m.synced = append([]byte(nil), n.synced...)
			m.pend = append([]fileOp(nil), n.pend...) // ops are never modified in place
			return
		}
		m.ents = cloneEnts(n.ents, clone)
		m.sents = cloneEnts(n.sents, clone)
		for _, op := range n.dops {
			nop := dirOp{id: op.id, ch: make([]dirChange, len(op.ch))}
			if op.peer != nil {
				nop.peer = clone(op.peer)
			}
			for i, ch := range op.ch {
				nop.ch[i] = dirChange{ch.name, nil}
				if ch.ino != nil {
					nop.ch[i].ino = clone(ch.ino)
				}
			}
			m.dops = append(m.dops, nop)
		}
	})
	return &CrashFS{root: root, countReads: c.countReads, lastOpID: c.lastOpID, allocate: c.allocate}
}

// cloneTree copies the tree below root, each inode once (so a file with
// two names stays one file), fill completing each copy m from its
// original n; clone gives the copy of another inode.
func cloneTree(root *inode, fill func(n, m *inode, clone func(*inode) *inode)) *inode {
	memo := map[*inode]*inode{}
	var clone func(n *inode) *inode
	clone = func(n *inode) *inode {
		if m, ok := memo[n]; ok {
			return m
		}
		m := &inode{dir: n.dir, perm: n.perm, mtime: n.mtime}
		memo[n] = m
		fill(n, m, clone)
		return m
	}
	return clone(root)
}
