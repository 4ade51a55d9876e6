package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// windowSize is the read buffer of a scan: the only memory Open needs
// beyond the spans it returns. It must hold a whole Header payload.
const windowSize = 256 << 10

// Open reads and checks the whole journal at path, cuts a torn tail back to
// the end of the last valid Header, Commit or Compacted record, syncs, and
// returns the journal open for appending at Recovery.End. A journal damaged
// anywhere but its tail is moved to "<path>.corrupt-<unix-nanos>" and the
// error wraps errdefs.ErrCorrupt (see the package comment for how the two are
// told apart). A missing file gives an error satisfying
// errors.Is(err, fs.ErrNotExist).
func Open(fs fsys.FS, path string, opt Options) (*Journal, *Recovery, error) {
	maxRecord, err := opt.maxRecord()
	if err != nil {
		return nil, nil, err
	}
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		err = fmt.Errorf("open journal: %w", err)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, errdefs.FromIO(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, errdefs.FromIO(fmt.Errorf("open journal %s: %w", path, err))
	}
	// What lies past the last write known synced is a tail to cut (see
	// Options.DurableEnd), whatever it looks like: scan up to it only, as
	// long as the file is still that generation.
	size, limit := st.Size(), st.Size()
	if opt.DurableGeneration != 0 && opt.DurableEnd >= 0 && opt.DurableEnd < size {
		limit = opt.DurableEnd
	}
	res, err := scan(f, limit, maxRecord)
	if err == nil && limit < size && (res.damage == 0 || res.rec.Header.Generation != opt.DurableGeneration) {
		limit = size
		res, err = scan(f, size, maxRecord)
	}
	if err == nil && res.damage < 0 {
		res.rec.TruncatedBytes = size - res.rec.End
	}
	if err != nil {
		f.Close()
		if errors.As(err, new(unsupportedVersionError)) {
			return nil, nil, fmt.Errorf("open journal %s: %w", path, err)
		}
		return nil, nil, errdefs.FromIO(fmt.Errorf("read journal %s: %w", path, err))
	}
	if res.damage >= 0 {
		f.Close()
		return nil, nil, quarantine(fs, path, res)
	}
	j, err := resume(fs, f, path, maxRecord, res, !opt.NoFolderSync)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return j, &res.rec, nil
}

// resume makes the scanned state durable and positions the file for
// appending.
func resume(fs fsys.FS, f fsys.File, path string, maxRecord int, res *scanResult, syncFolder bool) (*Journal, error) {
	rec := &res.rec
	if rec.TruncatedBytes > 0 {
		if err := f.Truncate(rec.End); err != nil {
			return nil, errdefs.FromIO(fmt.Errorf("cut torn tail of journal %s at offset %d: %w", path, rec.End, err))
		}
	}
	// Sync even when nothing was cut: a process that crashed before its own
	// sync returned may have left what we are about to report as committed
	// in the page cache only; and Create's folder sync may not have run.
	if err := f.Sync(); err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("sync journal %s: %w", path, err))
	}
	if syncFolder { // else the caller does (Options.NoFolderSync)
		if err := fs.SyncDir(filepath.Dir(path)); err != nil {
			return nil, errdefs.FromIO(fmt.Errorf("sync folder of journal %s: %w", path, err))
		}
	}
	if _, err := f.Seek(rec.End, io.SeekStart); err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("seek journal %s: %w", path, err))
	}
	return &Journal{f: f, path: path, hdr: rec.Header, maxRecord: maxRecord, end: rec.End, seq: res.lastSeq}, nil
}

// quarantine moves a corrupt journal aside so nothing appends to it or
// cuts it, and says where it went.
func quarantine(fs fsys.FS, path string, res *scanResult) error {
	what := fmt.Sprintf("journal %s is damaged at byte offset %d (%v)", path, res.damage, res.reason)
	if res.proof >= 0 {
		what += fmt.Sprintf(" and a record written after it, at offset %d, is intact, so this is not a torn tail", res.proof)
	}
	aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano())
	if err := fs.Rename(path, aside); err != nil {
		return fmt.Errorf("%s; moving it aside to %s failed, so move it away by hand: %w: %w",
			what, aside, errdefs.ErrCorrupt, errdefs.FromIO(err))
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%s; moved it to %s but syncing the folder failed: %w: %w",
			what, aside, errdefs.ErrCorrupt, errdefs.FromIO(err))
	}
	return fmt.Errorf("%s; kept it aside as %s for inspection: %w", what, aside, errdefs.ErrCorrupt)
}

// scanResult is what one read-only pass over a journal found.
type scanResult struct {
	rec     Recovery
	lastSeq uint64
	// damage is the offset of a bad frame that is corruption, not a torn
	// tail; -1 if none.
	damage int64
	reason error
	// proof is the offset of the valid frame of a later write that makes
	// the damage corruption; -1 when the damage is the header itself.
	proof int64
}

// walk is the state carried from frame to frame.
type walk struct {
	writeStart int64
	pending    []Span // entries not yet followed by their commit
	meta       []byte // the pending entries' meta record, if read
}

