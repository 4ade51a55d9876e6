package journal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// pendingBatch is a stream's records since its last commit, within the
// write being read.
type pendingBatch struct {
	entries []Span
	meta    []byte
}

// scanner carries what recovery learnt from segment to segment.
type scanner struct {
	l   *Log
	rec *Recovery
	// streams are every stream bound in the segments read so far,
	// superseded ones included (their records are checked, then ignored).
	streams map[uint64]*epoch
	pending map[uint64]*pendingBatch
	// damaged is set once a segment was found corrupt: later records may
	// continue streams whose batches were lost with the damage.
	damaged bool
	// reads and counts are, per segment, where its readable records end
	// and how many entries their commits acknowledge; cuts what finish
	// does to each.
	reads   map[uint64]int64
	counts  map[uint64]uint64
	cuts    []cut
	damages []damage
}

// segment reads s (size bytes on disk, of which the first limit count:
// the rest was never acknowledged), applying every complete record to the
// streams, then cuts what is torn.
func (sc *scanner) segment(s *segment, size, limit int64) error {
	rules := sc.l.rules
	w := frame.NewWindow(s.f, limit, int(min(max(limit, frame.HeaderSize), windowSize)))
	off := s.end
	valid := off
	writeStart := off
	clear(sc.pending)
	for off < limit {
		h, err := frame.Read(w, off, s.id, rules)
		if err == nil {
			err = sc.apply(w, s, h, off, &writeStart)
		}
		if err != nil {
			if !frame.IsError(err) {
				return errdefs.FromIO(fmt.Errorf("read journal segment %s: %w", s.path, err))
			}
			proof, err2 := frame.FindLaterWrite(w, off, s.id, rules)
			if err2 != nil {
				return errdefs.FromIO(fmt.Errorf("read journal segment %s: %w", s.path, err2))
			}
			// Damage inside a pad costs no record, whether a later write
			// proves it was synced or it is the segment's last write (whose
			// end the acknowledgement record counts with the pad).
			if end := sc.padUntil(w, s, off, writeStart); end >= 0 && (proof < 0 || end == proof) {
				sc.rec.PadDamaged = append(sc.rec.PadDamaged, fmt.Sprintf("journal segment %s: the padding from byte offset %d to %d is damaged (%v); it holds no record, so nothing is lost, but the disk changed bytes sessiond wrote", s.path, off, end, err))
				off, writeStart, valid = end, end, end
				continue
			}
			if proof < 0 {
				break // a torn tail: never acknowledged
			}
			if err := sc.quarantine(s, size, off, proof, err); err != nil {
				return err
			}
			// The records of the later writes are intact: read on from
			// the first of them. What the damage held is lost (the
			// acknowledgement record tells how much); the batches of
			// its streams that follow still count.
			clear(sc.pending)
			off, writeStart, valid = proof, proof, proof
			continue
		}
		off += h.Size()
		if h.Type != typeEntry && h.Type != typeMeta {
			valid = off
		}
	}
	// Entries whose commit did not make it were never acknowledged.
	clear(sc.pending)
	sc.reads[s.seq] = valid
	sc.cuts = append(sc.cuts, cut{s: s, size: size, valid: valid})
	return nil
}

