package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// windowSize is the read buffer of a scan.
const windowSize = 1 << 20

// Recovery is what Open found.
type Recovery struct {
	Segments       int   // segment files read
	Bytes          int64 // their size
	TruncatedBytes int64 // torn tails cut
	// Corrupt says, for each damaged segment, where the damage is and
	// where the copy kept for inspection went.
	Corrupt []string
	// PadDamaged says where bytes inside a Pad record were found changed:
	// a pad holds no record, so nothing is lost, but the disk changed
	// what sessiond wrote.
	PadDamaged []string
	// NoSegment is why no segment for appends could be started (a full
	// disk): the journal still serves what it holds, and the first commit
	// tries again.
	NoSegment error
	// Lost lists acknowledged records found gone (Options.AcceptLoss;
	// without it Open refuses to start over them).
	Lost []Loss
	// AckUnreadable: segments exist and the acknowledgement record
	// beside them does too, but neither of its slots could be read, so
	// nothing could be checked. AckMissing: format 2 segments exist and
	// the record does not; a format 2 log writes its record before its
	// first segment, so the record was removed, and nothing could be
	// checked either. Either way the start goes on: these say why no loss
	// could be found, not that one was.
	AckUnreadable, AckMissing bool
}

// Open reads every segment in opt.Dir once, in order, rebuilds each
// transcript's current stream (Epoch), cuts torn tails, deals with
// damaged segments (see the package comment), and starts a new segment
// for appends.
func Open(opt Options) (*Log, *Recovery, error) {
	if err := opt.fill(); err != nil {
		return nil, nil, err
	}
	l := &Log{
		opt:     opt,
		rules:   frame.Rules{MaxType: maxType, MaxRecord: max(opt.MaxRecord+streamSize, padBlock/2)},
		arrived: make(chan struct{}, 1),
		epochs:  map[layout.Key]*epoch{},
		recent:  map[*Stream]time.Time{},
		window:  siblingWindow,
	}
	if err := fsys.MkdirAll(opt.FS, opt.Dir, 0o700); err != nil {
		return nil, nil, errdefs.FromIO(fmt.Errorf("create log folder %s: %w", opt.Dir, err))
	}
	rec := &Recovery{}
	if err := l.recover(rec); err != nil {
		l.closeFiles()
		return nil, nil, err
	}
	// A fresh record of what recovery found, before any new write.
	if err := l.writeAck(true); err != nil {
		l.closeFiles()
		return nil, nil, err
	}
	if err := l.roll(); errors.Is(err, errdefs.ErrNoSpace) {
		// A full disk must not keep sessiond from starting: what the
		// log holds is served and compacted as space allows, and each
		// commit tries to start the segment again (commit's roll).
		rec.NoSegment = err
	} else if err != nil {
		l.closeFiles()
		return nil, nil, err
	}
	l.collect()
	return l, rec, nil
}

func (l *Log) closeFiles() {
	if l.ack.f != nil {
		l.ack.f.Close()
		l.ack.f = nil
	}
	for _, s := range l.segs {
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}
}

// recover lists and scans the segments.
func (l *Log) recover(rec *Recovery) error {
	// What was acknowledged, read before anything is changed.
	exp, err := l.readExpected(rec)
	if err != nil {
		return err
	}
	seqs, err := l.listSegments()
	if err != nil {
		return err
	}
	if err := l.openSegments(seqs); err != nil {
		return err
	}
	heads, sizes, err := l.readHeaders()
	if err != nil {
		return err
	}
	if !exp.known {
		l.noteNoRecord(rec, exp)
	}
	sc := &scanner{l: l, rec: rec, streams: map[uint64]*epoch{}, pending: map[uint64]*pendingBatch{},
		reads: map[uint64]int64{}, counts: map[uint64]uint64{}}
	for i, s := range l.segs {
		limit := sizes[i]
		if i+1 < len(l.segs) && heads[i+1].PrevEnd > 0 && heads[i+1].PrevEnd < limit {
			limit = heads[i+1].PrevEnd
		}
		if err := sc.segment(s, sizes[i], limit); err != nil {
			return err
		}
		rec.Segments++
		rec.Bytes += sizes[i]
	}
	// Before anything is cut: was everything acknowledged read back?
	present := make(map[uint64]*segment, len(l.segs))
	for _, s := range l.segs {
		present[s.seq] = s
	}
	if losses := l.checkLosses(exp, present, sc.counts, sc.reads); len(losses) > 0 {
		if !l.opt.AcceptLoss {
			return &lostError{losses: losses}
		}
		rec.Lost = losses
	}
	if err := sc.finish(); err != nil {
		return err
	}
	l.holdRecovered()
	return nil
}

// readExpected reads the acknowledgement record: what recovery must find.
func (l *Log) readExpected(rec *Recovery) (expected, error) {
	var exp expected
	ar, found, unreadable, err := readAck(l.opt.FS, l.opt.Dir)
	if err != nil {
		return exp, err
	}
	exp.unreadable = unreadable
	if found {
		exp = expected{known: true, segs: map[uint64]ackEntry{}}
		for _, a := range ar.segs {
			exp.segs[a.seq] = a
		}
		l.ack.counter = ar.counter
	}
	return exp, nil
}

