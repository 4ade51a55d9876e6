package journal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

func TestAppendOpenRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	h := testHeader(0)
	j := mustCreate(t, fsys.OS, path, h)
	if j.Header().Generation == 0 {
		t.Fatal("Create kept generation 0")
	}
	if j.Path() != path {
		t.Fatalf("Path() = %q", j.Path())
	}
	h.Generation = j.Header().Generation
	if j.Header() != h {
		t.Fatalf("Header() = %+v, want %+v", j.Header(), h)
	}

	want := [][]string{{`{"a":1}`, `{"b":2}`}, {`{"c":3}`}, {""}, {}}
	spans := mustAppend(t, j, want[0], want[1])
	spans = append(spans, mustAppend(t, j, want[2], want[3])...)
	if len(spans) != 4 || len(spans[0]) != 2 || len(spans[3]) != 0 {
		t.Fatalf("spans %+v do not match the batches", spans)
	}
	for i, b := range spans {
		for k, s := range b {
			p, err := j.ReadEntry(s, nil)
			if err != nil || string(p) != want[i][k] {
				t.Fatalf("ReadEntry(%+v) = %q, %v; want %q", s, p, err, want[i][k])
			}
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != j.Size() {
		t.Fatalf("file size %v (%v), Size() %d", fi.Size(), err, j.Size())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode %v, want 0600: transcripts are private", fi.Mode().Perm())
	}
	m := Marker{Size: 12345, Tail: 0xabcdef01}
	if err := j.MarkCompacted(m); err != nil {
		t.Fatal(err)
	}
	end := j.Size()
	mustClose(t, j)

	j, rec := openExpect(t, path, want)
	if rec.Header != h {
		t.Fatalf("recovered header %+v, want %+v", rec.Header, h)
	}
	if rec.Compacted == nil || *rec.Compacted != m {
		t.Fatalf("recovered marker %v, want %+v", rec.Compacted, m)
	}
	if rec.TruncatedBytes != 0 || rec.End != end {
		t.Fatalf("TruncatedBytes %d End %d, want 0 and %d", rec.TruncatedBytes, rec.End, end)
	}
	if !reflect.DeepEqual(flatten(rec.Batches), flatten(batchesFromSpans(spans))) {
		t.Fatalf("recovered spans %+v, Append returned %+v", rec.Batches, spans)
	}
	// The sequence carries on across a reopen.
	mustAppend(t, j, []string{"after reopen"})
	mustClose(t, j)
	j, rec = openExpect(t, path, append(want, []string{"after reopen"}))
	if rec.Compacted == nil {
		t.Fatal("marker lost: it is the last one even with batches after it")
	}
	mustClose(t, j)
}

func batchesFromSpans(spans [][]Span) []Batch {
	out := make([]Batch, len(spans))
	for i, s := range spans {
		out[i] = Batch{Seq: uint64(i + 1), Entries: s}
	}
	return out
}

func flatten(bs []Batch) []Span {
	var out []Span
	for _, b := range bs {
		out = append(out, b.Entries...)
	}
	return out
}

func TestCreateReplacesGeneration(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.wal")
	old := mustCreate(t, fsys.OS, path, testHeader(0))
	spans := mustAppend(t, old, []string{"old entry"})

	next := mustCreate(t, fsys.OS, path, testHeader(0))
	if next.Header().Generation == old.Header().Generation {
		t.Fatal("two Creates picked the same random generation")
	}
	// A reader holding the old generation still reads it.
	if p, err := old.ReadEntry(spans[0][0], nil); err != nil || string(p) != "old entry" {
		t.Fatalf("old generation unreadable after replace: %q, %v", p, err)
	}
	mustClose(t, old)
	mustClose(t, next)

	j, rec := openExpect(t, path, [][]string{})
	if rec.Header.Generation != next.Header().Generation {
		t.Fatal("path does not hold the new generation")
	}
	mustClose(t, j)
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("folder holds %v (%v), want only the journal: temp files must not be left", ents, err)
	}
}

func TestCreateErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.wal")
	cases := []struct {
		name string
		path string
		h    func(h *Header)
		opt  Options
		want error
	}{
		{"missing folder", filepath.Join(dir, "nope", "s.wal"), nil, Options{}, os.ErrNotExist},
		{"invalid utf-8", path, func(h *Header) { h.Subpath = "a\xffb" }, Options{}, errdefs.ErrInvalidArgument},
		{"negative base size", path, func(h *Header) { h.BaseSize = -1 }, Options{}, errdefs.ErrInvalidArgument},
		{"huge header", path, func(h *Header) { h.ProjectKey = strings.Repeat("k", maxHeaderPayload) }, Options{}, errdefs.ErrInvalidArgument},
		{"header over MaxRecord", path, nil, Options{MaxRecord: 100}, errdefs.ErrTooLarge},
		{"negative MaxRecord", path, nil, Options{MaxRecord: -1}, errdefs.ErrInvalidArgument},
		{"tiny MaxRecord", path, nil, Options{MaxRecord: commitPayloadSize - 1}, errdefs.ErrInvalidArgument},
		{"MaxRecord over the limit", path, nil, Options{MaxRecord: frame.MaxRecordLimit + 1}, errdefs.ErrInvalidArgument},
	}
	for _, tc := range cases {
		h := testHeader(0)
		if tc.h != nil {
			tc.h(&h)
		}
		j, err := Create(fsys.OS, tc.path, h, tc.opt)
		if !errors.Is(err, tc.want) {
			if j != nil {
				j.Close()
			}
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("failed Creates left %v behind", ents)
	}
}

func TestAppendLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j, err := Create(fsys.OS, path, testHeader(0), Options{MaxRecord: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	size := j.Size()
	if spans, err := j.Append(nil); err != nil || spans != nil || j.Size() != size {
		t.Fatalf("Append(nil) = %v, %v and size %d: want a no-op", spans, err, j.Size())
	}
	big := strings.Repeat("x", 1025)
	_, err = j.Append(batchesOf([]string{"fine"}, []string{"fine", big}))
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("oversized entry: %v, want ErrTooLarge", err)
	}
	if j.Size() != size {
		t.Fatal("a refused Append wrote something")
	}
	// Refusing input is not a failure of the journal.
	mustAppend(t, j, []string{strings.Repeat("y", 1024)})
	if fi, _ := os.Stat(path); fi.Size() != j.Size() {
		t.Fatalf("file %d bytes, Size %d", fi.Size(), j.Size())
	}
	j2, _, err := Open(fsys.OS, path, Options{MaxRecord: 1024})
	if err != nil {
		t.Fatal(err)
	}
	j2.Close()
}

func TestReadEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	defer j.Close()
	spans := mustAppend(t, j, []string{"first entry", "second"})
	s := spans[0][0]

	buf := make([]byte, 0, 64)
	p, err := j.ReadEntry(s, buf)
	if err != nil || string(p) != "first entry" || unsafe.SliceData(p) != unsafe.SliceData(buf) {
		t.Fatalf("ReadEntry with a big enough buffer = %q, %v (reused: %v)", p, err, unsafe.SliceData(p) == unsafe.SliceData(buf))
	}
	if p, err := j.ReadEntry(s, make([]byte, 0, 3)); err != nil || string(p) != "first entry" {
		t.Fatalf("ReadEntry with a small buffer = %q, %v", p, err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := ReadEntryAt(f, spans[0][1], nil); err != nil || string(p) != "second" {
		t.Fatalf("ReadEntryAt = %q, %v", p, err)
	}

	bad := []struct {
		name string
		s    Span
	}{
		{"negative length", Span{Off: s.Off, Len: -1}},
		{"before the first record", Span{Off: 3, Len: 1}},
		{"past the end", Span{Off: j.Size(), Len: 1}},
		{"wrong length", Span{Off: s.Off, Len: s.Len - 1}},
		{"not at a record", Span{Off: s.Off + 8, Len: 1}},
		{"at the header", Span{Off: frame.HeaderSize, Len: 1}},
		{"at a commit", Span{Off: spans[0][1].Off + frame.Size(len("second")), Len: commitPayloadSize}},
	}
	for _, tc := range bad {
		if _, err := j.ReadEntry(tc.s, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ReadEntry %s: %v, want ErrInvalidArgument", tc.name, err)
		}
		if _, err := ReadEntryAt(f, tc.s, nil); err == nil {
			t.Errorf("ReadEntryAt %s succeeded", tc.name)
		}
	}

	// Damage after the entry was written: ReadEntry checks the checksum.
	data := readFile(t, path)
	data[s.Off] ^= 0x20
	writeFile(t, path, data)
	if _, err := j.ReadEntry(s, nil); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("ReadEntry of a damaged entry: %v, want ErrCorrupt", err)
	}
}

func TestUseAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	spans := mustAppend(t, j, []string{"x"})
	mustClose(t, j)
	if _, err := j.Append(batchesOf([]string{"y"})); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if err := j.MarkCompacted(Marker{}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("MarkCompacted after Close: %v", err)
	}
	if _, err := j.ReadEntry(spans[0][0], nil); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadEntry after Close: %v", err)
	}
	if err := j.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenMissing(t *testing.T) {
	_, _, err := Open(fsys.OS, filepath.Join(t.TempDir(), "none.wal"), Options{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing journal: %v, want fs.ErrNotExist", err)
	}
}

func TestMarkCompactedRejectsNegativeSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	defer j.Close()
	size := j.Size()
	if err := j.MarkCompacted(Marker{Size: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) || j.Size() != size {
		t.Fatalf("MarkCompacted(-1): %v, size %d -> %d", err, size, j.Size())
	}
}

// TestReadEntries reads entries of every size class (empty, small, past
// the chunk size) in chunks, after a reopen too, and refuses a damaged
// payload and spans out of order.
func TestReadEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	var want []string
	var batches [][]string
	for i := 0; i < 300; i++ {
		n := (i * 7919) % 9000
		if i%97 == 0 {
			n = readChunk + i // its own read
		}
		want = append(want, strings.Repeat(string(rune('a'+i%26)), n))
		if i%5 == 4 {
			batches = append(batches, want[len(want)-5:])
		}
	}
	var spans []Span
	for _, b := range mustAppend(t, j, batches...) {
		spans = append(spans, b...)
	}
	check := func(j *Journal, spans []Span) {
		t.Helper()
		got := 0
		err := j.ReadEntries(spans, func(i int, p []byte) error {
			if i != got || string(p) != want[i] {
				t.Fatalf("entry %d (call %d): %d bytes, want %d", i, got, len(p), len(want[i]))
			}
			got++
			return nil
		})
		if err != nil || got != len(want) {
			t.Fatalf("ReadEntries: %d entries, %v", got, err)
		}
	}
	check(j, spans)
	mustClose(t, j)
	j, rec := openExpect(t, path, batches)
	var reopened []Span
	for _, b := range rec.Batches {
		reopened = append(reopened, b.Entries...)
	}
	check(j, reopened)

	stop := errors.New("stop")
	calls := 0
	if err := j.ReadEntries(spans, func(int, []byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("an error from fn: %v after %d calls, want it back after 1", err, calls)
	}
	swapped := append([]Span{spans[1], spans[0]}, spans[2:]...)
	if err := j.ReadEntries(swapped, func(int, []byte) error { return nil }); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("spans out of order: %v, want invalid argument", err)
	}
	// Flip one byte of a small entry and of a big one: both fail their
	// checksum.
	for _, i := range []int{3, 97} {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0}
		f.ReadAt(b, spans[i].Off+1)
		b[0] ^= 0xff
		f.WriteAt(b, spans[i].Off+1)
		f.Close()
		err = j.ReadEntries(spans, func(int, []byte) error { return nil })
		if !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("entry %d damaged: %v, want corrupt", i, err)
		}
		b[0] ^= 0xff
		f, _ = os.OpenFile(path, os.O_RDWR, 0)
		f.WriteAt(b, spans[i].Off+1)
		f.Close()
	}
	mustClose(t, j)
}