// scan checks the journal in r, whose size is size, without changing it.
// Errors are failed reads or an unsupported version; damage is reported in
// the result.
func scan(r io.ReaderAt, size int64, maxRecord int) (*scanResult, error) {
	// No reach goes past the end of the file, so a small journal needs no
	// more than its size: most journals are a few hundred bytes, and a
	// writer opens one every time it starts.
	w := frame.NewWindow(r, size, int(min(max(size, frame.HeaderSize), windowSize)))
	res := &scanResult{damage: -1, proof: -1}
	hdr, end, err := readHeaderRecord(w, maxRecord)
	if err != nil {
		if frame.IsError(err) {
			res.damage, res.reason = 0, fmt.Errorf("header record: %w", err)
			return res, nil
		}
		return nil, err
	}
	res.rec.Header, res.rec.End = hdr, end

	st := walk{}
	off, rl := end, rules(maxRecord)
	for off < size {
		h, err := frame.Read(w, off, hdr.Generation, rl)
		if err == nil {
			err = res.apply(w, &st, h, off)
		}
		if err != nil {
			if !frame.IsError(err) {
				return nil, err
			}
			// A Header frame never proves a later write: its checksum
			// is seeded with 0, not the generation.
			proof, err2 := frame.FindLaterWrite(w, off, hdr.Generation, rl)
			if err2 != nil {
				return nil, err2
			}
			if proof >= 0 {
				res.damage, res.reason, res.proof = off, err, proof
				return res, nil
			}
			break
		}
		off += h.Size()
	}
	res.rec.TruncatedBytes = size - res.rec.End
	return res, nil
}

func readHeaderRecord(w *frame.Window, maxRecord int) (Header, int64, error) {
	h, err := frame.Read(w, 0, 0, rules(maxRecord))
	if err != nil {
		return Header{}, 0, err
	}
	switch {
	case h.Type != typeHeader:
		return Header{}, 0, frame.Error(fmt.Sprintf("first record is a %s record", typeName(h.Type)))
	case h.PosInWrite != 0:
		return Header{}, 0, frame.Error("first record claims to be inside a write")
	case h.Length > maxHeaderPayload:
		return Header{}, 0, frame.Error(fmt.Sprintf("header payload of %d bytes is over %d", h.Length, maxHeaderPayload))
	}
	b, err := w.At(frame.HeaderSize, int(h.Length))
	if err != nil {
		return Header{}, 0, err
	}
	hdr, err := decodeHeader(b)
	return hdr, h.Size(), err
}

// apply adds the valid frame h at off to the result, or says why it
// contradicts the frames before it.
func (res *scanResult) apply(w *frame.Window, st *walk, h frame.Header, off int64) error {
	start := h.WriteStart(off)
	if start != off && start != st.writeStart {
		return frame.Error(fmt.Sprintf("frame says its write began at offset %d, the frames before it say %d", start, st.writeStart))
	}
	if start == off && len(st.pending) > 0 {
		// Append writes entries and their commit in one write.
		return frame.Error("a new write begins while entries of the previous one lack their commit")
	}
	st.writeStart = start
	switch h.Type {
	case typeEntry:
		if st.meta != nil {
			return frame.Error("entry after the meta record of its batch")
		}
		st.pending = append(st.pending, Span{Off: off + frame.HeaderSize, Len: int(h.Length)})
	case typeCommit:
		if h.Length != commitPayloadSize {
			return frame.Error(fmt.Sprintf("commit payload is %d bytes, not %d", h.Length, commitPayloadSize))
		}
		b, err := w.At(off+frame.HeaderSize, commitPayloadSize)
		if err != nil {
			return err
		}
		seq, count := decodeCommit(b)
		if seq != res.lastSeq+1 {
			return frame.Error(fmt.Sprintf("commit of batch %d follows batch %d", seq, res.lastSeq))
		}
		if count != len(st.pending) {
			return frame.Error(fmt.Sprintf("commit counts %d entries, %d precede it", count, len(st.pending)))
		}
		res.rec.Batches = append(res.rec.Batches, Batch{Seq: seq, Entries: st.pending, Meta: st.meta})
		st.pending, st.meta = nil, nil
		res.lastSeq = seq
		res.rec.End = off + h.Size()
	case typeMeta:
		switch {
		case len(st.pending) == 0:
			return frame.Error("meta record with no entries before it")
		case st.meta != nil:
			return frame.Error("second meta record in one batch")
		case h.Length > MaxMeta:
			return frame.Error(fmt.Sprintf("meta payload of %d bytes is over %d", h.Length, MaxMeta))
		}
		b, err := w.At(off+frame.HeaderSize, int(h.Length))
		if err != nil {
			return err
		}
		st.meta = append(make([]byte, 0, len(b)), b...)
	case typeCompacted:
		if h.Length != markerPayloadSize {
			return frame.Error(fmt.Sprintf("compacted payload is %d bytes, not %d", h.Length, markerPayloadSize))
		}
		b, err := w.At(off+frame.HeaderSize, markerPayloadSize)
		if err != nil {
			return err
		}
		m := decodeMarker(b)
		if m.Size < 0 {
			return frame.Error("compacted marker has a negative size")
		}
		res.rec.Compacted = &m
		res.rec.End = off + h.Size()
	default:
		return frame.Error(fmt.Sprintf("%s record after the start of the file", typeName(h.Type)))
	}
	return nil
}
