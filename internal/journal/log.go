package journal

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Defaults of Options.
const (
	DefaultSegmentSize = 64 << 20
	DefaultMaxSize     = 512 << 20
	// DefaultMaxWrite bounds what one commit gathers before it writes:
	// past it, waiting requests go in the next write.
	DefaultMaxWrite = 16 << 20
	// DefaultCommitDelay is short next to a sync on a disk that honours
	// it (0.1-1 ms here) times the few requests it gathers, and far under
	// the latency an agent notices.
	DefaultCommitDelay = 4 * time.Millisecond
	// DefaultRetentionSize bounds the retained segments when
	// Options.RetentionSize is 0 (see retain.go).
	DefaultRetentionSize = 1 << 30
)

// Options configure a log.
type Options struct {
	FS  fsys.FS
	Dir string // the journal's folder; created if missing
	// MaxRecord is the largest entry, in bytes; 0 means DefaultMaxRecord.
	MaxRecord   int
	SegmentSize int64 // 0: DefaultSegmentSize
	MaxSize     int64 // 0: DefaultMaxSize
	MaxWrite    int64 // 0: DefaultMaxWrite
	// Prealloc is the space reserved on disk for a new segment when it is
	// made (see reserve.go); 0 means SegmentSize, a negative value
	// reserves nothing and keeps no spares.
	Prealloc int64
	// FreeSpace tells the bytes still free on the disk holding a folder;
	// nil is fsys.FreeSpace. A reservation never takes the disk's last
	// Keep bytes: on a small disk a whole segment's reservation would
	// take the room the ballast and the compactions need.
	FreeSpace func(dir string) (int64, error)
	Keep      int64
	// CommitDelay is how long the committer may wait for other sessions'
	// requests before writing a small group while many sessions are
	// active (see waitForSiblings). 0 means DefaultCommitDelay; a
	// negative value never waits.
	CommitDelay time.Duration
	// OnPressure is told, from its own goroutine, the transcripts that
	// hold the oldest segment when the journal is over MaxSize: compacting
	// them lets the segment go. Nil: nobody is told.
	OnPressure func(keys []layout.Key)
	// Retention keeps the segments the checkpoint lets go for this long
	// after it does, for Lookup (see retain.go); 0 keeps none.
	Retention time.Duration
	// RetentionSize bounds the retained segments' total size (the oldest
	// go first); 0 means DefaultRetentionSize.
	RetentionSize int64
	// Now is the clock retention reads; nil is time.Now.
	Now func() time.Time
	// OnCommit, when set, is told of every write that reached the disk
	// (for sessiond's metrics: the package that counts them imports wal,
	// never the other way round). The committer calls it before it
	// answers the write's requests, so a caller that appended and then
	// looks sees its commit counted; it must be quick and must not call
	// back into the journal.
	OnCommit func(Commit)
	// AcceptLoss lets Open go on when acknowledged records are gone
	// (ackrec.go): they are reported in Recovery.Lost instead of
	// refusing to start.
	AcceptLoss bool
}

// Commit describes one write and sync of the journal, for Options.OnCommit.
type Commit struct {
	Entries int           // entries the write carried
	Bytes   int           // bytes written: the entries with their frames
	Sync    time.Duration // how long the fdatasync took
}

// Stats are the journal's counters.
type Stats struct {
	Syncs    uint64 // write+sync rounds that succeeded
	Bytes    uint64 // bytes written to segments
	Padding  uint64 // of Bytes, the Pad records' (padAfter)
	Segments int    // segment files now
	Size     int64  // their total size
	Oldest   uint64 // seq of the oldest segment
	// The retained segments (see retain.go): how many, their total size,
	// and when the oldest was let go (zero when none).
	RetainedSegments int
	RetainedBytes    int64
	OldestRetained   time.Time
}

// Log is the journal. Its methods are safe for concurrent
// use; each transcript's Stream belongs to that transcript's writer.
type Log struct {
	opt   Options
	rules frame.Rules
	// ack writes the acknowledgement record (ackrec.go): the committer's,
	// and Open's and Close's when it is not running.
	ack ackState

	// qmu guards the queue of requests waiting for a commit and who
	// commits (see lead); arrived tells a leader waiting for siblings
	// that the queue grew.
	qmu     sync.Mutex
	queue   []*request
	leading bool
	arrived chan struct{}

	mu      sync.Mutex
	segs    []*segment // ascending seq; the last one is where appends go
	cur     *segment   // nil until the next roll (after a failure)
	prevEnd int64      // durable end of a sealed segment, for the next header
	epochs  map[layout.Key]*epoch
	nextID  uint32 // stream ids of the current segment: seq<<32 | nextID
	closed  bool
	// inflight counts submitted requests not answered yet: Close waits
	// for them before it stops the committer.
	inflight sync.WaitGroup
	// pressured is the segment seq OnPressure was last told about.
	pressured uint64
	// spares are collected segment files kept for reuse (reserve.go),
	// guarded by spareMu: the committer takes and adds them, SetLowSpace
	// removes them from any goroutine.
	spareMu sync.Mutex
	spares  []string
	// lowSpace: the disk filled up; no space is reserved ahead and no
	// spare kept until it is cleared (SetLowSpace).
	lowSpace atomic.Bool
	// retained are the segments out of the journal kept for Lookup, oldest
	// first (retain.go); readers counts Lookup calls running, which
	// keep segments from being collected or retained ones from going.
	retained []*retainedSeg
	readers  int

	syncs, bytes, padding atomic.Uint64
	scratch               []byte // the committer's
	// recent is when each stream last committed, for the commit delay;
	// the committer's, as are pruned and delay.
	recent map[*Stream]time.Time
	window time.Duration
	pruned time.Time
	delay  *time.Timer
}

