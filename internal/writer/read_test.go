package writer

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/fsys"
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
