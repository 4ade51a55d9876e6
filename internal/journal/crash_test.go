package journal

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

const crashDir = "/state/wal"

// crashSegment keeps segments small, so the workload rolls and collects
// them (and reuses spares) and each disk copy stays cheap.
const crashSegment = 6000

// model is what a workload sent and had acknowledged, per transcript and
// stream (each Begin starts a new stream).
type model struct {
	streams map[layout.Key][]*sentStream
	padding uint64 // bytes of Pad records the workload wrote
}

type sentStream struct {
	begunAcked bool // a non-lazy Begin returned
	lazy       bool
	batches    [][]string
	acked      int
	marker     *Fingerprint
	markAcked  bool
}

func (m *model) begin(k layout.Key, lazy bool) *sentStream {
	s := &sentStream{lazy: lazy}
	m.streams[k] = append(m.streams[k], s)
	return s
}

func (m *model) last(k layout.Key) *sentStream {
	ss := m.streams[k]
	return ss[len(ss)-1]
}

// crashSetup is the disk crashWorkload starts on: segments reserve their
// space, as on ext4.
func crashSetup(c *fstest.CrashFS) {
	c.AllowAllocate(true)
	c.WriteFile("/state/keep", nil, 0o600)
}

// crashWorkload runs what the writers do, on three transcripts, through
// a log on fs: lazy binds, a group commit spanning all three, single
// appends (some padded to a block's end), a compaction marker then a
// durable Begin, segment rolls (small segments) and the collection of old
// segments.
func crashWorkload(fs fsys.FS) *model {
	m := &model{streams: map[layout.Key][]*sentStream{}}
	l, _, err := Open(Options{FS: fs, Dir: crashDir, SegmentSize: crashSegment})
	if err != nil {
		return m
	}
	defer l.Close()
	defer func() { m.padding = l.Stats().Padding }()
	big := strings.Repeat("x", 5000)
	mid := strings.Repeat("m", 700)
	ks := []layout.Key{key("a"), key("b"), key("c")}
	st := map[layout.Key]*Stream{}
	for _, k := range ks {
		st[k] = l.Stream(k)
		st[k].Begin(Fingerprint{}, true)
		m.begin(k, true)
	}
	grouped := func(parts map[layout.Key][][]string) bool {
		req := map[*Stream][][][]byte{}
		for k, bs := range parts {
			req[st[k]] = batchesOf(bs...)
			m.last(k).batches = append(m.last(k).batches, bs...)
		}
		if group(l, req) != nil {
			return false
		}
		for k := range parts {
			m.last(k).acked = len(m.last(k).batches)
		}
		return true
	}
	single := func(k layout.Key, b ...string) bool {
		m.last(k).batches = append(m.last(k).batches, b)
		if _, err := st[k].Append(batchesOf(b), nil); err != nil {
			return false
		}
		m.last(k).acked = len(m.last(k).batches)
		return true
	}
	if !grouped(map[layout.Key][][]string{ks[0]: {{"a1", "a2"}}, ks[1]: {{"b1"}, {""}}, ks[2]: {{big + "c"}}}) {
		return m
	}
	if !single(ks[0], "a3") || !single(ks[1], big+"b") {
		return m
	}
	// Commits that end in the second half of a block, padded to its end
	// (padAfter).
	for i := range 4 {
		if !single(ks[2], fmt.Sprintf("c%d-%s", i, mid)) {
			return m
		}
	}
	fp := Fingerprint{Size: 42, Tail: 7}
	s := m.last(ks[0])
	s.marker = &fp
	if st[ks[0]].MarkCompacted(fp) != nil {
		return m
	}
	s.markAcked = true
	m.begin(ks[0], false)
	if st[ks[0]].Begin(Fingerprint{Size: 42, Tail: 7}, false) != nil {
		return m
	}
	m.last(ks[0]).begunAcked = true
	if !grouped(map[layout.Key][][]string{ks[0]: {{"a4"}}, ks[1]: {{"b2", "b3"}}, ks[2]: {{"c2" + big}, {"c3"}}}) {
		return m
	}
	single(ks[1], "b4")
	return m
}