type segment struct {
	seq  uint64
	id   uint64
	path string
	f    fsys.File
	end  int64 // where the last synced write ended
	// entries counts the entries acknowledged in it (the
	// acknowledgement record's, ackrec.go).
	entries uint64
	refs    int // streams holding records here
	pins    int // readers holding it
	// mtime is the file's modification time when recovery read it.
	mtime time.Time
	// v1: an older sessiond's segment (format version 1), which has no
	// Pad records.
	v1 bool
}

func (o *Options) fill() error {
	if o.FS == nil {
		o.FS = fsys.OS
	}
	if o.Dir == "" {
		return fmt.Errorf("log folder not set: %w", errdefs.ErrInvalidArgument)
	}
	if o.MaxRecord == 0 {
		o.MaxRecord = DefaultMaxRecord
	}
	if o.MaxRecord < 0 || o.MaxRecord > frame.MaxRecordLimit-streamSize {
		return fmt.Errorf("log MaxRecord %d is outside 1..%d: %w", o.MaxRecord, frame.MaxRecordLimit-streamSize, errdefs.ErrInvalidArgument)
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxWrite <= 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.RetentionSize <= 0 {
		o.RetentionSize = DefaultRetentionSize
	}
	if o.FreeSpace == nil {
		o.FreeSpace = fsys.FreeSpace
	}
	switch {
	case o.Prealloc == 0:
		o.Prealloc = o.SegmentSize
	case o.Prealloc < 0:
		o.Prealloc = 0
	}
	switch {
	case o.CommitDelay == 0:
		o.CommitDelay = DefaultCommitDelay
	case o.CommitDelay < 0:
		o.CommitDelay = 0
	}
	return nil
}

func randomUint64() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

func segName(seq uint64) string { return fmt.Sprintf("%016x.wal", seq) }

// createSegment makes segment seq: a spare (a segment file collected
// earlier) or a new file under a temp name, its header written at offset
// 0, space reserved up to Options.Prealloc, synced, renamed into place and
// the folder synced, so a segment's name always stands for a readable
// header. A spare's old records stay behind the header: their checksums
// are seeded with the old segment's id, so recovery never takes them for
// this segment's (see reserve.go).
func (l *Log) createSegment(seq uint64, prevEnd int64) (*segment, error) {
	fs := l.opt.FS
	id := randomUint64()
	p, err := json.Marshal(segHeader{Version: formatV, Seq: seq, ID: id, PrevEnd: prevEnd})
	if err != nil {
		return nil, err
	}
	hdr := frame.Append(nil, typeHeader, p, 0, 0)
	path := filepath.Join(l.opt.Dir, segName(seq))
	tmp := filepath.Join(l.opt.Dir, fmt.Sprintf("%s.tmp-%016x", segName(seq), randomUint64()))
	f, err := l.openSpare(tmp)
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("create journal segment %s: %w", path, err))
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			fs.Remove(tmp)
		}
	}()
	err = writeHeader(f, hdr)
	if err == nil {
		l.reserve(f)
		err = f.Sync()
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		ok = true
		err = fs.SyncDir(l.opt.Dir)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, errdefs.FromIO(fmt.Errorf("create journal segment %s: %w", path, err))
	}
	return &segment{seq: seq, id: id, path: path, f: f, end: int64(len(hdr))}, nil
}

