package reader

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

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// memSource is a Source of one session: a canonical file on disk and
// pending entries in memory, as a writer's snapshot would hand them on.
type memSource struct {
	key     layout.Key
	path    string
	pending [][]byte
	lineage uint64
}

// newSession writes canon as key's canonical file in a temp folder.
func newSession(t testing.TB, canon []byte) *memSource {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(path, canon, 0o600); err != nil {
		t.Fatal(err)
	}
	return &memSource{key: layout.Key{ProjectKey: "p", SessionID: "s"}, path: path, lineage: 1}
}

func (s *memSource) add(line []byte) { s.pending = append(s.pending, line) }

func (s *memSource) Exists(key layout.Key) (bool, error) { return key == s.key, nil }

func (s *memSource) NotFound(key layout.Key) error {
	return fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
}

func (s *memSource) Snapshot(_ context.Context, key layout.Key, _ Mode) (*Snapshot, error) {
	if key != s.key {
		return &Snapshot{}, nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	f, err := fsys.OS.OpenFile(s.path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	sn := &Snapshot{Canon: f, CanonSize: int64(len(data)), CanonEntries: uint64(len(canonLines(data))),
		CanonEndsNL: len(data) == 0 || data[len(data)-1] == '\n', Lineage: s.lineage, Exists: true}
	if len(s.pending) > 0 {
		sn.Pending = memPending(s.pending)
	}
	return sn, nil
}

func (s *memSource) Hold(layout.Key) (Hold, error) { return nil, errors.New("memSource holds nothing") }

type memPending [][]byte

func (p memPending) Len() int                    { return len(p) }
func (p memPending) Entry(i int) ([]byte, error) { return p[i], nil }
func (p memPending) Size(i int) int              { return len(p[i]) }
func (p memPending) Foreign(int) bool            { return false }
func (p memPending) Close() error                { return nil }

func entry(fields ...string) []byte {
	s := `{"type":"user"`
	for i := 0; i+1 < len(fields); i += 2 {
		s += fmt.Sprintf(",%q:%q", fields[i], fields[i+1])
	}
	return []byte(s + "}")
}

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
			data := testCanonical(rand.New(rand.NewPCG(3, 4)), torn)
			src := newSession(t, data)
			m, k := New(src), src.key
			ctx := context.Background()
			want := canonLines(data)
			for i := 0; i < 3; i++ {
				line := entry("pending", fmt.Sprint(i))
				src.add(line)
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
	line := append(entry("pad", strings.Repeat("z", 1000)), '\n')
	src := newSession(b, bytes.Repeat(line, 64<<20/len(line)))
	m, k := New(src), src.key
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

// TestReadBatchesAndBigLines: a read crossing many batches, with lines from
// a few bytes to several MiB, from the canonical file and from the journal,
// comes back whole and in order; no batch goes over sendBytes unless it is
// one big line on its own, and big lines are never batched with others.
func TestReadBatchesAndBigLines(t *testing.T) {
	ctx := context.Background()
	src := newSession(t, nil)
	m, k := New(src), src.key
	sizes := []int{10, 3 << 20, 200, bigLine, bigLine - 1, 5000}
	var want [][]byte
	appendAll := func(rounds int) {
		for r := 0; r < rounds; r++ {
			for i, n := range sizes {
				b := entry("i", fmt.Sprint(len(want)), "pad", strings.Repeat("y", n+i))
				want = append(want, b)
				src.add(b)
			}
		}
	}
	appendAll(3)
	// these now come from the canonical file
	var canon []byte
	for _, l := range src.pending {
		canon = append(append(canon, l...), '\n')
	}
	if err := os.WriteFile(src.path, canon, 0o600); err != nil {
		t.Fatal(err)
	}
	src.pending = nil
	appendAll(2) // and these from the journal
	for i := 0; i < 3000; i++ {
		b := entry("i", fmt.Sprint(len(want)), "pad", strings.Repeat("z", 700))
		want = append(want, b)
		src.add(b)
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

func TestReadUnknownSession(t *testing.T) {
	m := New(newSession(t, nil))
	err := m.Read(context.Background(), layout.Key{ProjectKey: "p", SessionID: "other"}, ReadOptions{}, func([]Entry) error { return nil })
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown session: want not found, got %v", err)
	}
}
