package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/trash"
)

// view calls fn with a reader over key's whole content: the canonical
// file followed by the journaled entries, as they will be once compacted.
// A session without a writer or journal is read straight from its file, so
// checking thousands of old sessions starts no writers.
func (m *Manager) view(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	if logged := m.logs.exists(key); !logged && !m.IsActive(key) {
		path := m.cfg.Layout.TranscriptPath(key)
		f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return m.notFound(key)
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
		}
		defer f.Close()
		return fn(f, 0)
	}
	// A writer opened for this (a journal left behind) retires after it:
	// CheckAll views every session.
	var sn *snapshot
	err := m.doRetire(ctx, key, retireIfOpened, func(st *state) error {
		var err error
		sn, err = st.snapshot()
		return err
	})
	if err != nil {
		return err
	}
	defer sn.close()
	if !sn.exists {
		return m.notFound(key)
	}
	return fn(sn.reader(), len(sn.pending))
}

// reader streams the snapshot's content as one JSONL file.
func (sn *snapshot) reader() io.Reader {
	var parts []io.Reader
	if sn.canon != nil {
		parts = append(parts, io.NewSectionReader(sn.canon, 0, sn.canonSize))
		if !sn.canonEndsNL && len(sn.pending) > 0 {
			parts = append(parts, strings.NewReader("\n"))
		}
	}
	if len(sn.pending) > 0 {
		parts = append(parts, &pendingReader{sn: sn})
	}
	return io.MultiReader(parts...)
}

type pendingReader struct {
	sn  *snapshot
	i   int
	buf []byte
	cur []byte
}

func readPending(sn *snapshot, i int) ([]byte, error) {
	line, err := sn.journal.entry(sn.pending[i])
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", errdefs.FromIO(err))
	}
	return line, nil
}

func (p *pendingReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.i >= len(p.sn.pending) {
			return 0, io.EOF
		}
		line, err := readPending(p.sn, p.i)
		if err != nil {
			return 0, err
		}
		p.buf = append(append(p.buf[:0], line...), '\n')
		p.cur = p.buf
		p.i++
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

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

// sendBytes bounds what a reader gathers before handing entries on: just
// under 1 MiB with the message's framing, so the gRPC message of a batch
// fits the largest buffer size grpc-go pools and reuses.
const sendBytes = 1<<20 - 16<<10

// bigLine is the size from which a line is sent on its own, straight
// from the scanner's buffer: copying it into a batch would double the
// memory a huge line costs (a 12 MB line exists in real transcripts).
const bigLine = 256 << 10

// snapshot is a consistent view of a session taken on its writer
// goroutine. It holds its own file handles: compaction replaces files by
// rename, so the handles keep seeing the content of the moment, and the
// writer never waits for a slow reader.
type snapshot struct {
	canon        fsys.File
	canonSize    int64
	canonEntries uint64
	canonEndsNL  bool
	journal      logReader
	pending      []span
	foreign      []bool // for each pending entry, when any is foreign
	lineage      uint64
	changed      <-chan struct{}
	exists       bool
}

func (sn *snapshot) close() {
	if sn.canon != nil {
		sn.canon.Close()
	}
	if sn.journal != nil {
		sn.journal.close()
	}
}

func (st *state) snapshot() (*snapshot, error) {
	sn := &snapshot{
		canonSize: st.canon.size, canonEntries: st.canonEntries, canonEndsNL: st.canonEndsNL,
		lineage: st.lineage, changed: st.changed, exists: st.exists(),
	}
	if st.canonExists {
		f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
		}
		sn.canon = f
	}
	if len(st.pending) > 0 {
		r, err := st.j.reader()
		if err != nil {
			sn.close()
			return nil, err
		}
		sn.journal = r
		sn.pending = make([]span, len(st.pending))
		for i, p := range st.pending {
			sn.pending[i] = p.span
			if p.foreign {
				if sn.foreign == nil {
					sn.foreign = make([]bool, len(st.pending))
				}
				sn.foreign[i] = true
			}
		}
	}
	return sn, nil
}