// padUntil returns where the frame at off in s ends when it is a Pad that
// ends a block (padAfter), the last record of the write that began at
// writeStart, and its damage lies where a pad holds nothing: its zeros
// (the checksum of its header with zeros still matches) or its checksum
// (its payload is still all zeros, and it names the write it ends).
// Otherwise -1: a record whose type alone was changed to a Pad's has a
// payload that is not zeros, and a pad left in a reused spare by an older
// segment names another write. Only with no batch open: a pad follows a
// write's last commit.
func (sc *scanner) padUntil(w *frame.Window, s *segment, off, writeStart int64) int64 {
	if s.v1 || len(sc.pending) > 0 {
		return -1
	}
	hdr, err := w.At(off, frame.HeaderSize)
	if err != nil {
		return -1
	}
	h, err := frame.ParseHeader(hdr, sc.l.rules)
	end := off + h.Size()
	if err != nil || h.Type != typePad || h.Size() > padBlock/2 || end%padBlock != 0 || off == writeStart {
		return -1
	}
	hdr = bytes.Clone(hdr) // the window's buffer moves on the next read
	p, err := w.At(off+frame.HeaderSize, int(h.Length))
	if err != nil {
		return -1
	}
	if frame.Verify(s.id, hdr, zeros[:h.Length]) || (bytes.Count(p, []byte{0}) == len(p) && h.WriteStart(off) == writeStart) {
		return end
	}
	return -1
}

// cut is where a segment's readable records end, applied once the
// acknowledgement record has been checked (finish).
type cut struct {
	s           *segment
	size, valid int64
}

// finish keeps copies of the damaged segments, then cuts each segment
// after its last complete record and syncs it.
func (sc *scanner) finish() error {
	for _, d := range sc.damages {
		if err := sc.keepCopy(d); err != nil {
			return err
		}
	}
	for _, c := range sc.cuts {
		s := c.s
		if c.valid < c.size {
			if err := s.f.Truncate(c.valid); err != nil {
				return errdefs.FromIO(fmt.Errorf("cut torn tail of journal segment %s at offset %d: %w", s.path, c.valid, err))
			}
			sc.rec.TruncatedBytes += c.size - c.valid
		}
		// Sync even when nothing was cut: a process that crashed before
		// its sync returned may have left what recovery now takes as
		// committed in the page cache only.
		if err := s.f.Sync(); err != nil {
			return errdefs.FromIO(fmt.Errorf("sync journal segment %s: %w", s.path, err))
		}
		s.end = c.valid
		s.entries = sc.counts[s.seq]
	}
	return nil
}

// quarantine notes a damaged segment: finish keeps a copy of it for
// inspection (once the start is known to go on; a refused start changes
// nothing), and recovery reads on past the damage.
func (sc *scanner) quarantine(s *segment, size, bad, proof int64, why error) error {
	sc.damaged = true
	what := fmt.Sprintf("journal segment %s is damaged from byte offset %d (%v) to %d, where an intact later write begins, so this is not a torn tail; the records in the damaged bytes are lost, those after them are read", s.path, bad, why, proof)
	sc.damages = append(sc.damages, damage{s: s, size: size, what: what})
	return nil
}

// damage is a damaged segment to keep a copy of.
type damage struct {
	s    *segment
	size int64
	what string
}

// corruptTempSuffix ends the temp name of a damaged segment's copy.
const corruptTempSuffix = ".tmp"

// keepCopy copies a damaged segment aside, unless an earlier start did.
func (sc *scanner) keepCopy(d damage) error {
	s := d.s
	if kept := sc.keptCopy(s, d.size); kept != "" {
		sc.rec.Corrupt = append(sc.rec.Corrupt, d.what+"; a copy is kept as "+kept)
		return nil
	}
	fs := sc.l.opt.FS
	aside := fmt.Sprintf("%s.corrupt-%d", s.path, time.Now().UnixNano())
	// Through a temp name: a crash midway must not leave a partial copy
	// that reads as the evidence (listSegments removes the temp).
	tmp := filepath.Join(filepath.Dir(aside), "."+filepath.Base(aside)+corruptTempSuffix)
	dst, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = fsys.CopyRange(dst, s.f, 0, d.size)
		if err == nil {
			err = dst.Sync()
		}
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = fs.Rename(tmp, aside)
		}
		if err != nil {
			_ = fs.Remove(tmp)
		}
		if err == nil {
			err = fs.SyncDir(filepath.Dir(aside))
		}
	}
	if err != nil {
		// Going on without the copy would leave no evidence once the
		// segment goes: refuse to start instead.
		return fmt.Errorf("%s; keeping a copy as %s failed, so copy the segment away by hand: %w: %w", d.what, aside, errdefs.ErrCorrupt, errdefs.FromIO(err))
	}
	sc.rec.Corrupt = append(sc.rec.Corrupt, d.what+"; a copy is kept as "+aside)
	return nil
}

