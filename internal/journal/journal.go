package journal

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// Header is what a journal generation records about itself in its first
// record.
type Header struct {
	Generation uint64 // random, non-zero, seeds record checksums
	ProjectKey string
	SessionID  string
	Subpath    string // "" for the main transcript
	BaseSize   int64  // canonical file size when this generation began
	BaseTail   uint32 // fingerprint of the canonical file's tail then (opaque to the journal)
}

// Span is where an entry's payload lies in the journal file.
type Span struct {
	Off int64
	Len int
}

// Batch is one committed client batch.
type Batch struct {
	Seq     uint64
	Entries []Span
	// Meta is the batch's Meta record (what the caller said about the
	// batch as a whole, opaque to the journal), nil when it had none.
	Meta []byte
}

// Marker is the fingerprint of the canonical file a compaction is about to
// install.
type Marker struct {
	Size int64
	Tail uint32
}

// Recovery is what Open found in a journal.
type Recovery struct {
	Header  Header
	Batches []Batch // committed batches, in order
	// Compacted is the last Compacted marker, nil if none. A marker is
	// normally the last record a generation gets before it is replaced;
	// batches after it are still listed in Batches.
	Compacted      *Marker
	TruncatedBytes int64 // bytes of torn tail removed
	End            int64 // offset where the next record goes
}

// Options tune a journal.
type Options struct {
	// MaxRecord is the largest record payload, in bytes, that may be
	// written or read back; 0 means DefaultMaxRecord.
	MaxRecord int
	// DurableEnd, for Open, is where the last write this process saw
	// synced ended in generation DurableGeneration, as DurableEnd reported
	// it after a failure. When the file is that generation and longer,
	// Open treats everything past DurableEnd as a torn tail and cuts it:
	// those bytes were never acknowledged, and after a failed sync they
	// may sit in the page cache only (Linux marks pages whose writeback
	// failed clean, so no later sync writes them). Appending after them
	// would leave a hole on disk, followed by valid records, which
	// recovery after a power loss would have to call corruption.
	DurableEnd        int64
	DurableGeneration uint64
	// NoFolderSync, for Open, leaves the sync of the journal's folder to
	// the caller, who must do it before relying on the journal's name:
	// recovery checks a thousand journals of one folder and syncs it once.
	NoFolderSync bool
}

func (o Options) maxRecord() (int, error) {
	switch {
	case o.MaxRecord == 0:
		return DefaultMaxRecord, nil
	case o.MaxRecord < commitPayloadSize || o.MaxRecord > frame.MaxRecordLimit:
		return 0, fmt.Errorf("journal MaxRecord %d is outside %d..%d: %w",
			o.MaxRecord, commitPayloadSize, frame.MaxRecordLimit, errdefs.ErrInvalidArgument)
	}
	return o.MaxRecord, nil
}

// Journal is one open journal generation, positioned for appending. It
// belongs to one goroutine (the session writer); it is not safe for
// concurrent use. Readers of an older generation use ReadEntryAt on their
// own handle.
type Journal struct {
	f         fsys.File // nil once closed
	path      string
	hdr       Header
	maxRecord int
	end       int64  // where the next frame goes; the file offset is kept there
	seq       uint64 // seq of the last committed batch
	// failed is sticky: after a failed write or sync the file's contents
	// past the last successful sync are unknown (the kernel may have dropped
	// the dirty pages), so the only safe next step is Open from disk.
	failed  error
	scratch []byte
}

// maxKeptScratch bounds the encode buffer a Journal keeps between appends:
// one 33 MiB entry should not pin 33 MiB per idle session.
const maxKeptScratch = 1 << 20