// ReadOptions select what Read serves.
type ReadOptions struct {
	From   uint64 // first index
	Tail   uint32 // when > 0, start at the last Tail entries instead
	Follow bool   // keep serving new entries until ctx ends
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

// Read serves key's entries to send, in order, in groups. The entries'
// Data are only valid until send returns (their memory is reused). With Follow it
// then waits for new entries and serves them as they are acknowledged,
// until ctx ends (which is then not an error).
func (m *Manager) Read(ctx context.Context, key layout.Key, opt ReadOptions, send func([]Entry) error) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	var held *session
	defer func() {
		if held != nil {
			m.reg.unfollow(held)
		}
	}()
	r := reader{next: opt.From, send: send}
	first := true
	for {
		if opt.Follow {
			// Holding a reference keeps the writer from retiring while
			// someone follows it, so it is not reopened (and its file
			// rescanned) over and over.
			if held != nil && !m.reg.isLive(held) {
				m.reg.unfollow(held)
				held = nil
			}
			if held == nil {
				s, err := m.reg.follow(key)
				if err != nil {
					return followEnded(key, err)
				}
				held = s
			}
		}
		var sn *snapshot
		err := m.do(ctx, key, func(st *state) error {
			var err error
			sn, err = st.snapshot()
			return err
		})
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
			if !sn.exists {
				sn.close()
				return m.notFound(key)
			}
			if opt.Tail > 0 {
				total := sn.canonEntries + uint64(len(sn.pending))
				r.next = 0
				if total > uint64(opt.Tail) {
					r.next = total - uint64(opt.Tail)
				}
			}
			first = false
		}
		err = r.serve(sn)
		sn.close()
		if err != nil {
			return err
		}
		if !opt.Follow {
			return nil
		}
		select {
		case <-sn.changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// reader remembers where the last served entry ended in the canonical
// file, so following a growing session never rescans it from the start
// while the lines already served stay where they were.
type reader struct {
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
func (r *reader) emit(idx uint64, data []byte, normalized bool) error {
	if len(data) >= bigLine {
		if err := r.flush(); err != nil {
			return err
		}
		return r.send([]Entry{{Index: idx, Data: data, Normalized: normalized}})
	}
	if len(r.arena)+len(data) > sendBytes {
		if err := r.flush(); err != nil {
			return err
		}
	}
	r.arena = append(r.arena, data...)
	r.idx = append(r.idx, idx)
	r.ends = append(r.ends, len(r.arena))
	r.norm = append(r.norm, normalized)
	return nil
}

func (r *reader) flush() error {
	if len(r.idx) == 0 {
		return nil
	}
	// Entries are cut from the arena only now: appending to it may have
	// moved it.
	r.batch = r.batch[:0]
	start := 0
	for i, end := range r.ends {
		r.batch = append(r.batch, Entry{Index: r.idx[i], Data: r.arena[start:end:end], Normalized: r.norm[i]})
		start = end
	}
	err := r.send(r.batch)
	r.arena, r.idx, r.ends, r.norm = r.arena[:0], r.idx[:0], r.ends[:0], r.norm[:0]
	return err
}

func (r *reader) serve(sn *snapshot) error {
	if r.next < sn.canonEntries && sn.canon != nil {
		idx, off := uint64(0), int64(0)
		switch {
		case r.lineage == sn.lineage && r.hintIdx == r.next && r.hintOff <= sn.canonSize:
			idx, off = r.hintIdx, r.hintOff
		case r.next > sn.canonEntries-r.next:
			// Nearer the end than the start (a tail, a follower resuming
			// late): count the lines back from the end instead of reading
			// the whole file up to them.
			o, err := lineStartFromEnd(sn.canon, sn.canonSize, sn.canonEndsNL, sn.canonEntries-r.next)
			if err != nil {
				return fmt.Errorf("read transcript: %w", errdefs.FromIO(err))
			}
			idx, off = r.next, o
		}
		sc := transcript.NewLineScannerAt(io.NewSectionReader(sn.canon, off, sn.canonSize-off))
		for idx < sn.canonEntries && sc.Scan() {
			if idx >= r.next {
				if err := r.emit(idx, sc.Line(), false); err != nil {
					return err
				}
			}
			idx++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read transcript: %w", errdefs.FromIO(err))
		}
		r.next = idx
	}
	// Where the first pending entry will sit once compacted.
	off := sn.canonSize
	if !sn.canonEndsNL {
		off++
	}
	for i, sp := range sn.pending {
		idx := sn.canonEntries + uint64(i)
		if idx >= r.next {
			line, err := sn.journal.entry(sp)
			if err != nil {
				return fmt.Errorf("read journal: %w", errdefs.FromIO(err))
			}
			if err := r.emit(idx, line, sn.foreign == nil || !sn.foreign[i]); err != nil {
				return err
			}
			r.next = idx + 1
		}
		off += int64(sp.n) + 1
	}
	if r.next >= sn.canonEntries {
		r.lineage, r.hintIdx, r.hintOff = sn.lineage, sn.canonEntries+uint64(len(sn.pending)), off
	}
	if r.next < sn.canonEntries+uint64(len(sn.pending)) {
		r.next = sn.canonEntries + uint64(len(sn.pending))
	}
	return r.flush()
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