// check compares a recovered log with what the workload acknowledged:
// each transcript's recovered stream is the newest one whose Begin was
// acknowledged or a later one, and holds every acknowledged batch of it,
// in order, plus at most batches sent after them.
func (m *model) check(l *Log) error {
	for k, ss := range m.streams {
		newestAcked := 0
		for i, s := range ss {
			if s.begunAcked {
				newestAcked = i
			}
		}
		e, ok := l.Epoch(k)
		var got [][]string
		if ok {
			var err error
			if got, err = readBatches(l, e.Batches); err != nil {
				return err
			}
		}
		// Which sent stream is it? The newest whose batches match.
		matched := -1
		for i := len(ss) - 1; i >= newestAcked; i-- {
			s := ss[i]
			if len(got) < s.acked || len(got) > len(s.batches) {
				continue
			}
			same := true
			for bi := range got {
				if !slices.Equal(got[bi], s.batches[bi]) && !(len(got[bi]) == 0 && len(s.batches[bi]) == 0) {
					same = false
				}
			}
			if !same {
				continue
			}
			if s.markAcked && (e.Compacted == nil || *e.Compacted != *s.marker) {
				continue
			}
			matched = i
			break
		}
		if matched < 0 {
			return fmt.Errorf("%s: recovered %q (ok %v, marker %v) matches no stream sent since the last acknowledged Begin (#%d of %d)", k.SessionID, got, ok, e.Compacted, newestAcked, len(ss))
		}
	}
	return nil
}

// TestCrashEveryOperation crashes the workload at every operation and,
// for each, checks many crashed disks (synced data only, and random ones
// keeping part of the unsynced writes, torn at any byte, zero-filled or
// written back out of order): recovery never calls a crash corruption
// and every acknowledged batch of every transcript comes back, in order,
// once, including when the crash falls inside a write spanning several
// transcripts.
func TestCrashEveryOperation(t *testing.T) {
	seeds := int64(60)
	if testing.Short() {
		seeds = 10
	}
	points, disks := fstest.EveryCrash(crashSetup, seeds, func(c *fstest.CrashFS) func(*fstest.CrashFS, fstest.Event, int64) {
		m := crashWorkload(c)
		return func(v *fstest.CrashFS, ev fstest.Event, seed int64) {
			l, rec, err := Open(Options{FS: v, Dir: crashDir, SegmentSize: crashSegment})
			if err != nil {
				t.Fatalf("crash at %v, seed %d: Open: %v", ev, seed, err)
			}
			if len(rec.Corrupt) > 0 {
				t.Fatalf("crash at %v, seed %d: a crash made the journal look corrupt: %v", ev, seed, rec.Corrupt)
			}
			if err := m.check(l); err != nil {
				t.Fatalf("crash at %v, seed %d: %v", ev, seed, err)
			}
			// Recovery itself survives a second crash: reopen the same disk.
			l.Close()
			l, _, err = Open(Options{FS: v, Dir: crashDir, SegmentSize: crashSegment})
			if err != nil {
				t.Fatalf("crash at %v, seed %d: second Open: %v", ev, seed, err)
			}
			if err := m.check(l); err != nil {
				t.Fatalf("crash at %v, seed %d, after a second open: %v", ev, seed, err)
			}
			l.Close()
		}
	})
	if points < 20 {
		t.Fatalf("only %d crash points: the workload did not run", points)
	}
	t.Logf("crash points: %d operations, %d crashed disks", points, disks)
}

// TestCrashWorkloadPads: the workload the crash sweeps run writes Pad
// records, so a crash tearing one is among the crashes they try.
func TestCrashWorkloadPads(t *testing.T) {
	c := fstest.NewCrashFS()
	crashSetup(c)
	if m := crashWorkload(c); m.padding == 0 {
		t.Fatal("the crash workload wrote no Pad record")
	}
}

