package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// canonLines splits a canonical file as the writer counts its lines: every
// '\n' ends one, and a last line may lack it.
func canonLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// testCanonical makes a file's worth of lines of every length, some
// longer than lineStartFromEnd's chunk, some empty, ending in a torn line
// when torn is set.
func testCanonical(rng *rand.Rand, torn bool) []byte {
	var b []byte
	for i := 0; i < 300; i++ {
		switch n := rng.IntN(20); {
		case n == 0:
			// an empty line
		case n == 1:
			b = fmt.Appendf(b, `{"type":"user","big":"%s"}`, strings.Repeat("x", backChunk+rng.IntN(3*backChunk)))
		default:
			b = fmt.Appendf(b, `{"type":"user","n":%d,"pad":"%s"}`, i, strings.Repeat("y", rng.IntN(2000)))
		}
		b = append(b, '\n')
	}
	if torn {
		b = append(b, `{"type":"user","torn":`...)
	}
	return b
}

func TestLineStartFromEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, torn := range []bool{false, true} {
		data := testCanonical(rng, torn)
		lines := canonLines(data)
		r := bytes.NewReader(data)
		for k := 1; k <= len(lines); k++ {
			got, err := lineStartFromEnd(r, int64(len(data)), !torn, uint64(k))
			if err != nil {
				t.Fatal(err)
			}
			want := len(strings.Join(lines[:len(lines)-k], "\n"))
			if k < len(lines) {
				want++
			}
			if got != int64(want) {
				t.Fatalf("torn %v, %d of %d lines from the end: start %d, want %d", torn, k, len(lines), got, want)
			}
		}
	}
	// A file shorter than it was said to be is an error, not a guess.
	if _, err := lineStartFromEnd(bytes.NewReader([]byte("a\nb\n")), 10, true, 1); err == nil {
		t.Fatal("reading past the end: want an error")
	}
}

// TestReadTailAndLateFrom reads the last n entries, and from late indexes,
// of a session whose canonical file has long, empty and torn lines and
// whose journal holds more: what is served must be exactly those entries,
// with their indexes, whichever way the reader found where they start.
func TestReadTailAndLateFrom(t *testing.T) {
	for _, torn := range []bool{false, true} {
		t.Run(fmt.Sprintf("torn=%v", torn), func(t *testing.T) {
			e := newEnv(t)
			k := newKey()
			data := testCanonical(rand.New(rand.NewPCG(3, 4)), torn)
			path := e.lay.TranscriptPath(k)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			m := e.manager()
			defer closeManager(t, m)
			ctx := context.Background()
			want := canonLines(data)
			for i := 0; i < 3; i++ {
				line := entry("", "pending", fmt.Sprint(i))
				if _, err := m.Append(ctx, k, [][]byte{line}); err != nil {
					t.Fatal(err)
				}
				want = append(want, string(line))
			}
			read := func(opt ReadOptions) (idx []uint64, got []string) {
				t.Helper()
				err := m.Read(ctx, k, opt, func(es []Entry) error {
					for _, e := range es {
						idx = append(idx, e.Index)
						got = append(got, string(e.Data))
					}
					return nil
				})
				if err != nil {
					t.Fatalf("read %+v: %v", opt, err)
				}
				return idx, got
			}
			check := func(opt ReadOptions, from int) {
				t.Helper()
				idx, got := read(opt)
				if len(got) != len(want)-from {
					t.Fatalf("read %+v: %d entries, want %d", opt, len(got), len(want)-from)
				}
				for i := range got {
					if idx[i] != uint64(from+i) || got[i] != want[from+i] {
						t.Fatalf("read %+v: entry %d is %d:%.60q, want %d:%.60q", opt, i, idx[i], got[i], from+i, want[from+i])
					}
				}
			}
			for n := 1; n <= len(want)+1; n++ {
				check(ReadOptions{Tail: uint32(n)}, max(0, len(want)-n))
			}
			for from := 0; from <= len(want); from += 7 {
				check(ReadOptions{From: uint64(from)}, from)
			}
		})
	}
}

