// Package reader serves a session's entries, from its canonical file and
// the journal's pending entries, to readers and followers. The writers
// (package writer) only take the snapshot it reads, through Source.
package reader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/trash"
)

// Reader serves the sessions of one Source.
type Reader struct {
	src Source
}

// New returns a Reader over src.
func New(src Source) *Reader { return &Reader{src: src} }

// Entry is one line served to a reader.
type Entry struct {
	Index uint64
	Data  []byte
	// Normalized: Data is a line this sessiond's Append validated
	// (transcript.Normalize: one JSON object, valid UTF-8), served from
	// the journal before its compaction. False for lines read from the file,
	// which another program may have written, and for lines another
	// program appended that the journal rescued.
	Normalized bool
}

// ReadOptions select what Read serves.
type ReadOptions struct {
	From   uint64 // first index
	Tail   uint32 // when > 0, start at the last Tail entries instead
	Follow bool   // keep serving new entries until ctx ends
}

// sendBytes bounds what a reader gathers before handing entries on: just
// under 1 MiB with the message's framing, so the gRPC message of a batch
// fits the largest buffer size grpc-go pools and reuses.
const sendBytes = 1<<20 - 16<<10

// bigLine is the size from which a line is sent on its own, straight
// from the scanner's buffer: copying it into a batch would double the
// memory a huge line costs (a 12 MB line exists in real transcripts).
const bigLine = 256 << 10

// arenas holds ReadLines' arenas (none grows past sendBytes plus a line
// under bigLine).
var arenas = sync.Pool{New: func() any { return new([]byte) }}

// absent says whether key certainly does not exist: a disk that cannot
// tell counts as present, so that the read runs and reports the disk's
// error instead of "not found".
func (rd *Reader) absent(key layout.Key) bool {
	ok, err := rd.src.Exists(key)
	return !ok && err == nil
}

// followEnded says why a follow cannot go on: the session being deleted
// under it is the end of what it followed, not a daemon that went away.
func followEnded(key layout.Key, err error) error {
	var busy *trash.BusyError
	if errors.As(err, &busy) && busy.Why == "deleted" {
		return fmt.Errorf("session %s was deleted while it was followed (sessionctl delete, or the SDK's deleteSession): %w", key, errdefs.ErrNotFound)
	}
	return err
}