// TestCrashDuringRecovery crashes recovery itself (cutting torn tails,
// syncing, starting a segment, collecting old ones) at every operation:
// the next recovery still finds every acknowledged batch.
func TestCrashDuringRecovery(t *testing.T) {
	base := allocating(fstest.NewCrashFS())
	base.WriteFile("/state/keep", nil, 0o600)
	m := crashWorkload(base)
	points := 0
	for _, seed := range []int64{-1, 1, 2, 3} {
		var rng *rand.Rand
		if seed >= 0 {
			rng = rand.New(rand.NewSource(seed))
		}
		for i := int64(1); ; i++ {
			d := base.CrashClone(rng)
			d.CrashAt(i)
			l, _, err := Open(Options{FS: d, Dir: crashDir, SegmentSize: crashSegment})
			if err == nil {
				l.Close()
			}
			if crashed, _ := d.Crashed(); !crashed {
				break
			}
			points++
			v := d.CrashClone(nil)
			l, rec, err := Open(Options{FS: v, Dir: crashDir, SegmentSize: crashSegment})
			if err != nil || len(rec.Corrupt) > 0 || rec.AckMissing || rec.AckUnreadable {
				t.Fatalf("seed %d, crash at op %d of recovery: %v %+v", seed, i, err, rec)
			}
			if err := m.check(l); err != nil {
				t.Fatalf("seed %d, crash at op %d of recovery: %v", seed, i, err)
			}
			l.Close()
		}
	}
	if points < 20 {
		t.Fatalf("only %d crash points in recovery", points)
	}
}

// TestCrashDuringFirstStart: a power loss at any operation of a new log's
// first start and first append never leaves segments without the
// acknowledgement record beside them, which the next start would report
// as a removed record.
func TestCrashDuringFirstStart(t *testing.T) {
	points := 0
	for i := int64(1); ; i++ {
		d := allocating(fstest.NewCrashFS())
		d.CrashAt(i)
		if l, _, err := Open(Options{FS: d, Dir: crashDir, SegmentSize: crashSegment}); err == nil {
			s := l.Stream(key("a"))
			if s.Begin(Fingerprint{}, true) == nil {
				s.Append(batchesOf([]string{"one"}), nil)
			}
			l.Close()
		}
		if crashed, _ := d.Crashed(); !crashed {
			break
		}
		for seed := int64(-1); seed < 16; seed++ {
			var rng *rand.Rand
			if seed >= 0 {
				rng = rand.New(rand.NewSource(seed))
			}
			points++
			l, rec, err := Open(Options{FS: d.CrashClone(rng), Dir: crashDir, SegmentSize: crashSegment})
			if err != nil || rec.AckMissing || rec.AckUnreadable || len(rec.Corrupt) > 0 {
				t.Fatalf("crash at op %d of the first start (seed %d): %v %+v", i, seed, err, rec)
			}
			l.Close()
		}
	}
	if points < 20 {
		t.Fatalf("only %d crash points", points)
	}
}