// noteNoRecord says in rec why the losses cannot be checked when the
// record could not be read, once the segments' headers are known. With no
// segment there is nothing to check: a new log, or a first start killed
// while writing its record.
func (l *Log) noteNoRecord(rec *Recovery, exp expected) {
	if len(l.segs) == 0 {
		return
	}
	if exp.unreadable {
		rec.AckUnreadable = true
		return
	}
	for _, s := range l.segs {
		if !s.v1 {
			rec.AckMissing = true
			return
		}
	}
	// Only format 1 segments: a log from before the record, or one whose
	// record was removed; they cannot be told apart.
}

// listSegments lists the log folder and returns the segments' sequence
// numbers in order. On the way it removes segments whose creation crashed
// and spares it will not reuse, keeps the others, and notes the retained
// segments.
func (l *Log) listSegments() ([]uint64, error) {
	fs, dir := l.opt.FS, l.opt.Dir
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("read log folder %s: %w", dir, err))
	}
	for _, e := range ents {
		if e.IsDir() {
			// The journal keeps no folders; a folder here is a
			// per-transcript journal of a development build (before
			// format 2), which this build cannot read.
			return nil, fmt.Errorf("the journal folder %s holds the folder %s: per-transcript journals of a development build of sessiond, which this one does not read; finish with that build (sessionctl flush --all, then stop it), then move %s aside: %w", dir, e.Name(), filepath.Dir(dir), errdefs.ErrFailedPrecondition)
		}
	}
	var seqs []uint64
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") && strings.Contains(n, ".wal.corrupt-") && strings.HasSuffix(n, corruptTempSuffix) {
			// A damaged segment's copy a crash cut short: the next
			// scan of that segment copies it again.
			_ = fs.Remove(filepath.Join(dir, n))
			continue
		}
		if strings.Contains(n, ".wal.tmp-") {
			// A segment whose creation crashed before its rename: it never
			// held a record.
			_ = fs.Remove(filepath.Join(dir, n))
			continue
		}
		if isSpare(n) {
			if l.opt.Prealloc > 0 && len(l.spares) < maxSpares {
				l.spares = append(l.spares, filepath.Join(dir, n))
			} else {
				_ = fs.Remove(filepath.Join(dir, n))
			}
			continue
		}
		if l.listRetained(n) {
			continue
		}
		base, ok := strings.CutSuffix(n, ".wal")
		if !ok || len(base) != 16 {
			continue
		}
		seq, err := strconv.ParseUint(base, 16, 64)
		if err != nil || seq == 0 {
			continue
		}
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// openSegments opens every segment, in order, into l.segs.
func (l *Log) openSegments(seqs []uint64) error {
	for _, seq := range seqs {
		path := filepath.Join(l.opt.Dir, segName(seq))
		f, err := l.opt.FS.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return errdefs.FromIO(fmt.Errorf("open journal segment %s: %w", path, err))
		}
		l.segs = append(l.segs, &segment{seq: seq, path: path, f: f})
	}
	return nil
}

// readHeaders reads every segment's header and size before any segment
// is scanned: a segment's header may say where the one before it must be
// cut.
func (l *Log) readHeaders() ([]segHeader, []int64, error) {
	heads := make([]segHeader, len(l.segs))
	sizes := make([]int64, len(l.segs))
	for i, s := range l.segs {
		fi, err := s.f.Stat()
		if err != nil {
			return nil, nil, errdefs.FromIO(fmt.Errorf("stat journal segment %s: %w", s.path, err))
		}
		sizes[i] = fi.Size()
		s.mtime = fi.ModTime()
		w := frame.NewWindow(s.f, sizes[i], int(min(max(sizes[i], frame.HeaderSize), windowSize)))
		h, end, err := readHeader(w)
		if err != nil {
			var uv unsupportedVersionError
			if errors.As(err, &uv) {
				return nil, nil, fmt.Errorf("journal segment %s: %w", s.path, err)
			}
			if !frame.IsError(err) {
				return nil, nil, errdefs.FromIO(fmt.Errorf("read journal segment %s: %w", s.path, err))
			}
			// The header is synced before the segment gets its name, so
			// it cannot be torn: this is damage.
			return nil, nil, fmt.Errorf("journal segment %s has a damaged header (%v); move it away to start (its records are lost): %w", s.path, err, errdefs.ErrCorrupt)
		}
		if h.Seq != s.seq {
			return nil, nil, fmt.Errorf("journal segment %s says it is segment %d: %w", s.path, h.Seq, errdefs.ErrCorrupt)
		}
		heads[i] = h
		s.v1 = h.Version == 1
		s.id = h.ID
		s.end = end
	}
	return heads, sizes, nil
}

// holdRecovered holds the segments each recovered stream needs; streams
// left with nothing to recover are forgotten (their Bind still supersedes
// older streams in the files until those go).
func (l *Log) holdRecovered() {
	for k, e := range l.epochs {
		if len(e.Batches) == 0 && e.Compacted == nil {
			delete(l.epochs, k)
			continue
		}
		for seq := range e.segs {
			if g := l.segmentLocked(seq); g != nil {
				g.refs++
			}
		}
	}
}

func readHeader(w *frame.Window) (segHeader, int64, error) {
	h, err := frame.Read(w, 0, 0, frame.Rules{MaxType: maxType, MaxRecord: maxJSONSize})
	if err != nil {
		return segHeader{}, 0, err
	}
	if h.Type != typeHeader || h.PosInWrite != 0 {
		return segHeader{}, 0, frame.Error(fmt.Sprintf("first record is of type %d", h.Type))
	}
	b, err := w.At(frame.HeaderSize, int(h.Length))
	if err != nil {
		return segHeader{}, 0, err
	}
	sh, err := decodeHeader(b)
	return sh, h.Size(), err
}
