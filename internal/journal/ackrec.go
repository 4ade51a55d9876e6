package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// The acknowledgement record: how far the journal was acknowledged, kept
// outside the segments, so that a segment cut short, deleted or damaged
// by anything but sessiond is found at start instead of passing for a
// torn tail (which recovery cuts in silence, rightly, because it was never
// acknowledged).
//
// It lists every live segment (the journal keeps them contiguous: only the
// oldest is ever let go) with its id, the end of its last acknowledged
// write and the entries acknowledged in it. The committer rewrites it
// after every write that synced, before it answers the write's requests;
// without a sync, since the page cache keeps it across a kill and a power
// loss can only leave an older record (it is written after the segment's
// sync, so it never claims more than the disk holds). It is synced when a
// segment is added or let go and at Close. Two slots are written in turn,
// each with its own checksum and counter, so a torn write leaves the other.
const (
	// AckFile is the record's name in the log folder.
	AckFile  = ackName
	ackName  = "acknowledged"
	ackSlot  = 64 << 10
	ackMagic = 0x4b414453 // "SDAK"
	ackHead  = 4 + 4 + 8 + 4
	ackSeg   = 8 + 8 + 8 + 8
	// ackMaxSegs is what a slot holds; a log with more live segments
	// records its newest ones.
	ackMaxSegs = (ackSlot - ackHead - 4) / ackSeg
)

// ackEntry is one live segment in the record.
type ackEntry struct {
	seq, id uint64
	end     int64
	entries uint64
}

type ackRecord struct {
	counter uint64
	segs    []ackEntry // ascending seq
}

func encodeAck(r ackRecord, buf []byte) []byte {
	segs := r.segs
	if len(segs) > ackMaxSegs {
		segs = segs[len(segs)-ackMaxSegs:]
	}
	b := buf[:0]
	b = binary.LittleEndian.AppendUint32(b, ackMagic)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint64(b, r.counter)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(segs)))
	for _, s := range segs {
		b = binary.LittleEndian.AppendUint64(b, s.seq)
		b = binary.LittleEndian.AppendUint64(b, s.id)
		b = binary.LittleEndian.AppendUint64(b, uint64(s.end))
		b = binary.LittleEndian.AppendUint64(b, s.entries)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, frame.Castagnoli))
}

func decodeAck(b []byte) (ackRecord, bool) {
	if len(b) < ackHead+4 || binary.LittleEndian.Uint32(b) != ackMagic || binary.LittleEndian.Uint32(b[4:]) != 1 {
		return ackRecord{}, false
	}
	n := int(binary.LittleEndian.Uint32(b[16:]))
	size := ackHead + n*ackSeg
	if n > ackMaxSegs || len(b) < size+4 || crc32.Checksum(b[:size], frame.Castagnoli) != binary.LittleEndian.Uint32(b[size:]) {
		return ackRecord{}, false
	}
	r := ackRecord{counter: binary.LittleEndian.Uint64(b[8:])}
	for p := ackHead; p < size; p += ackSeg {
		r.segs = append(r.segs, ackEntry{
			seq: binary.LittleEndian.Uint64(b[p:]), id: binary.LittleEndian.Uint64(b[p+8:]),
			end: int64(binary.LittleEndian.Uint64(b[p+16:])), entries: binary.LittleEndian.Uint64(b[p+24:]),
		})
	}
	return r, true
}