// roll starts the next segment. Called by the committer only.
func (l *Log) roll() error {
	l.mu.Lock()
	var seq uint64 = 1
	if n := len(l.segs); n > 0 {
		seq = l.segs[n-1].seq + 1
	}
	prevEnd := l.prevEnd
	l.mu.Unlock()
	s, err := l.createSegment(seq, prevEnd)
	if errors.Is(err, errdefs.ErrNoSpace) && l.hasRetained() {
		// The retained history yields to appends (see retain.go).
		l.DropRetained()
		s, err = l.createSegment(seq, prevEnd)
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.cur = s
	l.prevEnd = 0
	l.nextID = 0
	l.mu.Unlock()
	// The sealed segment's last end, and the new one, made durable: a
	// segment the record does not list is never taken for lost.
	_ = l.writeAck(true)
	return nil
}

// newStreamID names a new stream. Ids carry the seq of the segment current
// when they are made, so they never repeat while any segment that could
// hold the same id exists. Called with l.mu held.
func (l *Log) newStreamID() uint64 {
	var seq uint64
	if n := len(l.segs); n > 0 {
		seq = l.segs[n-1].seq
	}
	l.nextID++
	if l.nextID == 0 {
		// Four billion streams in one segment: move to a fresh
		// namespace by pretending the next segment has begun.
		seq++
		l.nextID = 1
	}
	return seq<<32 | uint64(l.nextID)
}

// Stats returns the journal's counters.
func (l *Log) Stats() Stats {
	s := Stats{Syncs: l.syncs.Load(), Bytes: l.bytes.Load(), Padding: l.padding.Load()}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.Segments = len(l.segs)
	for _, g := range l.segs {
		s.Size += g.end
	}
	if len(l.segs) > 0 {
		s.Oldest = l.segs[0].seq
	}
	s.RetainedSegments = len(l.retained)
	for _, r := range l.retained {
		s.RetainedBytes += r.size
	}
	if len(l.retained) > 0 {
		s.OldestRetained = l.retained[0].at
	}
	return s
}

// Close refuses new requests, waits until every request already submitted
// was answered, and closes the segment files. Streams must not be used
// after.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.inflight.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	if s := l.cur; s != nil && s.f != nil {
		// Give back the space reserved past the last write, so a clean
		// stop leaves no unwritten tail for the next start to cut.
		if fi, err := s.f.Stat(); err == nil && fi.Size() > s.end {
			if err := s.f.Truncate(s.end); err == nil {
				_ = s.f.Sync()
			}
		}
	}
	l.mu.Unlock()
	if err := l.writeAck(true); err != nil {
		errs = append(errs, err)
	}
	l.mu.Lock()
	if l.ack.f != nil {
		l.ack.f.Close()
		l.ack.f = nil
	}
	for _, s := range l.segs {
		if s.f != nil {
			if err := s.f.Close(); err != nil {
				errs = append(errs, err)
			}
			s.f = nil
		}
	}
	return errors.Join(errs...)
}

// collect takes the oldest segments no stream or reader holds out of the
// log (retained, or deleted when retention is off), one at a time with a
// folder sync after each (see the package comment), never the one appends
// go to, then expires retained segments. Called by the committer only.
func (l *Log) collect() {
	for {
		l.mu.Lock()
		if l.readers > 0 || len(l.segs) < 2 || l.segs[0].refs > 0 || l.segs[0].pins > 0 || l.segs[0] == l.cur {
			l.mu.Unlock()
			break
		}
		s := l.segs[0]
		l.segs = l.segs[1:]
		l.mu.Unlock()
		// The record stops listing the segment before it goes, or the
		// next start would take it for lost.
		if err := l.writeAck(true); err != nil {
			l.mu.Lock()
			l.segs = append([]*segment{s}, l.segs...)
			l.mu.Unlock()
			break
		}
		err := l.let(s)
		if err == nil {
			err = l.opt.FS.SyncDir(l.opt.Dir)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			// The segment stays on disk: recovery reads it again and
			// finds its streams superseded. Not worth failing anyone.
			break
		}
	}
	l.expire()
}

// pressure tells OnPressure which transcripts hold the oldest segment when
// the journal is over MaxSize, once per segment. Called by the committer only.
func (l *Log) pressure() {
	if l.opt.OnPressure == nil {
		return
	}
	l.mu.Lock()
	var total int64
	for _, s := range l.segs {
		total += s.end
	}
	if total <= l.opt.MaxSize || len(l.segs) < 2 || l.pressured == l.segs[0].seq {
		l.mu.Unlock()
		return
	}
	oldest := l.segs[0].seq
	l.pressured = oldest
	var keys []layout.Key
	for k, e := range l.epochs {
		if _, ok := e.segs[oldest]; ok {
			keys = append(keys, k)
		}
	}
	l.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool { return keys[i].Less(keys[j]) })
	if len(keys) > 0 {
		go l.opt.OnPressure(keys)
	}
}

// Pin keeps segment seq and every later one from being deleted until the
// returned function is called: a reader holding spans of a stream that a
// compaction may end meanwhile pins its oldest span's segment.
func (l *Log) Pin(seq uint64) (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		if s.seq >= seq {
			s.pins++
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					s.pins--
					l.mu.Unlock()
				})
			}
		}
	}
	return func() {}
}

func (l *Log) segment(seq uint64) *segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segmentLocked(seq)
}

// segmentLocked finds segment seq among l.segs (ascending). Called with
// l.mu held.
func (l *Log) segmentLocked(seq uint64) *segment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].seq >= seq })
	if i < len(l.segs) && l.segs[i].seq == seq {
		return l.segs[i]
	}
	return nil
}
