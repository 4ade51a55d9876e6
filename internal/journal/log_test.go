package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

func TestRoundTripAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	if err := a.Begin(Fingerprint{Size: 10, Tail: 3}, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Begin(Fingerprint{}, true); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 3<<20) // bigger than a read chunk
	if _, err := a.Append(batchesOf([]string{"a1", "a2"}, []string{big}), [][]byte{[]byte("m1"), nil}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(batchesOf([]string{"", "b1"}), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.MarkCompacted(Fingerprint{Size: 99, Tail: 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, fsys.OS, dir, Options{})
	defer l.Close()
	if rec.Segments != 1 || rec.TruncatedBytes != 0 || len(rec.Corrupt) != 0 {
		t.Fatalf("recovery %+v", rec)
	}
	if got := contents(t, l, key("a")); !slices.EqualFunc(got, [][]string{{"a1", "a2"}, {big}}, slices.Equal) {
		t.Fatalf("a: %d batches", len(got))
	}
	ea, _ := l.Epoch(key("a"))
	if ea.Base != (Fingerprint{10, 3}) || ea.Compacted == nil || *ea.Compacted != (Fingerprint{99, 5}) || string(ea.Batches[0].Meta) != "m1" || ea.Batches[1].Meta != nil {
		t.Fatalf("a epoch %+v", ea)
	}
	eb, _ := l.Epoch(key("b"))
	if eb.Compacted != nil {
		t.Fatalf("b epoch %+v", eb)
	}
	if got := contents(t, l, key("b")); !slices.Equal(got[0], []string{"", "b1"}) {
		t.Fatalf("b: %q", got)
	}
	if keys := l.Pending(); len(keys) != 2 {
		t.Fatalf("pending %v", keys)
	}
	// Appends continue the recovered streams, in a new segment.
	if _, err := l.Stream(key("b")).Append(batchesOf([]string{"b2"}), nil); err != nil {
		t.Fatal(err)
	}
	eb, _ = l.Epoch(key("b"))
	if len(eb.Batches) != 2 || eb.Batches[1].Seq != 2 || eb.Batches[1].Entries[0].Seg != 2 {
		t.Fatalf("b after append %+v", eb.Batches)
	}
}

func TestAppendWithoutBeginIsRefused(t *testing.T) {
	l, _ := openLog(t, fsys.OS, t.TempDir(), Options{})
	defer l.Close()
	_, err := l.Stream(key("x")).Append(batchesOf([]string{"e"}), nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("append to a stream never begun: %v", err)
	}
	_, err = l.Stream(key("x")).Append(batchesOf([]string{strings.Repeat("x", 100)}), nil)
	if err == nil {
		t.Fatal("still no stream")
	}
	small, _ := openLog(t, fsys.OS, t.TempDir(), Options{MaxRecord: 10})
	defer small.Close()
	s := small.Stream(key("x"))
	s.Begin(Fingerprint{}, true)
	if _, err := s.Append(batchesOf([]string{strings.Repeat("x", 11)}), nil); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("entry over the limit: %v", err)
	}
	if _, err := s.Append(batchesOf([]string{"ok"}), [][]byte{make([]byte, MaxMeta+1)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("meta over the limit: %v", err)
	}
}

// slowSyncFS holds every Sync until released, so requests pile up behind
// the first one and the committer must take them all in one write.
type slowSyncFS struct {
	*fstest.HookFS
	gate  chan struct{}
	mu    sync.Mutex
	syncs int
}

func newSlowSyncFS(inner fsys.FS) *slowSyncFS {
	f := &slowSyncFS{gate: make(chan struct{})}
	f.HookFS = fstest.NewHookFS(inner, fstest.Hooks{Before: func(c fstest.Call) error {
		if c.Name == "sync" {
			f.mu.Lock()
			f.syncs++
			gate := f.gate
			f.mu.Unlock()
			<-gate
		}
		return nil
	}})
	return f
}

// TestOneSyncForManySessions is the point of the shared log: 64 sessions
// appending at once while a sync is under way cost one more sync, not 64.
func TestOneSyncForManySessions(t *testing.T) {
	sfs := newSlowSyncFS(fsys.OS)
	close(sfs.gate)
	l, _ := openLog(t, sfs, t.TempDir(), Options{})
	defer l.Close()
	const n = 64
	streams := make([]*Stream, n)
	for i := range streams {
		streams[i] = l.Stream(key(fmt.Sprint(i)))
		streams[i].Begin(Fingerprint{}, true)
	}
	before := l.Stats().Syncs
	release := make(chan struct{})
	sfs.mu.Lock()
	sfs.gate = release
	sfs.syncs = 0
	sfs.mu.Unlock()
	// The first append takes the committer into a sync that waits.
	firstDone := make(chan error)
	go func() {
		_, err := streams[0].Append(batchesOf([]string{"first"}), nil)
		firstDone <- err
	}()
	for {
		sfs.mu.Lock()
		waiting := sfs.syncs > 0
		sfs.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func(s *Stream) {
			defer wg.Done()
			_, err := s.Append(batchesOf([]string{"e-" + s.key.SessionID}), nil)
			errs <- err
		}(streams[i])
	}
	// Everyone is queued once the journal's queue holds them all.
	for {
		l.qmu.Lock()
		queued := len(l.queue)
		l.qmu.Unlock()
		if queued >= n-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Stats().Syncs - before; got != 2 {
		t.Fatalf("%d sessions appending behind one sync took %d syncs, want 2", n, got)
	}
	for i := 1; i < n; i++ {
		if got := contents(t, l, key(fmt.Sprint(i))); len(got) != 1 || got[0][0] != "e-"+fmt.Sprint(i) {
			t.Fatalf("session %d: %q", i, got)
		}
	}
}

// TestSegmentsGoWhenStreamsMoveOn: a segment is deleted once every stream
// with records in it began anew (compacted), oldest first, never the
// current one; and recovery then knows nothing of the old streams.
func TestSegmentsGoWhenStreamsMoveOn(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{SegmentSize: 4096})
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	a.Begin(Fingerprint{}, true)
	b.Begin(Fingerprint{}, true)
	if _, err := b.Append(batchesOf([]string{"b-only"}), nil); err != nil {
		t.Fatal(err)
	}
	entry := strings.Repeat("e", 1500)
	for i := 0; i < 6; i++ {
		if _, err := a.Append(batchesOf([]string{entry}), nil); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
		return m
	}
	n := len(segs())
	if n < 2 {
		t.Fatalf("%d segments: the workload should have rolled", n)
	}
	// a moves on; b still holds the first segment, and so every later
	// one stays too (segments go oldest first).
	if err := a.Begin(Fingerprint{Size: 6 * 1501}, false); err != nil {
		t.Fatal(err)
	}
	if got := len(segs()); got < n {
		t.Fatalf("%d segments, was %d: b's segment or a later one went", got, n)
	}
	if got := contents(t, l, key("b")); len(got) != 1 || got[0][0] != "b-only" {
		t.Fatalf("b: %q", got)
	}
	if err := b.Begin(Fingerprint{Size: 7}, false); err != nil {
		t.Fatal(err)
	}
	// The committer collects after each commit; one more to be sure it ran.
	l.Stream(key("c")).Begin(Fingerprint{}, false)
	if got := segs(); len(got) != 1 {
		t.Fatalf("segments left after every stream moved on: %v", got)
	}
	l.Close()
	l, _ = openLog(t, fsys.OS, dir, Options{SegmentSize: 4096})
	defer l.Close()
	if _, ok := l.Epoch(key("a")); ok {
		t.Fatal("a's superseded stream came back")
	}
	if keys := l.Pending(); len(keys) != 0 {
		t.Fatalf("pending after everything moved on: %v", keys)
	}
}

// TestPressureCompactsIdleStreams: an idle transcript holding the oldest
// segment is reported once the journal is over MaxSize, and the journal stays
// bounded when the reported transcripts begin anew.
func TestPressureCompactsIdleStreams(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var told []layout.Key
	var busyTold atomic.Bool
	var l *Log
	const seg, max = 8 << 10, 32 << 10
	l, _ = openLog(t, fsys.OS, dir, Options{SegmentSize: seg, MaxSize: max, OnPressure: func(keys []layout.Key) {
		mu.Lock()
		told = append(told, keys...)
		mu.Unlock()
		for _, k := range keys {
			if k == key("busy") {
				// Its handle is the loop's below (one per key at a time).
				busyTold.Store(true)
				continue
			}
			// What the writer does: compact, then begin anew.
			l.Stream(k).Begin(Fingerprint{Size: 1}, false)
		}
	}})
	defer l.Close()
	idle := l.Stream(key("idle"))
	idle.Begin(Fingerprint{}, true)
	if _, err := idle.Append(batchesOf([]string{"once"}), nil); err != nil {
		t.Fatal(err)
	}
	busy := l.Stream(key("busy"))
	busy.Begin(Fingerprint{}, true)
	entry := strings.Repeat("b", 1000)
	largest := int64(0)
	for i := 0; i < 400; i++ {
		if _, err := busy.Append(batchesOf([]string{entry}), nil); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 || busyTold.Swap(false) {
			// The busy one compacts now and then, as its writer would,
			// and when the pressure reports it.
			if err := busy.Begin(Fingerprint{Size: int64(i)}, false); err != nil {
				t.Fatal(err)
			}
		}
		if s := l.Stats().Size; s > largest {
			largest = s
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(told, key("idle")) {
		t.Fatalf("the idle transcript holding the oldest segment was never reported (told %v)", told)
	}
	// The bound of the package comment: MaxSize + one segment + what is
	// written while the reported compactions run (here a few appends).
	if bound := int64(max + 2*seg); largest > bound {
		t.Fatalf("log reached %d bytes, bound %d", largest, bound)
	}
}

func TestTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	s := l.Stream(key("a"))
	s.Begin(Fingerprint{}, true)
	if _, err := s.Append(batchesOf([]string{"kept"}), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := filepath.Join(dir, segName(1))
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	// Half of a frame of a later write: an entry, no commit.
	torn := frame.AppendParts(nil, typeEntry, 12345, 0, putStream(nil, 1<<32|1), []byte("lost"))
	f.Write(torn[:len(torn)-5])
	f.Write(make([]byte, 100))
	f.Close()
	l, rec := openLog(t, fsys.OS, dir, Options{})
	defer l.Close()
	if rec.TruncatedBytes != int64(len(torn)-5+100) || len(rec.Corrupt) != 0 {
		t.Fatalf("recovery %+v", rec)
	}
	if got := contents(t, l, key("a")); len(got) != 1 || got[0][0] != "kept" {
		t.Fatalf("%q", got)
	}
}

// damagedLog writes, to a log in dir, a batch of a, one of b and one more
// of a, closes it and flips a byte in b's batch: damage followed by an
// intact write. It returns the segment's path and its bytes now.
func damagedLog(t *testing.T, dir, aFirst, bDamaged, aAfter string) (string, []byte) {
	t.Helper()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	a.Begin(Fingerprint{}, true)
	b.Begin(Fingerprint{}, true)
	for _, w := range []struct {
		s    *Stream
		line string
	}{{a, aFirst}, {b, bDamaged}, {a, aAfter}} {
		if _, err := w.s.Append(batchesOf([]string{w.line}), nil); err != nil {
			t.Fatal(err)
		}
	}
	eb, _ := l.Epoch(key("b"))
	seg, off := eb.Batches[0].Entries[0].Seg, eb.Batches[0].Entries[0].Off
	l.Close()
	path := filepath.Join(dir, segName(seg))
	data, _ := os.ReadFile(path)
	data[off+frame.HeaderSize+streamSize] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestDamagedSegment: damage followed by a later write's intact record is
// not a torn tail. The start is refused, changing nothing, with the count
// of acknowledged entries lost; told to accept the loss, it keeps a copy,
// reads on past the damage (the batch after it is recovered) and later
// segments still count; the next start reads the same and keeps no second
// copy.
func TestDamagedSegment(t *testing.T) {
	dir := t.TempDir()
	path, data := damagedLog(t, dir, "a-first", "b-damaged", "a-after")

	_, _, err := Open(Options{FS: fsys.OS, Dir: dir})
	if !errors.Is(err, ErrLost) || !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "1 acknowledged entries lost") || !strings.Contains(err.Error(), "--accept-journal-loss") {
		t.Fatalf("Open over the damage: %v, want the loss refused", err)
	}
	if now, _ := os.ReadFile(path); !slices.Equal(now, data) {
		t.Fatal("the refused start changed the segment")
	}

	l, rec := openLog(t, fsys.OS, dir, Options{AcceptLoss: true})
	if len(rec.Corrupt) != 1 || len(rec.Lost) != 1 || rec.Lost[0].Entries != 1 {
		t.Fatalf("damage not reported: %+v", rec)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("no copy kept aside: %v", aside)
	}
	if kept, _ := os.ReadFile(aside[0]); !slices.Equal(kept, data) {
		t.Fatal("the copy kept aside is not the damaged segment")
	}
	if got := contents(t, l, key("a")); len(got) != 2 || got[0][0] != "a-first" || got[1][0] != "a-after" {
		t.Fatalf("a: %q, want the batches before and after the damage", got)
	}
	if _, ok := l.Epoch(key("b")); ok {
		if got := contents(t, l, key("b")); len(got) != 0 {
			t.Fatalf("b: %q", got)
		}
	}
	// The journal goes on.
	if _, err := l.Stream(key("a")).Append(batchesOf([]string{"a-next"}), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// Accepted once: the next start reads the same, refuses nothing, and
	// keeps no second copy.
	l, rec = openLog(t, fsys.OS, dir, Options{})
	defer l.Close()
	if len(rec.Lost) != 0 || len(rec.Corrupt) != 1 {
		t.Fatalf("second start: %+v", rec)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("copies kept: %v", aside)
	}
	if got := contents(t, l, key("a")); len(got) != 3 {
		t.Fatalf("a after the second start: %q", got)
	}
}

// TestDamagedSegmentCopyIsWhole: the copy of a damaged segment is never
// left partial under its name: a copy that fails midway (a kill, a full
// disk) leaves only a temp file, which the next start removes before it
// copies again, whole.
func TestDamagedSegmentCopyIsWhole(t *testing.T) {
	dir := t.TempDir()
	x := strings.Repeat("x", 4000)
	path, data := damagedLog(t, dir, x, x, x)

	failing := fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(c fstest.Call) error {
		if c.Name == "sync" && strings.Contains(c.Path, ".corrupt-") {
			return syscall.ENOSPC
		}
		return nil
	}})
	if _, _, err := Open(Options{FS: failing, Dir: dir, AcceptLoss: true}); err == nil || !strings.Contains(err.Error(), "copy the segment away by hand") {
		t.Fatalf("Open with the copy failing: %v", err)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("a partial copy is left under the copy's name: %v", aside)
	}
	// A temp a kill left behind.
	leftover := filepath.Join(dir, "."+filepath.Base(path)+".corrupt-1"+corruptTempSuffix)
	if err := os.WriteFile(leftover, data[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, fsys.OS, dir, Options{AcceptLoss: true})
	defer l.Close()
	if len(rec.Corrupt) != 1 {
		t.Fatalf("recovery %+v", rec)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("copies: %v", aside)
	}
	if kept, _ := os.ReadFile(aside[0]); !slices.Equal(kept, data) {
		t.Fatal("the copy is not the damaged segment")
	}
	if _, err := os.Lstat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the temp a kill left: %v", err)
	}
}

// TestCloseForgetsOnlyItsOwnStream: a writer retiring after compaction
// closes its handle while the session's next writer may already have begun
// a stream; the old handle's Close must not forget the new stream (the
// next append would find none), whatever the order.
func TestCloseForgetsOnlyItsOwnStream(t *testing.T) {
	l, _ := openLog(t, fsys.OS, t.TempDir(), Options{})
	defer l.Close()
	k := key("a")
	old := l.Stream(k)
	if err := old.Begin(Fingerprint{}, false); err != nil {
		t.Fatal(err)
	}
	next := l.Stream(k)
	if err := next.Begin(Fingerprint{Size: 1}, false); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if _, err := next.Append(batchesOf([]string{"after"}), nil); err != nil {
		t.Fatalf("the new stream was forgotten by the old handle's Close: %v", err)
	}
	if e, ok := l.Epoch(k); !ok || e.Base.Size != 1 || len(e.Batches) != 1 {
		t.Fatalf("epoch %+v %v", e, ok)
	}
	next.Close()
	if _, ok := l.Epoch(k); !ok {
		t.Fatal("a stream with a batch was forgotten at Close")
	}
}

// A stream begun after a compaction and then left empty holds nothing, so
// the segment with its Bind may go; its next entries land in a later
// segment, where recovery would find no Bind for them and drop acknowledged
// entries. So a stream's first entries bind it anew when its Bind is in an
// older segment (the writer's fault sweep finds the case).
func TestEmptyStreamWhoseBindSegmentWentKeepsItsEntries(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{SegmentSize: 2048})
	idle := l.Stream(key("idle"))
	if err := idle.Begin(Fingerprint{Size: 5}, false); err != nil {
		t.Fatal(err)
	}
	busy := l.Stream(key("busy"))
	busy.Begin(Fingerprint{}, true)
	for i := 0; i < 5; i++ {
		if _, err := busy.Append(batchesOf([]string{strings.Repeat("b", 1000)}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := busy.Begin(Fingerprint{Size: 5000}, false); err != nil {
		t.Fatal(err)
	}
	// The committer collects after answering; its next commit comes
	// after that collection.
	l.Stream(key("barrier")).Begin(Fingerprint{}, false)
	if _, err := os.Stat(filepath.Join(dir, segName(1))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the first segment, holding only the idle stream's Bind, should have gone: %v", err)
	}
	if _, err := idle.Append(batchesOf([]string{"late"}), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, _ = openLog(t, fsys.OS, dir, Options{SegmentSize: 2048})
	defer l.Close()
	if got := contents(t, l, key("idle")); len(got) != 1 || got[0][0] != "late" {
		t.Fatalf("the acknowledged entry of a stream whose Bind segment went: %q", got)
	}
	if e, _ := l.Epoch(key("idle")); e.Base.Size != 5 {
		t.Fatalf("base %+v", e.Base)
	}
}

// TestCommitDelayGathersSiblings: while several sessions are active, a
// small commit waits for others (here a long delay, so the second
// request surely arrives within it) and both share one sync; a lone
// stream never waits (with an hour's delay, the append still returns).
func TestCommitDelayGathersSiblings(t *testing.T) {
	l, _ := openLog(t, fsys.OS, t.TempDir(), Options{CommitDelay: time.Hour})
	defer l.Close()
	lone := l.Stream(key("lone"))
	lone.Begin(Fingerprint{}, true)
	done := make(chan error, 1)
	go func() {
		_, err := lone.Append(batchesOf([]string{"alone"}), nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lone stream's append waited for siblings that do not exist")
	}
	// A log with a delay the test can afford in its warm-up (groups of
	// fewer than four may wait out the delay there).
	l, _ = openLog(t, fsys.OS, t.TempDir(), Options{CommitDelay: 500 * time.Millisecond})
	defer l.Close()
	l.window = time.Minute // the warm-up's appends count however slow the machine
	// Five streams begin (compactions never wait), then append at
	// once: now the journal is busy.
	var ss []*Stream
	for i := 0; i < 5; i++ {
		s := l.Stream(key(fmt.Sprint("s", i)))
		if err := s.Begin(Fingerprint{}, false); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	var warm sync.WaitGroup
	for _, s := range ss {
		warm.Add(1)
		go func(s *Stream) {
			defer warm.Done()
			if _, err := s.Append(batchesOf([]string{"warm"}), nil); err != nil {
				t.Error(err)
			}
		}(s)
	}
	warm.Wait()
	before := l.Stats().Syncs
	var wg sync.WaitGroup
	for i, s := range ss[:4] {
		wg.Add(1)
		go func(i int, s *Stream) {
			defer wg.Done()
			if i > 0 {
				// Arrive while the first one waits.
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := s.Append(batchesOf([]string{"e"}), nil); err != nil {
				t.Error(err)
			}
		}(i, s)
	}
	wg.Wait()
	if got := l.Stats().Syncs - before; got != 1 {
		t.Fatalf("4 appends of 4 active sessions took %d syncs, want 1 (the first waited for the others)", got)
	}
}

// TestCommitDelayEndsWhenEveryoneIsIn: a commit waits for siblings only
// while some stream that appended lately is not in its group yet. A few
// clients each waiting for its own append (fewer than siblingTarget) are
// all in once each has sent: the commit goes then, not when the delay
// (an hour here) ends, and takes them all in one sync.
func TestCommitDelayEndsWhenEveryoneIsIn(t *testing.T) {
	l, _ := openLog(t, fsys.OS, t.TempDir(), Options{CommitDelay: 200 * time.Millisecond})
	defer l.Close()
	l.window = time.Minute
	var ss []*Stream
	for i := 0; i < 5; i++ {
		s := l.Stream(key(fmt.Sprint("s", i)))
		if err := s.Begin(Fingerprint{}, false); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	appendAll := func(what string) {
		t.Helper()
		var wg sync.WaitGroup
		for _, s := range ss {
			wg.Add(1)
			go func(s *Stream) {
				defer wg.Done()
				if _, err := s.Append(batchesOf([]string{what}), nil); err != nil {
					t.Error(err)
				}
			}(s)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: appends of every recently active stream still wait for siblings after a minute", what)
		}
	}
	appendAll("warm") // now all five appended lately
	// The committer reads the delay after taking a request this test
	// sends later: no race.
	l.opt.CommitDelay = time.Hour
	before := l.Stats().Syncs
	appendAll("all in")
	if got := l.Stats().Syncs - before; got != 1 {
		t.Fatalf("5 appends of the 5 active sessions took %d syncs, want 1 (the first waits until all are in)", got)
	}
}

// TestNewerSegmentRefused: a segment a newer sessiond wrote (a higher
// format version in its header) stops the start with a message saying
// so, and is left exactly as it was.
func TestNewerSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	p, err := json.Marshal(segHeader{Version: formatV + 1, Seq: 1, ID: 77})
	if err != nil {
		t.Fatal(err)
	}
	seg := append(frame.Append(nil, typeHeader, p, 0, 0), "records of a newer format"...)
	path := filepath.Join(dir, segName(1))
	if err := os.WriteFile(path, seg, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = Open(Options{FS: fsys.OS, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "newer than this sessiond understands") {
		t.Fatalf("Open: %v, want the newer format refused", err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(seg) {
		t.Fatal("the newer segment was changed")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused start left files: %v", ents)
	}
}

// A journal folder holding a folder (per-transcript journals of a
// development build) is refused, and nothing in it is touched.
func TestOlderJournalsRefused(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "-home-me-p", "0b7e7c3e-8a4b-4c1e-9f00-000000000001.wal")
	os.MkdirAll(filepath.Dir(old), 0o700)
	os.WriteFile(old, []byte("entries"), 0o600)
	_, _, err := Open(Options{FS: fsys.OS, Dir: dir})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "per-transcript journals") || !strings.Contains(err.Error(), "sessionctl flush --all") {
		t.Fatalf("Open = %v; want a refusal saying what the folder holds and what to do", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("the refused Open left %d entries in the folder, want the one it found", len(ents))
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "entries" {
		t.Fatalf("the older journal was touched: %q %v", b, err)
	}
}