// Create writes a new journal holding only h (h.Generation 0 means: pick a
// random one) under a temp name in path's folder, syncs it, renames it over
// path (atomically replacing an older generation), syncs the folder, and
// returns it open for appending. The folder must exist.
func Create(fs fsys.FS, path string, h Header, opt Options) (*Journal, error) {
	maxRecord, err := opt.maxRecord()
	if err != nil {
		return nil, err
	}
	for h.Generation == 0 {
		h.Generation = randomUint64()
	}
	payload, err := encodeHeader(h)
	if err != nil {
		return nil, fmt.Errorf("create journal %s: %w", path, err)
	}
	if len(payload) > maxRecord {
		return nil, fmt.Errorf("create journal %s: header is %d bytes, over the %d-byte record limit: %w",
			path, len(payload), maxRecord, errdefs.ErrTooLarge)
	}
	hdr := frame.Append(nil, typeHeader, payload, 0, 0)

	// ".tmp-…" never ends in .wal or .jsonl, so neither recovery nor
	// transcript readers mistake a leftover temp file for a real one.
	tmpName := fmt.Sprintf("%s.tmp-%016x", filepath.Base(path), randomUint64())
	err = fsys.WriteFileAtomic(fs, path, tmpName, 0o600, func(w io.Writer) error {
		_, err := w.Write(hdr)
		return err
	})
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("create journal %s: %w", path, err))
	}
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("reopen new journal %s: %w", path, err))
	}
	end := int64(len(hdr))
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		f.Close()
		return nil, errdefs.FromIO(fmt.Errorf("reopen new journal %s: %w", path, err))
	}
	return &Journal{f: f, path: path, hdr: h, maxRecord: maxRecord, end: end}, nil
}

// randomUint64 reads crypto/rand, which cannot fail since Go 1.24 (it
// crashes the program instead).
func randomUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// usable is the gate of every operation that touches the file.
func (j *Journal) usable() error {
	if j.f == nil {
		return fmt.Errorf("journal %s: %w", j.path, os.ErrClosed)
	}
	if j.failed != nil {
		return fmt.Errorf("journal %s failed earlier and must be reopened from disk: %w", j.path, j.failed)
	}
	return nil
}

// Append encodes, for each batch in order, one Entry record per entry then
// one Commit record (seq = previous seq + 1, from 1 in each generation),
// writes all of it with one Write at End and syncs once. It returns the spans
// of every entry, batch by batch. An entry over the record limit fails the
// call before anything is written; a failed write or sync fails the journal
// for good (see Journal).
func (j *Journal) Append(batches [][][]byte) ([][]Span, error) {
	return j.AppendMeta(batches, nil)
}

// AppendMeta is Append with a Meta record for each batch whose metas[i] is
// not nil (metas may be nil or shorter than batches). A Meta record goes in
// the same write as its batch's entries, right before their Commit, so it
// is durable exactly when the batch is; recovery returns it as Batch.Meta.
// A batch with a Meta record must have at least one entry.
func (j *Journal) AppendMeta(batches [][][]byte, metas [][]byte) ([][]Span, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	if len(batches) == 0 {
		return nil, nil
	}
	meta := func(i int) []byte {
		if i < len(metas) {
			return metas[i]
		}
		return nil
	}
	var total int64
	entries := 0
	for i, b := range batches {
		for k, e := range b {
			if len(e) > j.maxRecord {
				return nil, fmt.Errorf("journal %s: entry %d of batch %d is %d bytes, over the %d-byte record limit: %w",
					j.path, k, i, len(e), j.maxRecord, errdefs.ErrTooLarge)
			}
			total += frame.Size(len(e))
		}
		entries += len(b)
		total += frame.Size(commitPayloadSize)
		if m := meta(i); m != nil {
			if len(m) > MaxMeta || len(b) == 0 {
				return nil, fmt.Errorf("journal %s: meta record of batch %d is %d bytes for %d entries (at most %d bytes, at least one entry): %w",
					j.path, i, len(m), len(b), MaxMeta, errdefs.ErrInvalidArgument)
			}
			total += frame.Size(len(m))
		}
	}
	// Every frame is at least 16 bytes, so this also keeps each batch's
	// entry count within the Commit record's uint32.
	if total > frame.MaxWrite {
		return nil, fmt.Errorf("journal %s: %d bytes in one append, over the %d-byte limit of a write: %w",
			j.path, total, frame.MaxWrite, errdefs.ErrTooLarge)
	}

	buf := j.scratch[:0]
	spans := make([][]Span, len(batches))
	all := make([]Span, 0, entries)
	seq := j.seq
	gen := j.hdr.Generation
	for i, b := range batches {
		first := len(all)
		for _, e := range b {
			all = append(all, Span{Off: j.end + int64(len(buf)) + frame.HeaderSize, Len: len(e)})
			buf = frame.Append(buf, typeEntry, e, gen, int64(len(buf)))
		}
		spans[i] = all[first:len(all):len(all)]
		if m := meta(i); m != nil {
			buf = frame.Append(buf, typeMeta, m, gen, int64(len(buf)))
		}
		seq++
		c := encodeCommit(seq, len(b))
		buf = frame.Append(buf, typeCommit, c[:], gen, int64(len(buf)))
	}
	if err := j.write(buf, "append"); err != nil {
		return nil, err
	}
	j.seq = seq
	return spans, nil
}

