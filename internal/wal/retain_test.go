package wal

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// history reads key's entries back through History.
func history(t testing.TB, l *Log, k layout.Key) []string {
	t.Helper()
	var out []string
	if _, err := l.History(k, func(sp Span, e []byte) error {
		if got, err := l.ReadEntry(sp, nil); err == nil && string(got) != string(e) {
			t.Errorf("History's span %v reads %.20q, it gave %.20q", sp, got, e)
		}
		out = append(out, string(e))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fill appends n entries of about size bytes to s, each its own batch,
// named prefix-i, and returns them.
func fill(t testing.TB, s *Stream, prefix string, n, size int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		e := fmt.Sprintf("%s-%d-", prefix, i)
		e += strings.Repeat("x", max(0, size-len(e)))
		if _, err := s.Append(batchesOf([]string{e}), nil); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// compact does what a writer's compaction does to the log: a marker, then
// a new stream, durable, which lets the old one's segments go.
func compact(t testing.TB, s *Stream) {
	t.Helper()
	if err := s.MarkCompacted(Fingerprint{Size: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(Fingerprint{Size: 1}, 0, false); err != nil {
		t.Fatal(err)
	}
}

func retainedFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+retainedSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRetainedSegmentsReadBack: segments let go after a compaction are
// kept as retained files, not read by recovery, listed in Stats, and
// History reads every entry of the transcript back from them and from
// the live segments, in the order they were logged (superseded streams
// included, other transcripts' entries not), across a restart. Once they
// are older than the retention, they go.
func TestRetainedSegmentsReadBack(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	opt := Options{SegmentSize: 8192, Retention: time.Hour, Now: func() time.Time { return now }}
	l, _ := openLog(t, fsys.OS, dir, opt)
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	a.Begin(Fingerprint{}, 0, true)
	b.Begin(Fingerprint{}, 0, true)
	var want []string
	for round := 0; round < 3; round++ {
		want = append(want, fill(t, a, fmt.Sprintf("a%d", round), 8, 1500)...)
		fill(t, b, fmt.Sprintf("b%d", round), 2, 700)
		compact(t, a)
		compact(t, b)
	}
	// One more commit lets the last compactions' segments go.
	want = append(want, fill(t, a, "a-last", 1, 100)...)
	st := l.Stats()
	if st.RetainedSegments == 0 || st.RetainedBytes == 0 || !st.OldestRetained.Equal(now.Truncate(time.Millisecond)) {
		t.Fatalf("Stats after compactions: %+v, want retained segments let go at %v", st, now)
	}
	if n := len(retainedFiles(t, dir)); n != st.RetainedSegments {
		t.Fatalf("%d retained files, Stats says %d", n, st.RetainedSegments)
	}
	if got := history(t, l, key("a")); !slices.Equal(got, want) {
		t.Fatalf("History read back %d entries, want the %d logged, in order:\ngot  %.300q\nwant %.300q", len(got), len(want), got, want)
	}
	l.Close()

	l, rec := openLog(t, fsys.OS, dir, opt)
	if rec.Segments != l.Stats().Segments-1 {
		// The live segments before this start, not the retained ones.
		t.Fatalf("recovery read %d segments; the log has %d live (one new): it must not read retained ones", rec.Segments, l.Stats().Segments)
	}
	if l.Stats().RetainedSegments != st.RetainedSegments {
		t.Fatalf("after a restart %d retained segments listed, want %d", l.Stats().RetainedSegments, st.RetainedSegments)
	}
	if got := history(t, l, key("a")); !slices.Equal(got, want) {
		t.Fatalf("after a restart History read back %d entries, want %d", len(got), len(want))
	}

	// Past the retention, the next commit lets them go.
	now = now.Add(time.Hour + time.Second)
	c := l.Stream(key("c"))
	c.Begin(Fingerprint{}, 0, true)
	fill(t, c, "c", 1, 10)
	if st := l.Stats(); st.RetainedSegments != 0 || st.RetainedBytes != 0 || !st.OldestRetained.IsZero() {
		t.Fatalf("past the retention: %+v, want nothing retained", st)
	}
	if n := len(retainedFiles(t, dir)); n != 0 {
		t.Fatalf("%d retained files left past the retention", n)
	}
	if got := history(t, l, key("a")); len(got) >= len(want) || len(got) > 0 && !strings.HasPrefix(got[len(got)-1], "a-last") {
		t.Fatalf("past the retention History still reads %d entries (last %.20q)", len(got), got[len(got)-1])
	}
	l.Close()
}

// TestRetentionSizeBudget: the retained segments never add up to more
// than RetentionSize; the oldest go first.
func TestRetentionSizeBudget(t *testing.T) {
	dir := t.TempDir()
	const seg, budget = 8192, 3 * 8192
	opt := Options{SegmentSize: seg, Retention: 24 * time.Hour, RetentionSize: budget}
	l, _ := openLog(t, fsys.OS, dir, opt)
	defer l.Close()
	a := l.Stream(key("a"))
	a.Begin(Fingerprint{}, 0, true)
	var want []string
	maxRetained := 0
	for round := 0; round < 12; round++ {
		want = append(want, fill(t, a, fmt.Sprintf("r%d", round), 6, 1500)...)
		compact(t, a)
		st := l.Stats()
		if st.RetainedBytes > budget {
			t.Fatalf("round %d: %d bytes retained, over the %d budget", round, st.RetainedBytes, budget)
		}
		maxRetained = max(maxRetained, st.RetainedSegments)
	}
	if maxRetained < 2 {
		t.Fatalf("at most %d segments retained: the budget of 3 segments was never used", maxRetained)
	}
	got := history(t, l, key("a"))
	if len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("History read %d of %d entries: want the newest only", len(got), len(want))
	}
	// What is left is the newest part, whole: the oldest went first.
	if tail := want[len(want)-len(got):]; !slices.Equal(got, tail) {
		t.Fatalf("History is not the newest %d entries logged:\ngot  %.200q\nwant %.200q", len(got), got, tail)
	}
}

// TestRetainedDroppedOnFullDisk: when a new segment cannot be made for
// want of space, the retained segments go and the append goes through.
func TestRetainedDroppedOnFullDisk(t *testing.T) {
	c := allocating(fstest.NewCrashFS())
	c.WriteFile("/state/keep", nil, 0o600)
	ff := fstest.NewFaultFS(c)
	opt := Options{FS: ff, Dir: crashDir, SegmentSize: crashSegment, Retention: time.Hour}
	l, _, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := l.Stream(key("a"))
	a.Begin(Fingerprint{}, 0, true)
	fill(t, a, "a", 8, 1500)
	compact(t, a)
	fill(t, a, "b", 1, 10)
	if l.Stats().RetainedSegments == 0 {
		t.Fatal("nothing retained")
	}
	// The next segment's creation fails once with ENOSPC.
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: func(p string) bool { return strings.Contains(p, ".tmp-") }, Err: syscall.ENOSPC})
	fill(t, a, "c", 6, 1500)
	if len(ff.Fired()) == 0 {
		t.Fatal("the fault never fired: no segment was made")
	}
	if st := l.Stats(); st.RetainedSegments != 0 {
		t.Fatalf("%d segments still retained after a full disk", st.RetainedSegments)
	}
}

// retainModel is what retainWorkload sent and had acknowledged, per
// transcript, in order (every append one entry, one caller).
type retainModel struct {
	sent  map[layout.Key][]string
	acked map[layout.Key]int
	// expired is set once the workload moved its clock past the
	// retention: from then on old entries may rightly be gone.
	expired bool
	now     time.Time
}

// retainWorkload: two transcripts append across small segments and
// compact, so segments are retained (renamed, folder synced), then the
// clock moves past the retention and more commits expire them (spares
// kept, files removed). Each step is a crash point of the sweep.
func retainWorkload(fs fsys.FS) *retainModel {
	m := &retainModel{sent: map[layout.Key][]string{}, acked: map[layout.Key]int{}, now: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	opt := Options{FS: fs, Dir: crashDir, SegmentSize: crashSegment, Retention: time.Hour, Now: func() time.Time { return m.now }}
	l, _, err := Open(opt)
	if err != nil {
		return m
	}
	defer l.Close()
	ks := []layout.Key{key("a"), key("b")}
	st := map[layout.Key]*Stream{}
	for _, k := range ks {
		st[k] = l.Stream(k)
		st[k].Begin(Fingerprint{}, 0, true)
	}
	appendOne := func(k layout.Key, e string) bool {
		m.sent[k] = append(m.sent[k], e)
		if _, err := st[k].Append(batchesOf([]string{e}), nil); err != nil {
			return false
		}
		m.acked[k] = len(m.sent[k])
		return true
	}
	big := strings.Repeat("y", 2500)
	for round := 0; round < 4; round++ {
		if round == 2 {
			m.now = m.now.Add(2 * time.Hour)
			m.expired = true
		}
		for _, k := range ks {
			for i := 0; i < 2; i++ {
				if !appendOne(k, fmt.Sprintf("%s%d.%d%s", k.SessionID, round, i, big)) {
					return m
				}
			}
			if st[k].MarkCompacted(Fingerprint{Size: int64(round)}) != nil || st[k].Begin(Fingerprint{Size: int64(round)}, 0, false) != nil {
				return m
			}
		}
	}
	return m
}

// check verifies a recovered log against the model: recovery's own
// invariants (model-free: the current stream), and History: never an
// entry that was not sent, never one twice, always in order; and before
// the clock moved, every acknowledged entry.
func (m *retainModel) check(l *Log) error {
	for k, sent := range m.sent {
		var got []string
		if _, err := l.History(k, func(_ Span, e []byte) error { got = append(got, string(e)); return nil }); err != nil {
			return err
		}
		i := 0
		for _, g := range got {
			for i < len(sent) && sent[i] != g {
				i++
			}
			if i == len(sent) {
				return fmt.Errorf("%s: History returned %.12q out of order, twice or never sent (%d entries read)", k.SessionID, g, len(got))
			}
			i++
		}
		if !m.expired {
			for _, e := range sent[:m.acked[k]] {
				if !slices.Contains(got, e) {
					return fmt.Errorf("%s: acknowledged entry %.12q not in History before any expiry (%d read, %d acknowledged)", k.SessionID, e, len(got), m.acked[k])
				}
			}
		}
	}
	return nil
}

// TestCrashDuringRetention crashes the retention workload at every
// operation (segments retained, folder syncs, expiry into spares and
// removals) on synced-only and random disks: recovery never calls it
// corruption, lists what is retained, and History keeps its promises.
func TestCrashDuringRetention(t *testing.T) {
	seeds := int64(20)
	if testing.Short() {
		seeds = 4
	}
	setup := func(c *fstest.CrashFS) {
		c.AllowAllocate(true)
		c.WriteFile("/state/keep", nil, 0o600)
	}
	retainedSeen := false
	points, disks := fstest.EveryCrash(setup, seeds, func(c *fstest.CrashFS) func(*fstest.CrashFS, fstest.Event, int64) {
		m := retainWorkload(c)
		return func(v *fstest.CrashFS, ev fstest.Event, seed int64) {
			for pass := 0; pass < 2; pass++ { // recovery survives being run twice
				l, rec, err := Open(Options{FS: v, Dir: crashDir, SegmentSize: crashSegment, Retention: time.Hour, Now: func() time.Time { return m.now }})
				if err != nil {
					t.Fatalf("crash at %v, seed %d: Open: %v", ev, seed, err)
				}
				if len(rec.Corrupt) > 0 {
					t.Fatalf("crash at %v, seed %d: a crash made the log look corrupt: %v", ev, seed, rec.Corrupt)
				}
				if l.Stats().RetainedSegments > 0 {
					retainedSeen = true
				}
				if err := m.check(l); err != nil {
					t.Fatalf("crash at %v, seed %d, pass %d: %v", ev, seed, pass, err)
				}
				l.Close()
			}
		}
	})
	if points < 20 || !retainedSeen {
		t.Fatalf("only %d crash points, retained segments seen %v: the workload did not run", points, retainedSeen)
	}
	t.Logf("crash points: %d operations, %d crashed disks", points, disks)
}