// BenchmarkReadTail reads the last 10 entries of a 64 MiB session, and
// as the baseline in the same run the whole of it: the tail costs what its
// lines cost, not what the file does.
func BenchmarkReadTail(b *testing.B) {
	dir := b.TempDir()
	lay := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	k := newKey()
	path := lay.TranscriptPath(k)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		b.Fatal(err)
	}
	line := append(entry("", "pad", strings.Repeat("z", 1000)), '\n')
	if err := os.WriteFile(path, bytes.Repeat(line, 64<<20/len(line)), 0o600); err != nil {
		b.Fatal(err)
	}
	m, err := New(Config{Layout: lay, FS: fsys.OS, Logger: zap.NewNop(), IdleCompact: time.Hour, IdleRetire: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := m.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}()
	for _, c := range []struct {
		name string
		opt  ReadOptions
	}{{"tail10", ReadOptions{Tail: 10}}, {"whole", ReadOptions{}}} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				n = 0
				err := m.Read(context.Background(), k, c.opt, func(es []Entry) error {
					n += len(es)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "entries/op")
		})
	}
}

func TestReadAndFollow(t *testing.T) {
	e := newEnv(t)
	e.cfg.MinCompactBytes = 1 // compact on every append, moving entries under the follower
	e.cfg.CompactRatio = 0.01
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	collect := func(es []Entry) error {
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%s", e.Index, e.Data))
		}
		return nil
	}
	if err := m.Read(ctx, k, ReadOptions{From: 3}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], `3:{"type":"user","n":"3"}`) {
		t.Fatalf("read from 3: %v", got)
	}
	got = nil
	if err := m.Read(ctx, k, ReadOptions{Tail: 1}, collect); err != nil || len(got) != 1 || !strings.HasPrefix(got[0], "4:") {
		t.Fatalf("tail 1: %v %v", got, err)
	}
	if err := m.Read(ctx, newKey(), ReadOptions{}, collect); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown session: want not found, got %v", err)
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan Entry, 100)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(fctx, k, ReadOptions{From: 4, Follow: true}, func(es []Entry) error {
			for _, e := range es {
				// Data is only valid during the call.
				e.Data = bytes.Clone(e.Data)
				followed <- e
			}
			return nil
		})
	}()
	want := uint64(4)
	next := func() Entry {
		select {
		case e := <-followed:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("follower got nothing")
		}
		return Entry{}
	}
	if e := next(); e.Index != want {
		t.Fatalf("first followed index %d", e.Index)
	}
	for i := 5; i < 25; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		e := next()
		if e.Index != uint64(i) || !bytes.Contains(e.Data, []byte(fmt.Sprintf(`"n":"%d"`, i))) {
			t.Fatalf("followed %d: %s", e.Index, e.Data)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
}