// MarkCompacted appends a Compacted record carrying m and syncs it.
func (j *Journal) MarkCompacted(m Marker) error {
	if err := j.usable(); err != nil {
		return err
	}
	if m.Size < 0 {
		return fmt.Errorf("journal %s: compacted marker size %d is negative: %w", j.path, m.Size, errdefs.ErrInvalidArgument)
	}
	p := encodeMarker(m)
	return j.write(frame.Append(j.scratch[:0], typeCompacted, p[:], j.hdr.Generation, 0), "mark compacted")
}

// write puts b at End in one Write, syncs, and advances End; any failure
// fails the journal.
func (j *Journal) write(b []byte, what string) error {
	if cap(b) <= maxKeptScratch {
		j.scratch = b[:0]
	} else {
		j.scratch = nil
	}
	if err := frame.WriteSynced(j.f, b, j.end); err != nil {
		// Failed for good, even if WriteSynced's cut worked (the file's
		// offset is past it); DurableEnd tells the reopen where to cut
		// should the cut have failed.
		j.failed = errdefs.FromIO(fmt.Errorf("journal %s: %s: %w", j.path, what, err))
		return j.failed
	}
	j.end += int64(len(b))
	return nil
}

// Err returns the failure that made the journal unusable, or nil.
func (j *Journal) Err() error { return j.failed }

// DurableEnd returns the journal's generation and the offset where its
// last successfully synced write ended. After a failure, pass them as
// Options.DurableEnd and DurableGeneration to the Open that resumes it.
func (j *Journal) DurableEnd() (generation uint64, end int64) { return j.hdr.Generation, j.end }

// ReadEntry returns the payload at s, checked against its checksum. buf is
// used if it is large enough.
func (j *Journal) ReadEntry(s Span, buf []byte) ([]byte, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	if s.Len < 0 || s.Len > j.maxRecord || s.Off < frame.HeaderSize || s.Off+int64(s.Len) > j.end {
		return nil, fmt.Errorf("journal %s: span %d+%d is outside the journal (end %d): %w",
			j.path, s.Off, s.Len, j.end, errdefs.ErrInvalidArgument)
	}
	h, payload, err := readEntry(j.f, s, buf)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	if !frame.Verify(j.hdr.Generation, h[:], payload) {
		return nil, fmt.Errorf("journal %s: entry at offset %d fails its checksum: %w", j.path, s.Off, errdefs.ErrCorrupt)
	}
	return payload, nil
}

