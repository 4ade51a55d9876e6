package wal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
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
	old.Begin(Fingerprint{}, 0, true)
	stale := strings.Repeat("S", 1500)
	for i := 0; i < 8; i++ {
		if _, err := old.Append(batchesOf([]string{stale}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Begin(Fingerprint{Size: 8 * 1501}, 0, false); err != nil {
		t.Fatal(err)
	}
	spares, _ := filepath.Glob(filepath.Join(dir, "*"+spareSuffix))
	if len(spares) == 0 {
		t.Fatalf("no spare kept after the old segments were collected")
	}
	// New records go into reused files: enough to roll to the spare.
	cur := l.Stream(key("cur"))
	cur.Begin(Fingerprint{}, 0, true)
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
// the room freed for compactions is not taken back by the log; appends
// still work. Cleared, the log reserves and keeps spares again. Backlog
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
		s.Begin(Fingerprint{}, 0, true)
		for i := 0; i < n; i++ {
			if _, err := s.Append(batchesOf([]string{strings.Repeat("x", 1500)}), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Begin(Fingerprint{Size: int64(n) * 1501}, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	fill("a", 8)
	if spareFiles() == 0 || l.Spares() == 0 {
		t.Fatal("no spare kept: the test needs one")
	}
	// Backlog: a stream with entries counts, a compacted one does not.
	b := l.Stream(key("b"))
	b.Begin(Fingerprint{}, 0, true)
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
	if err := b.Begin(Fingerprint{Size: 10}, 0, false); err != nil {
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
	if err := b.Begin(Fingerprint{Size: 15}, 0, false); err != nil {
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