// TestFollowSurvivesWriterFailure: a writer that fails and reopens does not
// strand a follower, and does not wait for it to exit.
func TestFollowSurvivesWriterFailure(t *testing.T) {
	e := newEnv(t)
	ff := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
	e.fs = ff
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "0")}); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 10)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(ctx, k, ReadOptions{Follow: true}, func(es []Entry) error {
			for _, e := range es {
				got <- e.Index
			}
			return nil
		})
	}()
	expect := func(i uint64) {
		t.Helper()
		select {
		case n := <-got:
			if n != i {
				t.Fatalf("followed index %d, want %d", n, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("follower did not get entry %d", i)
		}
	}
	expect(0)
	ff.SetHooks(failOn(func(op, path string) bool { return op == "rename" && strings.HasSuffix(path, ".jsonl") }))
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "1")}); err != nil {
		t.Fatal(err)
	}
	expect(1)
	if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
		t.Fatalf("flush: %v", err)
	}
	ff.SetHooks(fstest.Hooks{})
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "2")}); err != nil {
		t.Fatal(err)
	}
	expect(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadBatchesAndBigLines: a read crossing many batches, with lines from
// a few bytes to several MiB, from the canonical file and from the journal,
// comes back whole and in order; no batch goes over sendBytes unless it is
// one big line on its own, and big lines are never batched with others.
func TestReadBatchesAndBigLines(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	sizes := []int{10, 3 << 20, 200, bigLine, bigLine - 1, 5000}
	var want [][]byte
	appendAll := func(rounds int) {
		for r := 0; r < rounds; r++ {
			for i, n := range sizes {
				b := entry("", "i", fmt.Sprint(len(want)), "pad", strings.Repeat("y", n+i))
				want = append(want, b)
				if _, err := m.Append(ctx, k, [][]byte{b}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	appendAll(3)
	if _, err := m.Flush(ctx, k); err != nil { // these now come from the canonical file
		t.Fatal(err)
	}
	appendAll(2) // and these from the journal
	for i := 0; i < 3000; i++ {
		b := entry("", "i", fmt.Sprint(len(want)), "pad", strings.Repeat("z", 700))
		want = append(want, b)
		if _, err := m.Append(ctx, k, [][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]byte
	batches := 0
	err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
		batches++
		total := 0
		for _, e := range es {
			if e.Index != uint64(len(got)) {
				return fmt.Errorf("entry %d served as %d", len(got), e.Index)
			}
			got = append(got, bytes.Clone(e.Data))
			total += len(e.Data)
		}
		if len(es) > 1 && total > sendBytes {
			return fmt.Errorf("a batch of %d entries holds %d bytes, over %d", len(es), total, sendBytes)
		}
		for _, e := range es {
			if len(es) > 1 && len(e.Data) >= bigLine {
				return fmt.Errorf("a %d-byte line batched with %d others", len(e.Data), len(es)-1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("entry %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
	if batches < 10 {
		t.Fatalf("%d batches for %d entries: the batch limit did not apply", batches, len(want))
	}
}

// TestReadKeepsModifiedTime: a writer opened to read a session (show,
// check, info) published it as modified at time 0 until its next append,
// so the listing put it last and --continue picked an older session.
func TestReadKeepsModifiedTime(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	old, recent := newKey(), newKey()
	mustAppendTo(t, m, old, string(entry(uuid.NewString())))
	mustAppendTo(t, m, recent, string(entry(uuid.NewString())))
	closeManager(t, m)
	then := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	if err := os.Chtimes(e.lay.TranscriptPath(old), then, then); err != nil {
		t.Fatal(err)
	}
	m = e.manager()
	defer closeManager(t, m)
	// The writer opens for the read and stays (a live writer, as after
	// show or tail).
	if err := m.Read(bg, recent, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !m.IsActive(recent) {
		t.Fatal("the read opened no writer: the test proves nothing")
	}
	infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{})
	if err != nil || len(infos) != 2 {
		t.Fatalf("listing: %d sessions, %v", len(infos), err)
	}
	if infos[0].Key != recent || infos[1].Key != old {
		t.Fatalf("listed %s then %s; want the recently written one first", infos[0].Key, infos[1].Key)
	}
	fi, err := os.Stat(e.lay.TranscriptPath(recent))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infos[0].ModifiedMs, fi.ModTime().UnixMilli(); got != want {
		t.Fatalf("the session being read is listed as modified at %d, want its file's %d", got, want)
	}
	if got := infos[1].ModifiedMs; got != then.UnixMilli() {
		t.Fatalf("the old session is listed as modified at %d, want %d", got, then.UnixMilli())
	}
	if cont, _, err := catalogOf(m).List(bg, catalog.ListOptions{Continue: true}); err != nil || len(cont) != 1 || cont[0].Key != recent {
		t.Fatalf("--continue picks %v (%v), want %s", cont, err, recent)
	}
}