// readChunk is how much of the file ReadEntries reads at a time.
const readChunk = 1 << 20

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// ReadEntries calls fn with the payload of each span in turn, each checked
// against its checksum, reading the file in large sequential chunks rather
// than one read per entry. Spans must be in file order, as Open and Append
// return them. The payload is valid only during the call. An error from fn
// stops the walk and is returned as is.
func (j *Journal) ReadEntries(spans []Span, fn func(i int, payload []byte) error) error {
	if err := j.usable(); err != nil {
		return err
	}
	n := int(min(j.end, readChunk))
	var w *frame.Window
	if n == readChunk {
		// Replay and compaction read every journal of a thousand
		// sessions: the chunk buffers are shared, not garbage.
		bp := chunkPool.Get().(*[]byte)
		defer chunkPool.Put(bp)
		w = frame.NewWindowBuf(j.f, j.end, *bp)
	} else {
		w = frame.NewWindow(j.f, j.end, n)
	}
	var big []byte
	last := int64(0)
	for i, s := range spans {
		if s.Len < 0 || s.Len > j.maxRecord || s.Off < frame.HeaderSize || s.Off+int64(s.Len) > j.end || s.Off < last {
			return fmt.Errorf("journal %s: span %d+%d is outside the journal (end %d) or out of order: %w",
				j.path, s.Off, s.Len, j.end, errdefs.ErrInvalidArgument)
		}
		last = s.Off + int64(s.Len)
		var hdr, payload []byte
		if n := frame.HeaderSize + s.Len; n <= w.BufSize() {
			b, err := w.At(s.Off-frame.HeaderSize, n)
			if err != nil {
				return fmt.Errorf("journal %s: read %d bytes at offset %d: %w", j.path, n, s.Off-frame.HeaderSize, errdefs.FromIO(err))
			}
			hdr, payload = b[:frame.HeaderSize], b[frame.HeaderSize:]
			h, err := frame.ParseHeader(hdr, rules(frame.MaxRecordLimit))
			if err != nil || h.Type != typeEntry || int64(h.Length) != int64(s.Len) {
				return fmt.Errorf("journal %s: no %d-byte entry record at offset %d (wrong file or span?): %w",
					j.path, s.Len, s.Off, errdefs.ErrInvalidArgument)
			}
		} else {
			h, p, err := readEntry(j.f, s, big)
			if err != nil {
				return fmt.Errorf("journal %s: %w", j.path, err)
			}
			hdr, payload, big = h[:], p, p[:0]
		}
		if !frame.Verify(j.hdr.Generation, hdr, payload) {
			return fmt.Errorf("journal %s: entry at offset %d fails its checksum: %w", j.path, s.Off, errdefs.ErrCorrupt)
		}
		if err := fn(i, payload); err != nil {
			return err
		}
	}
	return nil
}

// ReadEntryAt returns the payload at s from r, a journal file of any
// generation. It checks that s points at an Entry record of that length, but
// not the checksum, which needs the generation: spans come from Append or
// Open, which checked it. buf is used if it is large enough.
func ReadEntryAt(r io.ReaderAt, s Span, buf []byte) ([]byte, error) {
	if s.Len < 0 || s.Off < frame.HeaderSize {
		return nil, fmt.Errorf("journal span %d+%d is not an entry's span: %w", s.Off, s.Len, errdefs.ErrInvalidArgument)
	}
	_, payload, err := readEntry(r, s, buf)
	return payload, err
}

func readEntry(r io.ReaderAt, s Span, buf []byte) (hdr [frame.HeaderSize]byte, payload []byte, err error) {
	if err := frame.ReadFull(r, hdr[:], s.Off-frame.HeaderSize); err != nil {
		return hdr, nil, err
	}
	h, err := frame.ParseHeader(hdr[:], rules(frame.MaxRecordLimit))
	if err != nil || h.Type != typeEntry || int64(h.Length) != int64(s.Len) {
		return hdr, nil, fmt.Errorf("no %d-byte entry record at offset %d (wrong file or span?): %w",
			s.Len, s.Off, errdefs.ErrInvalidArgument)
	}
	if cap(buf) >= s.Len {
		payload = buf[:s.Len]
	} else {
		payload = make([]byte, s.Len)
	}
	if err := frame.ReadFull(r, payload, s.Off); err != nil {
		return hdr, nil, err
	}
	return hdr, payload, nil
}

// Header returns the generation's header record.
func (j *Journal) Header() Header { return j.hdr }

// Size is the journal's length, which is where the next record goes.
func (j *Journal) Size() int64 { return j.end }

// Path is the journal's file name.
func (j *Journal) Path() string { return j.path }

// Close releases the file. A failed journal still needs Close.
func (j *Journal) Close() error {
	if j.f == nil {
		return fmt.Errorf("journal %s: %w", j.path, os.ErrClosed)
	}
	err := j.f.Close()
	j.f = nil
	if err != nil {
		return errdefs.FromIO(fmt.Errorf("close journal %s: %w", j.path, err))
	}
	return nil
}
