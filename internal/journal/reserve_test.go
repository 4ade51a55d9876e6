package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// TestSegmentsAreReservedAndReused: a new segment has its space reserved
// (the file is Prealloc bytes long while its records end far sooner); a
// collected segment becomes a spare and then a later segment; records
// left in a reused file from its earlier life never come back at
// recovery, even after a crash (no Close) leaves them behind the tail;
// and a clean Close gives the reserved tail back.
func TestSegmentsAreReservedAndReused(t *testing.T) {
	dir := t.TempDir()
	const seg = 8192
	opt := Options{SegmentSize: seg}
	l, _ := openLog(t, fsys.OS, dir, opt)
	size := func(name string) int64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if got := size(segName(1)); got != seg {
		t.Fatalf("a new segment is %d bytes long, want the %d reserved", got, seg)
	}
	if st := l.Stats(); st.Size >= seg {
		t.Fatalf("Stats.Size %d counts the reserved space", st.Size)
	}
	// Old records: the stream "old" fills segments 1 and 2 with
	// distinctive entries, then moves on, so both are collected.
	old := l.Stream(key("old"))
	old.Begin(Fingerprint{}, true)
	stale := strings.Repeat("S", 1500)
	for i := 0; i < 8; i++ {
		if _, err := old.Append(batchesOf([]string{stale}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Begin(Fingerprint{Size: 8 * 1501}, false); err != nil {
		t.Fatal(err)
	}
	spares, _ := filepath.Glob(filepath.Join(dir, "*"+spareSuffix))
	if len(spares) == 0 {
		t.Fatalf("no spare kept after the old segments were collected")
	}
	// New records go into reused files: enough to roll to the spare.
	cur := l.Stream(key("cur"))
	cur.Begin(Fingerprint{}, true)
	var want []string
	for i := 0; i < 20; i++ {
		e := strings.Repeat(string(rune('a'+i)), 300)
		if _, err := cur.Append(batchesOf([]string{e}), nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	// The newest segment is a reused file: stale records sit past its end.
	l.mu.Lock()
	last := l.cur
	l.mu.Unlock()
	raw, err := os.ReadFile(last.path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw[last.end:]), strings.Repeat("S", 100)) {
		t.Fatalf("the current segment %s holds no stale records past its end: no spare was reused", last.path)
	}
	// A crash: no Close. A second Log reads the folder as recovery would.
	l2, rec := openLog(t, fsys.OS, dir, opt)
	defer l2.Close()
	got := contents(t, l2, key("cur"))
	var flat []string
	for _, b := range got {
		flat = append(flat, b...)
	}
	if strings.Join(flat, "|") != strings.Join(want, "|") {
		t.Fatalf("recovered %d entries, want the %d acknowledged (stale records came back?)", len(flat), len(want))
	}
	if _, ok := l2.Epoch(key("old")); ok {
		t.Fatal("the superseded stream came back from a reused file")
	}
	if rec.TruncatedBytes == 0 {
		t.Fatal("recovery cut nothing past the last record of a reused file")
	}
	l.Close() // the first log's files; it may not append after the second read them
	// A clean Close gives the reserved space back.
	l2.mu.Lock()
	now := l2.cur
	l2.mu.Unlock()
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := size(filepath.Base(now.path)); got != now.end {
		t.Fatalf("after Close the current segment is %d bytes, its records end at %d", got, now.end)
	}
}

// TestLowSpaceGivesReservedSpaceBack: once the disk is short of space
// (SetLowSpace), the spares are deleted at once, a collected segment is
// deleted instead of kept, and a new segment reserves nothing ahead, so
// the room freed for compactions is not taken back by the journal; appends
// still work. Cleared, the journal reserves and keeps spares again. Backlog
// counts what is logged and not compacted.
func TestLowSpaceGivesReservedSpaceBack(t *testing.T) {
	dir := t.TempDir()
	const seg = 8192
	l, _ := openLog(t, fsys.OS, dir, Options{SegmentSize: seg})
	defer l.Close()
	spareFiles := func() int {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(dir, "*"+spareSuffix))
		return len(m)
	}
	// fill logs n entries of 1500 bytes to a new stream of name, then
	// compacts it (a new Bind), so the segments it filled are collected.
	fill := func(name string, n int) {
		t.Helper()
		s := l.Stream(key(name))
		s.Begin(Fingerprint{}, true)
		for i := 0; i < n; i++ {
			if _, err := s.Append(batchesOf([]string{strings.Repeat("x", 1500)}), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Begin(Fingerprint{Size: int64(n) * 1501}, false); err != nil {
			t.Fatal(err)
		}
	}
	fill("a", 8)
	if spareFiles() == 0 || l.Spares() == 0 {
		t.Fatal("no spare kept: the test needs one")
	}
	// Backlog: a stream with entries counts, a compacted one does not.
	b := l.Stream(key("b"))
	b.Begin(Fingerprint{}, true)
	if _, err := b.Append(batchesOf([]string{"one", "three"}), nil); err != nil {
		t.Fatal(err)
	}
	if n, bytes := l.Backlog(); n != 1 || bytes != 8 {
		t.Fatalf("Backlog = %d transcripts, %d bytes; want 1 and 8", n, bytes)
	}
	behind := l.Behind()
	stream, ok := behind[key("b")]
	if len(behind) != 1 || !ok || !l.StillBehind(key("b"), stream) {
		t.Fatalf("Behind = %v; want b's stream, still behind", behind)
	}
	if err := b.Begin(Fingerprint{Size: 10}, false); err != nil {
		t.Fatal(err)
	}
	if n, bytes := l.Backlog(); n != 0 || bytes != 0 {
		t.Fatalf("Backlog after the compaction = %d transcripts, %d bytes; want none", n, bytes)
	}
	if l.StillBehind(key("b"), stream) || len(l.Behind()) != 0 {
		t.Fatalf("after the compaction: StillBehind %v, Behind %v; want neither", l.StillBehind(key("b"), stream), l.Behind())
	}
	if _, err := b.Append(batchesOf([]string{"four"}), nil); err != nil {
		t.Fatal(err)
	}
	if l.StillBehind(key("b"), stream) {
		t.Fatal("a new stream's entries count as the compacted stream's")
	}
	if err := b.Begin(Fingerprint{Size: 15}, false); err != nil {
		t.Fatal(err)
	}

	l.SetLowSpace(true)
	if spareFiles() != 0 || l.Spares() != 0 {
		t.Fatalf("low space: %d spare files left on disk", spareFiles())
	}
	fill("c", 8)
	if spareFiles() != 0 {
		t.Fatal("low space: a collected segment was kept as a spare")
	}
	l.mu.Lock()
	cur := l.cur
	l.mu.Unlock()
	if fi, err := os.Stat(cur.path); err != nil || fi.Size() >= seg {
		t.Fatalf("low space: the new segment %s reserved space ahead (%v bytes, %v)", cur.path, fi.Size(), err)
	}

	l.SetLowSpace(false)
	fill("d", 8)
	if spareFiles() == 0 {
		t.Fatal("space back: no spare kept again")
	}
}

// TestReservationLeavesTheDiskRoom: a new segment's reservation never
// takes the disk's last Options.Keep bytes: it shrinks to what is free
// beyond them, and is not made at all when that is under minReserve.
func TestReservationLeavesTheDiskRoom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		free, keep int64
		want       func(size int64) bool
		what       string
	}{
		{"room for all", 100 << 20, 4 << 20, func(n int64) bool { return n == 8<<20 }, "the whole 8 MiB"},
		{"room for part", 9 << 20, 4 << 20, func(n int64) bool { return n > 4<<20 && n <= 5<<20+4096 }, "about 5 MiB (free less keep)"},
		{"no room", 4<<20 + 100<<10, 4 << 20, func(n int64) bool { return n < 64<<10 }, "nothing reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fstest.NewCrashFS()
			c.AllowAllocate(true)
			opt := Options{SegmentSize: 8 << 20, Keep: tc.keep, FreeSpace: func(string) (int64, error) { return tc.free, nil }}
			l, _ := openLog(t, c, "/log", opt)
			defer l.Close()
			b, err := c.ReadFile("/log/" + segName(1))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(int64(len(b))) {
				t.Fatalf("with %d free and %d kept, the segment is %d bytes long; want %s", tc.free, tc.keep, len(b), tc.what)
			}
		})
	}
}

// TestOpenOnAFullDisk: a log whose new segment cannot be made (ENOSPC)
// still opens and serves what it holds; appends fail with ErrNoSpace,
// and once the disk has room again the next append makes the segment.
func TestOpenOnAFullDisk(t *testing.T) {
	c := fstest.NewCrashFS()
	l, _ := openLog(t, c, "/log", Options{})
	s := l.Stream(key("a"))
	if err := s.Begin(Fingerprint{}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(batchesOf([]string{"before"}), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()

	ff := fstest.NewFaultFS(c)
	full := func(p string) bool { return strings.Contains(p, ".tmp-") }
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: full, Err: syscall.ENOSPC, Sticky: true})
	l, rec, err := Open(Options{FS: ff, Dir: "/log"})
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	defer l.Close()
	if rec.NoSegment == nil || !errors.Is(rec.NoSegment, errdefs.ErrNoSpace) {
		t.Fatalf("Recovery.NoSegment = %v, want the full disk", rec.NoSegment)
	}
	if got := contents(t, l, key("a")); len(got) != 1 || got[0][0] != "before" {
		t.Fatalf("the journal serves %q", got)
	}
	s = l.Stream(key("a"))
	if _, err := s.Append(batchesOf([]string{"refused"}), nil); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("append on the full disk: %v, want ErrNoSpace", err)
	}
	ff.Clear()
	if _, err := s.Append(batchesOf([]string{"after"}), nil); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	if got := contents(t, l, key("a")); len(got) != 2 || got[1][0] != "after" {
		t.Fatalf("the journal holds %q", got)
	}
}
