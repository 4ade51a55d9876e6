package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// testHeader is a realistic header; tests that need a fixed generation set it.
func testHeader(gen uint64) Header {
	return Header{
		Generation: gen,
		ProjectKey: "-home-ada-src-sessiond",
		SessionID:  "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
		BaseSize:   4096,
		BaseTail:   0x1234abcd,
	}
}

func mustCreate(t testing.TB, fs fsys.FS, path string, h Header) *Journal {
	t.Helper()
	j, err := Create(fs, path, h, Options{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return j
}

// batchesOf turns strings into Append's argument: one string slice per batch.
func batchesOf(bs ...[]string) [][][]byte {
	out := make([][][]byte, len(bs))
	for i, b := range bs {
		out[i] = make([][]byte, len(b))
		for k, e := range b {
			out[i][k] = []byte(e)
		}
	}
	return out
}

func mustAppend(t testing.TB, j *Journal, bs ...[]string) [][]Span {
	t.Helper()
	spans, err := j.Append(batchesOf(bs...))
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return spans
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// contents reads every recovered batch back through the journal and checks
// the sequence numbers run 1, 2, 3...
func contents(t testing.TB, j *Journal, batches []Batch) [][]string {
	t.Helper()
	out := [][]string{}
	for i, b := range batches {
		if b.Seq != uint64(i+1) {
			t.Fatalf("batch %d has seq %d, want %d", i, b.Seq, i+1)
		}
		es := []string{}
		for _, s := range b.Entries {
			p, err := j.ReadEntry(s, nil)
			if err != nil {
				t.Fatalf("ReadEntry(%+v): %v", s, err)
			}
			es = append(es, string(p))
		}
		out = append(out, es)
	}
	return out
}

// openExpect opens path and checks it holds exactly want, returning the
// journal still open.
func openExpect(t testing.TB, path string, want [][]string) (*Journal, *Recovery) {
	t.Helper()
	j, rec, err := Open(fsys.OS, path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got := contents(t, j, rec.Batches); !reflect.DeepEqual(got, want) {
		t.Fatalf("recovered batches\n got %q\nwant %q", got, want)
	}
	if rec.End != j.Size() {
		t.Fatalf("Recovery.End %d != Size %d", rec.End, j.Size())
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != rec.End {
		t.Fatalf("file on disk: %v, size %d, want %d", err, fi.Size(), rec.End)
	}
	return j, rec
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// expectCorrupt checks the outcome of Open on a corrupt journal that held
// original: ErrCorrupt naming the damage offset and the kept-aside file, the
// path gone, and the aside file holding the original bytes.
func expectCorrupt(t testing.TB, path string, original []byte, damageAt int64) {
	t.Helper()
	j, rec, err := Open(fsys.OS, path, Options{})
	if err == nil {
		j.Close()
		t.Fatalf("Open succeeded (%d batches, %d bytes truncated), want ErrCorrupt", len(rec.Batches), rec.TruncatedBytes)
	}
	if !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("Open error %v, want ErrCorrupt", err)
	}
	if _, serr := os.Lstat(path); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("corrupt journal still at its path (Lstat: %v)", serr)
	}
	asides, _ := filepath.Glob(path + ".corrupt-*")
	if len(asides) != 1 {
		t.Fatalf("kept-aside files %q, want exactly one", asides)
	}
	if !bytes.Equal(readFile(t, asides[0]), original) {
		t.Fatalf("kept-aside file differs from the damaged journal")
	}
	msg := err.Error()
	if !strings.Contains(msg, asides[0]) {
		t.Fatalf("error %q does not name the kept-aside file %s", msg, asides[0])
	}
	if want := "offset " + strconv.FormatInt(damageAt, 10) + " "; !strings.Contains(msg, want) {
		t.Fatalf("error %q does not say %q", msg, want)
	}
}

// frameSpec is one frame for buildJournal.
type frameSpec struct {
	typ     frame.Type
	payload []byte
}

func entryRec(s string) frameSpec { return frameSpec{typeEntry, []byte(s)} }

func commitRec(seq uint64, n int) frameSpec {
	p := encodeCommit(seq, n)
	return frameSpec{typeCommit, p[:]}
}

func markerRec(m Marker) frameSpec {
	p := encodeMarker(m)
	return frameSpec{typeCompacted, p[:]}
}

// buildJournal encodes a header for gen and then each write's records as
// that one write would carry them. It lets tests build files Append never
// would.
func buildJournal(t testing.TB, gen uint64, writes ...[]frameSpec) []byte {
	t.Helper()
	p, err := encodeHeader(testHeader(gen))
	if err != nil {
		t.Fatal(err)
	}
	out := frame.Append(nil, typeHeader, p, 0, 0)
	for _, w := range writes {
		start := len(out)
		for _, r := range w {
			out = frame.Append(out, r.typ, r.payload, gen, int64(len(out)-start))
		}
	}
	return out
}