// TestFaultEveryOperation fails each operation of the workload in turn
// (EIO, ENOSPC, a short write, a sync that loses the unsynced pages):
// the request that met the fault fails, every request acknowledged
// before or after it is recovered, after a reopen and after a power loss.
func TestFaultEveryOperation(t *testing.T) {
	count := fstest.NewFaultFS(allocating(fstest.NewCrashFS()))
	count.Inner().(*fstest.CrashFS).WriteFile("/state/keep", nil, 0o600)
	crashWorkload(count)
	n := count.Ops()
	faults := []fstest.Fault{
		{Err: syscall.EIO},
		{Err: syscall.ENOSPC, Short: true},
		{Err: syscall.EIO, LoseUnsynced: true},
	}
	tried := 0
	for i := int64(1); i <= n; i++ {
		for _, f := range faults {
			c := allocating(fstest.NewCrashFS())
			c.WriteFile("/state/keep", nil, 0o600)
			ff := fstest.NewFaultFS(c)
			f.Nth = i
			ff.Inject(f)
			m := crashWorkload(ff)
			if len(ff.Fired()) == 0 {
				continue
			}
			tried++
			ff.Clear()
			for _, disk := range []fsys.FS{ff, c.CrashClone(nil)} {
				l, rec, err := Open(Options{FS: disk, Dir: crashDir, SegmentSize: crashSegment})
				if err != nil {
					if errors.Is(err, errdefs.ErrCorrupt) {
						t.Fatalf("fault %v at op %d: %v", f.Err, i, err)
					}
					t.Fatalf("fault %v at op %d: reopen: %v", f.Err, i, err)
				}
				if len(rec.Corrupt) > 0 {
					t.Fatalf("fault %v at op %d: %v", f.Err, i, rec.Corrupt)
				}
				if err := m.check(l); err != nil {
					t.Fatalf("fault %v (short %v, lose %v) at op %d (%v): %v", f.Err, f.Short, f.LoseUnsynced, i, ff.Fired(), err)
				}
				l.Close()
			}
		}
	}
	if tried < 20 {
		t.Fatalf("only %d faults fired", tried)
	}
}

// TestSealedSegmentIsCutWhereItsSuccessorSays: a sync fails (its pages
// stay readable, never written) and so does the cut back to the last
// synced write. The failed batch must never come back as committed: the
// next segment's header records where the sealed one ends, and recovery
// cuts there, before and after a power loss, while every acknowledged
// batch, before and after the failure, is kept.
func TestSealedSegmentIsCutWhereItsSuccessorSays(t *testing.T) {
	c := allocating(fstest.NewCrashFS())
	c.WriteFile("/state/keep", nil, 0o600)
	ff := fstest.NewFaultFS(c)
	l, _, err := Open(Options{FS: ff, Dir: crashDir, SegmentSize: crashSegment})
	if err != nil {
		t.Fatal(err)
	}
	s := l.Stream(key("a"))
	s.Begin(Fingerprint{}, true)
	if _, err := s.Append(batchesOf([]string{"acked 1"}), nil); err != nil {
		t.Fatal(err)
	}
	inLog := func(p string) bool { return strings.HasPrefix(p, crashDir+"/") }
	ff.Inject(fstest.Fault{Op: fstest.OpSync, Path: inLog, Err: syscall.EIO, LoseUnsynced: true})
	ff.Inject(fstest.Fault{Op: fstest.OpTruncate, Path: inLog, Err: syscall.EIO})
	if _, err := s.Append(batchesOf([]string{"failed"}), nil); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append with a failing sync: %v", err)
	}
	ff.Clear()
	if _, err := s.Append(batchesOf([]string{"acked 2"}), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, disk := range []struct {
		name string
		fs   *fstest.CrashFS
	}{{"kill -9 (the failed bytes still readable)", c.KillClone()}, {"power loss", c.CrashClone(nil)}} {
		l, rec, err := Open(Options{FS: disk.fs, Dir: crashDir, SegmentSize: crashSegment})
		if err != nil {
			t.Fatalf("%s: %v", disk.name, err)
		}
		got := contents(t, l, key("a"))
		l.Close()
		var flat []string
		for _, b := range got {
			flat = append(flat, b...)
		}
		if !slices.Equal(flat, []string{"acked 1", "acked 2"}) || len(rec.Corrupt) > 0 {
			t.Fatalf("%s: recovered %q (corrupt %v), want the two acknowledged batches only", disk.name, flat, rec.Corrupt)
		}
	}
}

// allocating lets c's files reserve space, as the journal's segments do on
// ext4, so the tests see reserved tails.
func allocating(c *fstest.CrashFS) *fstest.CrashFS {
	c.AllowAllocate(true)
	return c
}