// keptCopy finds a copy of s kept aside at an earlier start (same size
// and bytes), "" if none: the damage stays in the segment until it is let
// go, and is found again at each start.
func (sc *scanner) keptCopy(s *segment, size int64) string {
	fs := sc.l.opt.FS
	ents, err := fs.ReadDir(filepath.Dir(s.path))
	if err != nil {
		return ""
	}
	prefix := filepath.Base(s.path) + ".corrupt-"
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(filepath.Dir(s.path), e.Name())
		if same, err := sameContent(fs, p, s.f, size); err == nil && same {
			return p
		}
	}
	return ""
}

func sameContent(fsy fsys.FS, path string, f fsys.File, size int64) (bool, error) {
	g, err := fsy.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer g.Close()
	if fi, err := g.Stat(); err != nil || fi.Size() != size {
		return false, err
	}
	a, b := make([]byte, 1<<16), make([]byte, 1<<16)
	for off := int64(0); off < size; off += int64(len(a)) {
		n := int(min(int64(len(a)), size-off))
		if _, err := f.ReadAt(a[:n], off); err != nil {
			return false, err
		}
		if _, err := g.ReadAt(b[:n], off); err != nil {
			return false, err
		}
		if !bytes.Equal(a[:n], b[:n]) {
			return false, nil
		}
	}
	return true, nil
}

// apply adds the valid frame h at off, or says why it contradicts the
// frames before it.
func (sc *scanner) apply(w *frame.Window, s *segment, h frame.Header, off int64, writeStart *int64) error {
	start := h.WriteStart(off)
	if start != off && start != *writeStart {
		return frame.Error(fmt.Sprintf("frame says its write began at offset %d, the frames before it say %d", start, *writeStart))
	}
	if start == off {
		for _, p := range sc.pending {
			if len(p.entries) > 0 {
				return frame.Error("a new write begins while entries of the previous one lack their commit")
			}
		}
	}
	*writeStart = start
	if h.Type != typeBind && h.Type != typeHeader && h.Type != typePad && h.Length < streamSize {
		return frame.Error(fmt.Sprintf("record of type %d has no stream", h.Type))
	}
	r := record{w: w, s: s, h: h, off: off}
	switch h.Type {
	case typeBind:
		return sc.applyBind(r)
	case typeEntry, typeMeta:
		return sc.applyEntry(r)
	case typeCommit:
		return sc.applyCommit(r)
	case typeCompacted:
		return sc.applyCompacted(r)
	case typePad:
		if r.s.v1 {
			return frame.Error("a pad record in a version 1 segment")
		}
		return nil
	default:
		return frame.Error(fmt.Sprintf("record of type %d after the start of the segment", h.Type))
	}
}

// record is a valid frame being applied: its header h, at off in segment
// s, read through w.
type record struct {
	w   *frame.Window
	s   *segment
	h   frame.Header
	off int64
}

func (r record) payload() ([]byte, error) {
	return r.w.At(r.off+frame.HeaderSize, int(r.h.Length))
}

// applyBind starts the stream a Bind record names; it supersedes the
// transcript's earlier stream.
func (sc *scanner) applyBind(r record) error {
	if int(r.h.Length) > maxJSONSize {
		return frame.Error("bind record too long")
	}
	p, err := r.payload()
	if err != nil {
		return err
	}
	b, err := decodeBind(p)
	if err != nil {
		return err
	}
	if sc.streams[b.Stream] != nil {
		return frame.Error(fmt.Sprintf("stream %d is bound twice", b.Stream))
	}
	e := &epoch{Epoch: Epoch{Key: b.key(), Stream: b.Stream, Base: Fingerprint{b.BaseSize, b.BaseTail}},
		bindSeg: r.s.seq, segs: map[uint64]struct{}{}}
	sc.streams[b.Stream] = e
	sc.l.epochs[e.Key] = e
	return nil
}