// View calls fn with a reader over key's whole content: the canonical
// file followed by the journaled entries, as they will be once compacted,
// and how many of those there are.
func (rd *Reader) View(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error {
	if rd.absent(key) {
		return rd.src.NotFound(key)
	}
	sn, err := rd.src.Snapshot(ctx, key, Passing)
	if err != nil {
		return err
	}
	defer sn.Close()
	if !sn.Exists {
		return rd.src.NotFound(key)
	}
	return fn(sn.Reader(), sn.pending())
}

// Read serves key's entries to send, in order, in groups. The entries'
// Data are only valid until send returns (their memory is reused). With Follow it
// then waits for new entries and serves them as they are acknowledged,
// until ctx ends (which is then not an error).
func (rd *Reader) Read(ctx context.Context, key layout.Key, opt ReadOptions, send func([]Entry) error) error {
	if rd.absent(key) {
		return rd.src.NotFound(key)
	}
	var held Hold
	defer func() {
		if held != nil {
			held.Release()
		}
	}()
	b := batcher{next: opt.From, send: send}
	first := true
	for {
		if opt.Follow {
			// Holding the writer keeps it from retiring while someone
			// follows it, so it is not reopened (and its file rescanned)
			// over and over.
			if held != nil && !held.Live() {
				held.Release()
				held = nil
			}
			if held == nil {
				h, err := rd.src.Hold(key)
				if err != nil {
					return followEnded(key, err)
				}
				held = h
			}
		}
		sn, err := rd.src.Snapshot(ctx, key, Live)
		if err != nil {
			if opt.Follow && ctx.Err() != nil {
				return nil
			}
			if opt.Follow {
				return followEnded(key, err)
			}
			return err
		}
		if first {
			if !sn.Exists {
				sn.Close()
				return rd.src.NotFound(key)
			}
			if opt.Tail > 0 {
				total := sn.CanonEntries + uint64(sn.pending())
				b.next = 0
				if total > uint64(opt.Tail) {
					b.next = total - uint64(opt.Tail)
				}
			}
			first = false
		}
		err = b.serve(sn)
		sn.Close()
		if err != nil {
			return err
		}
		if !opt.Follow {
			return nil
		}
		select {
		case <-sn.Changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// ReadLines serves key's entries from index from, in order, as Read does
// without Follow, and says which lineage the content it served has: the
// lines before from are still where they were, byte for byte, when it
// is under (the lineage changes whenever they may have moved: a repair,
// lines another program wrote, a writer opening the file). A caller that
// read them before under that lineage need not read them again: it passes
// it as under, and when the content's lineage is another (or 0: no
// writer was open and the file was read as it is, with no such promise),
// every entry is served from index 0 instead, for the caller to check
// them. Under 0 serves from from, whatever the lineage. total is the
// number of entries the transcript holds. A session without a writer or journal is read
// straight from its file, so reading every transcript (the mirror's scan
// at start) starts no writers. The entries handed to send are valid only
// during the call: their memory is used again.
func (rd *Reader) ReadLines(ctx context.Context, key layout.Key, from, under uint64, send func([]Entry) error) (lineage, total uint64, err error) {
	if rd.absent(key) {
		return 0, 0, rd.src.NotFound(key)
	}
	b := batcher{next: from, send: send}
	// The batch is gathered in a reused arena: the mirror reads a few
	// entries at a time, a new arena each time cost more than the reads.
	ap := arenas.Get().(*[]byte)
	b.arena = (*ap)[:0]
	defer func() {
		*ap = b.arena[:0]
		arenas.Put(ap)
	}()
	sn, err := rd.src.Snapshot(ctx, key, Passing)
	if err != nil {
		return 0, 0, err
	}
	defer sn.Close()
	if sn.Direct {
		if under != 0 {
			from = 0 // read as it is: no lineage vouches for what came before
		}
		sc := transcript.NewLineScannerAt(sn.Canon)
		var idx uint64
		for ; sc.Scan(); idx++ {
			if idx >= from {
				if err := b.emit(idx, sc.Line(), false); err != nil {
					return 0, 0, err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", sn.Canon.Name(), errdefs.FromIO(err))
		}
		return 0, idx, b.flush()
	}
	if !sn.Exists {
		return 0, 0, rd.src.NotFound(key)
	}
	if under != 0 && under != sn.Lineage {
		b.next = 0 // the lines before from may have moved since
	}
	if err := b.serve(sn); err != nil {
		return 0, 0, err
	}
	return sn.Lineage, sn.CanonEntries + uint64(sn.pending()), nil
}

// batcher gathers entries into batches for send, and remembers where the
// last served entry ended in the canonical file, so following a growing
// session never rescans it from the start while the lines already served
// stay where they were.
type batcher struct {
	next    uint64
	lineage uint64
	hintIdx uint64
	hintOff int64
	send    func([]Entry) error
	// The batch being gathered: its lines back to back in arena, entry i
	// ending at ends[i] with index idx[i] (Entry.Normalized: norm[i]).
	arena []byte
	idx   []uint64
	ends  []int
	norm  []bool
	batch []Entry
}

// emit hands on the entry at idx. data is only valid during the call (it
// may be the scanner's buffer): small lines are copied into the batch's
// arena, which is reused from batch to batch; a big line goes out alone,
// uncopied. Both rely on send being done with a batch when it returns
// (the server's send marshals the message before Send returns).
func (b *batcher) emit(idx uint64, data []byte, normalized bool) error {
	if len(data) >= bigLine {
		if err := b.flush(); err != nil {
			return err
		}
		return b.send([]Entry{{Index: idx, Data: data, Normalized: normalized}})
	}
	if len(b.arena)+len(data) > sendBytes {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.arena = append(b.arena, data...)
	b.idx = append(b.idx, idx)
	b.ends = append(b.ends, len(b.arena))
	b.norm = append(b.norm, normalized)
	return nil
}

func (b *batcher) flush() error {
	if len(b.idx) == 0 {
		return nil
	}
	// Entries are cut from the arena only now: appending to it may have
	// moved it.
	b.batch = b.batch[:0]
	start := 0
	for i, end := range b.ends {
		b.batch = append(b.batch, Entry{Index: b.idx[i], Data: b.arena[start:end:end], Normalized: b.norm[i]})
		start = end
	}
	err := b.send(b.batch)
	b.arena, b.idx, b.ends, b.norm = b.arena[:0], b.idx[:0], b.ends[:0], b.norm[:0]
	return err
}

func (b *batcher) serve(sn *Snapshot) error {
	if b.next < sn.CanonEntries && sn.Canon != nil {
		idx, off := uint64(0), int64(0)
		switch {
		case b.lineage == sn.Lineage && b.hintIdx == b.next && b.hintOff <= sn.CanonSize:
			idx, off = b.hintIdx, b.hintOff
		case b.next > sn.CanonEntries-b.next:
			// Nearer the end than the start (a tail, a follower resuming
			// late): count the lines back from the end instead of reading
			// the whole file up to them.
			o, err := lineStartFromEnd(sn.Canon, sn.CanonSize, sn.CanonEndsNL, sn.CanonEntries-b.next)
			if err != nil {
				return fmt.Errorf("read transcript: %w", errdefs.FromIO(err))
			}
			idx, off = b.next, o
		}
		sc := transcript.NewLineScannerAt(io.NewSectionReader(sn.Canon, off, sn.CanonSize-off))
		for idx < sn.CanonEntries && sc.Scan() {
			if idx >= b.next {
				if err := b.emit(idx, sc.Line(), false); err != nil {
					return err
				}
			}
			idx++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read transcript: %w", errdefs.FromIO(err))
		}
		b.next = idx
	}
	// Where the first pending entry will sit once compacted.
	off := sn.CanonSize
	if !sn.CanonEndsNL {
		off++
	}
	n := sn.pending()
	for i := 0; i < n; i++ {
		idx := sn.CanonEntries + uint64(i)
		if idx >= b.next {
			line, err := readPending(sn.Pending, i)
			if err != nil {
				return err
			}
			if err := b.emit(idx, line, !sn.Pending.Foreign(i)); err != nil {
				return err
			}
			b.next = idx + 1
		}
		off += int64(sn.Pending.Size(i)) + 1
	}
	if b.next >= sn.CanonEntries {
		b.lineage, b.hintIdx, b.hintOff = sn.Lineage, sn.CanonEntries+uint64(n), off
	}
	if b.next < sn.CanonEntries+uint64(n) {
		b.next = sn.CanonEntries + uint64(n)
	}
	return b.flush()
}

// backChunk is what lineStartFromEnd reads at a time.
const backChunk = 64 << 10

// lineStartFromEnd returns where, in the first size bytes of f, the k-th
// line from the end starts (k >= 1, and at most the number of lines; k = 1
// is the last line), counting as the canonical scan does: every '\n' ends
// a line, and the last line may lack one (endsNL false). A file shorter
// than size is an error: the snapshot said how long it is.
func lineStartFromEnd(f io.ReaderAt, size int64, endsNL bool, k uint64) (int64, error) {
	// The start we want follows the (k+1)-th '\n' from the end, or the
	// k-th when the last line has none; the file's start when there are
	// not that many.
	want := k
	if endsNL {
		want++
	}
	buf := make([]byte, min(size, backChunk))
	for end := size; end > 0; {
		start := max(0, end-backChunk)
		n, err := f.ReadAt(buf[:end-start], start)
		if n < int(end-start) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read back from %d: %w", end, err)
		}
		chunk := buf[:n]
		for i := len(chunk); ; {
			j := bytes.LastIndexByte(chunk[:i], '\n')
			if j < 0 {
				break
			}
			if want--; want == 0 {
				return start + int64(j) + 1, nil
			}
			i = j
		}
		end = start
	}
	return 0, nil
}
