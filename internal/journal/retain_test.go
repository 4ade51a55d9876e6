package journal

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

// logged is an entry as Append acknowledged it: its bytes and span.
type logged struct {
	e  string
	sp Span
}

// lookup reads entries back by their spans and returns those found, in
// order; every one found must be the entry logged there.
func lookup(t testing.TB, l *Log, es []logged) []string {
	t.Helper()
	spans := make([]Span, len(es))
	for i, e := range es {
		spans[i] = e.sp
		if i%2 == 0 {
			spans[i].Len = 0 // not known: the frame says
		}
	}
	var out []string
	if _, err := l.Lookup(spans, func(i int, e []byte) error {
		if string(e) != es[i].e {
			t.Errorf("span %v reads %.20q, %.20q was logged there", spans[i], e, es[i].e)
		}
		out = append(out, string(e))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func entriesOf(es []logged) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.e
	}
	return out
}

// fill appends n entries of about size bytes to s, each its own batch,
// named prefix-i, and returns them with their spans.
func fill(t testing.TB, s *Stream, prefix string, n, size int) []logged {
	t.Helper()
	var out []logged
	for i := 0; i < n; i++ {
		e := fmt.Sprintf("%s-%d-", prefix, i)
		e += strings.Repeat("x", max(0, size-len(e)))
		sp, err := s.Append(batchesOf([]string{e}), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logged{e, sp[0][0]})
	}
	return out
}

// compact does what a writer's compaction does to the journal: a marker, then
// a new stream, durable, which lets the old one's segments go.
func compact(t testing.TB, s *Stream) {
	t.Helper()
	if err := s.MarkCompacted(Fingerprint{Size: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(Fingerprint{Size: 1}, false); err != nil {
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
// Lookup reads every entry back from them and from the live segments by
// the spans Append gave (superseded streams included), across a restart.
// Once they are older than the retention, they go, and so do their
// entries.
func TestRetainedSegmentsReadBack(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	opt := Options{SegmentSize: 8192, Retention: time.Hour, Now: func() time.Time { return now }}
	l, _ := openLog(t, fsys.OS, dir, opt)
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	a.Begin(Fingerprint{}, true)
	b.Begin(Fingerprint{}, true)
	var all []logged
	for round := 0; round < 3; round++ {
		all = append(all, fill(t, a, fmt.Sprintf("a%d", round), 8, 1500)...)
		all = append(all, fill(t, b, fmt.Sprintf("b%d", round), 2, 700)...)
		compact(t, a)
		compact(t, b)
	}
	// One more commit lets the last compactions' segments go.
	all = append(all, fill(t, a, "a-last", 1, 100)...)
	st := l.Stats()
	if st.RetainedSegments == 0 || st.RetainedBytes == 0 || !st.OldestRetained.Equal(now.Truncate(time.Millisecond)) {
		t.Fatalf("Stats after compactions: %+v, want retained segments let go at %v", st, now)
	}
	if n := len(retainedFiles(t, dir)); n != st.RetainedSegments {
		t.Fatalf("%d retained files, Stats says %d", n, st.RetainedSegments)
	}
	if all[0].sp.Seg >= st.Oldest {
		t.Fatalf("the first entry is in live segment %d: the test reads no retained one", all[0].sp.Seg)
	}
	want := entriesOf(all)
	if got := lookup(t, l, all); !slices.Equal(got, want) {
		t.Fatalf("Lookup read back %d entries, want the %d logged, in order", len(got), len(want))
	}
	l.Close()

	l, rec := openLog(t, fsys.OS, dir, opt)
	if rec.Segments != l.Stats().Segments-1 {
		// The live segments before this start, not the retained ones.
		t.Fatalf("recovery read %d segments; the journal has %d live (one new): it must not read retained ones", rec.Segments, l.Stats().Segments)
	}
	if l.Stats().RetainedSegments != st.RetainedSegments {
		t.Fatalf("after a restart %d retained segments listed, want %d", l.Stats().RetainedSegments, st.RetainedSegments)
	}
	if got := lookup(t, l, all); !slices.Equal(got, want) {
		t.Fatalf("after a restart Lookup read back %d entries, want %d", len(got), len(want))
	}

	// Past the retention, the next commit lets them go.
	now = now.Add(time.Hour + time.Second)
	c := l.Stream(key("c"))
	c.Begin(Fingerprint{}, true)
	fill(t, c, "c", 1, 10)
	if st := l.Stats(); st.RetainedSegments != 0 || st.RetainedBytes != 0 || !st.OldestRetained.IsZero() {
		t.Fatalf("past the retention: %+v, want nothing retained", st)
	}
	if n := len(retainedFiles(t, dir)); n != 0 {
		t.Fatalf("%d retained files left past the retention", n)
	}
	if got := lookup(t, l, all); len(got) == 0 || len(got) >= len(want) || !slices.Equal(got, want[len(want)-len(got):]) {
		t.Fatalf("past the retention Lookup reads %d of %d entries; want only the newest, in live segments", len(got), len(want))
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
	a.Begin(Fingerprint{}, true)
	var all []logged
	maxRetained := 0
	for round := 0; round < 12; round++ {
		all = append(all, fill(t, a, fmt.Sprintf("r%d", round), 6, 1500)...)
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
	want := entriesOf(all)
	got := lookup(t, l, all)
	if len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("Lookup read %d of %d entries: want the newest only", len(got), len(want))
	}
	// What is left is the newest part, whole: the oldest went first.
	if tail := want[len(want)-len(got):]; !slices.Equal(got, tail) {
		t.Fatalf("Lookup is not the newest %d entries logged:\ngot  %.200q\nwant %.200q", len(got), got, tail)
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
	a.Begin(Fingerprint{}, true)
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

// TestRetainedDroppedWhenWritersFindTheDiskFull: when the writers find the
// log's disk full elsewhere (a compaction's new copy that did not fit), the
// retained segments are removed at once, so what waits for room gets
// theirs too: when the disk turns short (SetLowSpace), and at every later
// finding (DropRetained, which says whether it freed anything). Segments
// let go after that are retained again: one full disk does not end the
// retention.
func TestRetainedDroppedWhenWritersFindTheDiskFull(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Dir: dir, SegmentSize: crashSegment, Retention: time.Hour}
	l, _, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := l.Stream(key("a"))
	a.Begin(Fingerprint{}, true)
	retainSome := func(prefix string) {
		t.Helper()
		fill(t, a, prefix, 8, 1500)
		compact(t, a)
		fill(t, a, prefix+"-next", 1, 10)
		if l.Stats().RetainedSegments == 0 || len(retainedFiles(t, dir)) == 0 {
			t.Fatalf("%s: nothing retained", prefix)
		}
	}
	gone := func(what string) {
		t.Helper()
		if st, files := l.Stats(), retainedFiles(t, dir); st.RetainedSegments != 0 || st.RetainedBytes != 0 || len(files) != 0 {
			t.Fatalf("%s, and %d segments (%d bytes) are still retained: %v", what, st.RetainedSegments, st.RetainedBytes, files)
		}
	}
	retainSome("a")
	l.SetLowSpace(true)
	gone("the disk turned short of space")
	retainSome("b")
	if !l.DropRetained() {
		t.Fatal("DropRetained says it removed nothing")
	}
	gone("a writer found the disk full again")
	if l.DropRetained() {
		t.Fatal("DropRetained says it removed something with nothing retained")
	}
	l.SetLowSpace(false)
	retainSome("c")
}

// retainModel is what retainWorkload sent and had acknowledged, per
// transcript, in order (every append one entry, one caller).
type retainModel struct {
	sent  map[layout.Key][]string
	acked map[layout.Key][]logged
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
	m := &retainModel{sent: map[layout.Key][]string{}, acked: map[layout.Key][]logged{}, now: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
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
		st[k].Begin(Fingerprint{}, true)
	}
	appendOne := func(k layout.Key, e string) bool {
		m.sent[k] = append(m.sent[k], e)
		sp, err := st[k].Append(batchesOf([]string{e}), nil)
		if err != nil {
			return false
		}
		m.acked[k] = append(m.acked[k], logged{e, sp[0][0]})
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
			if st[k].MarkCompacted(Fingerprint{Size: int64(round)}) != nil || st[k].Begin(Fingerprint{Size: int64(round)}, false) != nil {
				return m
			}
		}
	}
	return m
}

// check verifies a recovered log against the model: Lookup of every
// acknowledged entry's span never reads anything but that entry, and
// before the clock moved past the retention it finds every one.
func (m *retainModel) check(l *Log) error {
	for k, acked := range m.acked {
		spans := make([]Span, len(acked))
		for i, a := range acked {
			spans[i] = a.sp
		}
		found := 0
		var bad error
		if _, err := l.Lookup(spans, func(i int, e []byte) error {
			found++
			if string(e) != acked[i].e && bad == nil {
				bad = fmt.Errorf("%s: span %v reads %.12q, %.12q was acknowledged there", k.SessionID, spans[i], e, acked[i].e)
			}
			return nil
		}); err != nil {
			return err
		}
		if bad != nil {
			return bad
		}
		if !m.expired && found != len(acked) {
			return fmt.Errorf("%s: %d of %d acknowledged entries read back before any expiry", k.SessionID, found, len(acked))
		}
	}
	return nil
}

// TestCrashDuringRetention crashes the retention workload at every
// operation (segments retained, folder syncs, expiry into spares and
// removals) on synced-only and random disks: recovery never calls it
// corruption, lists what is retained, and Lookup keeps its promises.
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
					t.Fatalf("crash at %v, seed %d: a crash made the journal look corrupt: %v", ev, seed, rec.Corrupt)
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