// readAck reads the record: found is false when there is none (a new
// log, or one from before records); an error that is not absence is
// returned, never taken for absence. A file whose slots are both
// unreadable is reported as unreadable: nothing can be checked.
func readAck(fsy fsys.FS, dir string) (r ackRecord, found, unreadable bool, err error) {
	f, err := fsy.OpenFile(filepath.Join(dir, ackName), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return ackRecord{}, false, false, nil
	}
	if err != nil {
		return ackRecord{}, false, false, errdefs.FromIO(fmt.Errorf("open the journal's acknowledgement record: %w", err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 2*ackSlot))
	if err != nil {
		return ackRecord{}, false, false, errdefs.FromIO(fmt.Errorf("read the journal's acknowledgement record: %w", err))
	}
	best, ok := ackRecord{}, false
	for off := 0; off < len(b); off += ackSlot {
		if r, good := decodeAck(b[off:min(len(b), off+ackSlot)]); good && (!ok || r.counter > best.counter) {
			best, ok = r, true
		}
	}
	return best, ok, !ok, nil
}

// Loss is part of the journal that was acknowledged and is gone.
type Loss struct {
	Segment string // the segment's file
	Missing bool   // the whole file is gone
	// AckedEnd is where its last acknowledged write ended, ReadEnd where
	// its readable records end now; Entries the entries acknowledged in
	// it that cannot be read any more (0 when unknown).
	AckedEnd, ReadEnd int64
	Entries           uint64
	// Sessions are the transcripts with entries in the segment that the
	// log still reads: the lost ones may be among them (others may have
	// had entries only in the lost part).
	Sessions []layout.Key
}

func (l Loss) String() string {
	var b strings.Builder
	switch {
	case l.Missing:
		fmt.Fprintf(&b, "journal segment %s is missing (it was acknowledged up to byte %d)", l.Segment, l.AckedEnd)
	case l.ReadEnd < l.AckedEnd:
		fmt.Fprintf(&b, "journal segment %s ends at byte %d, but was acknowledged up to byte %d", l.Segment, l.ReadEnd, l.AckedEnd)
	default:
		fmt.Fprintf(&b, "journal segment %s is damaged", l.Segment)
	}
	if l.Entries > 0 {
		fmt.Fprintf(&b, ": %d acknowledged entries lost", l.Entries)
	}
	if len(l.Sessions) > 0 {
		names := make([]string, 0, min(len(l.Sessions), 10))
		for _, k := range l.Sessions[:min(len(l.Sessions), 10)] {
			names = append(names, k.String())
		}
		fmt.Fprintf(&b, "; sessions with entries in it: %s", strings.Join(names, ", "))
		if len(l.Sessions) > 10 {
			fmt.Fprintf(&b, " and %d more", len(l.Sessions)-10)
		}
	}
	return b.String()
}

// ErrLost is wrapped by Open's error when acknowledged records are gone
// and Options.AcceptLoss is not set.
var ErrLost = errors.New("acknowledged log records are gone")

// lostError is Open's refusal to start over a loss.
type lostError struct{ losses []Loss }

func (e *lostError) Error() string {
	var parts []string
	for _, l := range e.losses {
		parts = append(parts, l.String())
	}
	return "the journal lost acknowledged records, which a crash never does (another program cut, deleted or damaged its files, or the disk did): " +
		strings.Join(parts, "; ") +
		". Nothing was changed. Restore the segments from a backup if you have one; or start with --accept-journal-loss to go on without them (those entries are then gone for good, and sessiond reports them)"
}

func (e *lostError) Unwrap() []error { return []error{ErrLost, errdefs.ErrCorrupt} }

// ackState is the record's writer, used by the committer (and Open and
// Close, which run without it).
type ackState struct {
	f       fsys.File
	counter uint64
	buf     []byte
	segs    []ackEntry
	named   bool // the folder was synced since the record was opened
}

// writeAck writes the record of the live segments to its next slot,
// synced when sync is set. Failing to write it loses no entry, only the
// check it allows at the next start: it is reported, not fatal.
func (l *Log) writeAck(sync bool) error {
	a := &l.ack
	if a.f == nil {
		f, err := l.opt.FS.OpenFile(filepath.Join(l.opt.Dir, ackName), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return errdefs.FromIO(fmt.Errorf("open the journal's acknowledgement record: %w", err))
		}
		a.f = f
	}
	l.mu.Lock()
	a.counter++
	r := ackRecord{counter: a.counter, segs: a.segs[:0]}
	for _, s := range l.segs {
		r.segs = append(r.segs, ackEntry{seq: s.seq, id: s.id, end: s.end, entries: s.entries})
	}
	a.segs = r.segs // reused: this runs after every commit
	l.mu.Unlock()
	a.buf = encodeAck(r, a.buf)
	if _, err := a.f.Seek(int64(a.counter%2)*ackSlot, io.SeekStart); err != nil {
		return errdefs.FromIO(fmt.Errorf("write the journal's acknowledgement record: %w", err))
	}
	if _, err := a.f.Write(a.buf); err != nil {
		return errdefs.FromIO(fmt.Errorf("write the journal's acknowledgement record: %w", err))
	}
	if sync {
		if err := a.f.Sync(); err != nil {
			return errdefs.FromIO(fmt.Errorf("sync the journal's acknowledgement record: %w", err))
		}
		if !a.named {
			// The record's name, made durable before any segment's: a
			// power loss must not keep a segment and lose the record
			// beside it, which the next start reports as removed.
			if err := l.opt.FS.SyncDir(l.opt.Dir); err != nil {
				return errdefs.FromIO(fmt.Errorf("sync the journal's folder: %w", err))
			}
			a.named = true
		}
	}
	return nil
}

// expected is what the record says recovery must find.
type expected struct {
	segs  map[uint64]ackEntry
	known bool
	// unreadable: the record exists but neither slot could be read.
	unreadable bool
}

// checkLosses compares what recovery read with the record: every listed
// segment present with the same id, read up to its acknowledged end with
// as many entries. counts are the entries committed in each segment as
// read.
func (l *Log) checkLosses(exp expected, present map[uint64]*segment, counts map[uint64]uint64, reads map[uint64]int64) []Loss {
	if !exp.known {
		return nil
	}
	var out []Loss
	seqs := make([]uint64, 0, len(exp.segs))
	for seq := range exp.segs {
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, seq := range seqs {
		a := exp.segs[seq]
		path := filepath.Join(l.opt.Dir, segName(seq))
		s := present[seq]
		switch {
		case s == nil || s.id != a.id:
			out = append(out, Loss{Segment: path, Missing: true, AckedEnd: a.end, Entries: a.entries})
		case reads[seq] < a.end || counts[seq] < a.entries:
			lost := uint64(0)
			if counts[seq] < a.entries {
				lost = a.entries - counts[seq]
			}
			out = append(out, Loss{Segment: path, AckedEnd: a.end, ReadEnd: reads[seq], Entries: lost, Sessions: l.keysIn(seq)})
		}
	}
	return out
}

// keysIn lists the transcripts with records in segment seq.
func (l *Log) keysIn(seq uint64) []layout.Key {
	var keys []layout.Key
	for k, e := range l.epochs {
		if _, ok := e.segs[seq]; ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Less(keys[j]) })
	return keys
}