// applyEntry adds an entry or meta record to its stream's pending batch,
// which its commit record completes.
func (sc *scanner) applyEntry(r record) error {
	h := r.h
	b, err := r.w.At(r.off+frame.HeaderSize, streamSize)
	if err != nil {
		return err
	}
	id := streamOf(b)
	p := sc.pending[id]
	if p == nil {
		p = &pendingBatch{}
		sc.pending[id] = p
	}
	if h.Type == typeEntry {
		if p.meta != nil {
			return frame.Error("entry after the meta record of its batch")
		}
		p.entries = append(p.entries, Span{Seg: r.s.seq, Off: r.off, Len: int(h.Length) - streamSize})
		return nil
	}
	switch {
	case len(p.entries) == 0:
		return frame.Error("meta record with no entries before it")
	case p.meta != nil:
		return frame.Error("second meta record in one batch")
	case int(h.Length)-streamSize > MaxMeta:
		return frame.Error("meta record over the limit")
	}
	m, err := r.payload()
	if err != nil {
		return err
	}
	p.meta = clone(m[streamSize:])
	return nil
}

// applyCommit completes a stream's pending batch.
func (sc *scanner) applyCommit(r record) error {
	s := r.s
	if r.h.Length != commitSize {
		return frame.Error(fmt.Sprintf("commit payload is %d bytes, not %d", r.h.Length, commitSize))
	}
	b, err := r.payload()
	if err != nil {
		return err
	}
	id, seq, count := decodeCommit(b)
	// A stream's id carries the segment it was bound in. If that
	// segment is here and its Bind was not read, the Bind was in
	// damaged bytes: these entries cannot be given to a transcript,
	// so they do not count as read (the acknowledgement record then
	// tells the loss). A stream bound in a segment already let go
	// was superseded: its records never counted.
	if sc.streams[id] != nil || sc.l.segmentLocked(id>>32) == nil {
		sc.counts[s.seq] += uint64(count)
	}
	p := sc.pending[id]
	n := 0
	if p != nil {
		n = len(p.entries)
	}
	if count != n {
		return frame.Error(fmt.Sprintf("commit counts %d entries, %d precede it", count, n))
	}
	delete(sc.pending, id)
	e := sc.streams[id]
	if e == nil {
		// Bound in a segment already deleted: the stream was
		// superseded and its records do not count.
		return nil
	}
	if seq != e.seq+1 && !(sc.damaged && seq > e.seq) {
		return frame.Error(fmt.Sprintf("commit of batch %d of stream %d follows batch %d", seq, id, e.seq))
	}
	e.seq = seq
	var entries []Span
	var meta []byte
	if p != nil {
		entries, meta = p.entries, p.meta
	}
	e.addBatch(Batch{Seq: seq, Entries: entries, Meta: meta})
	e.Modified = s.mtime
	e.segs[s.seq] = struct{}{}
	e.segs[e.bindSeg] = struct{}{}
	return nil
}

// applyCompacted records a stream's compaction marker.
func (sc *scanner) applyCompacted(r record) error {
	if r.h.Length != markerSize {
		return frame.Error(fmt.Sprintf("compacted payload is %d bytes, not %d", r.h.Length, markerSize))
	}
	b, err := r.payload()
	if err != nil {
		return err
	}
	id, m := decodeMarker(b)
	if m.Size < 0 {
		return frame.Error("compacted marker has a negative size")
	}
	if e := sc.streams[id]; e != nil {
		e.Compacted = &m
		e.Modified = r.s.mtime
		e.segs[r.s.seq] = struct{}{}
	}
	return nil
}
