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
