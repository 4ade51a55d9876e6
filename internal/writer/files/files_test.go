package files

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

// TestUnmatched: a line without uuid is counted by its JSON value (another
// form of its numbers and key order matches), each count taken once; a
// line with a uuid is never counted.
func TestUnmatched(t *testing.T) {
	var u Unmatched
	if u.Take([]byte(`{"type":"x"}`)) {
		t.Fatal("an empty Unmatched matched a line")
	}
	u.Note([][]byte{[]byte(`{"type":"cost","usd":5e-7,"a":1}`), []byte(`{"type":"latch"}`), []byte(`{"type":"latch"}`),
		[]byte(`{"type":"user","uuid":"u1"}`)})
	if !u.Take([]byte(`{"a":1,"type":"cost","usd":5e-07}`)) {
		t.Error("the same value in another form did not match")
	}
	if u.Take([]byte(`{"a":1,"type":"cost","usd":5e-07}`)) {
		t.Error("one line matched twice")
	}
	if !u.Take([]byte(`{"type":"latch"}`)) || !u.Take([]byte(`{"type":"latch"}`)) || u.Take([]byte(`{"type":"latch"}`)) {
		t.Error("a line written twice must match exactly twice")
	}
	if u.Take([]byte(`{"type":"user","uuid":"u1"}`)) {
		t.Error("a line with a uuid was counted")
	}
}

// TestHeld: a held file gives what is appended to it past the copy, whole
// lines only until the last look; a file rewritten since the copy is
// handed back instead; the slots bound the files held.
func TestHeld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.jsonl")
	write(t, p, "a\nb\n")
	f, err := fsys.OS.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := TailCRC(f, 4)
	if err != nil {
		t.Fatal(err)
	}
	slots := NewSlots(1)
	h := NewHeld(slots)
	if rw, err := h.Hold(f, 4, tail); rw != nil || err != nil {
		t.Fatalf("an intact file was not held: %v", err)
	}
	if !h.TakeSlot() {
		t.Fatal("the only slot was not free")
	}
	if other := NewHeld(slots); other.TakeSlot() {
		t.Fatal("a second file took the one slot")
	}
	appendTo(t, p, "c\nd")
	data, rw, err := h.Late(false)
	if err != nil || rw != nil || string(data) != "c\n" {
		t.Fatalf("Late(false) = %q, %v, %v; want the whole line c", data, rw, err)
	}
	h.Advance(len(data))
	if data, _, _ := h.Late(true); string(data) != "d" {
		t.Fatalf("Late(true) = %q, want the cut line d", data)
	}
	h.Drop()
	if h.File() != nil || len(slots) != 0 {
		t.Fatal("Drop kept the file or its slot")
	}

	g, err := fsys.OS.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	h2 := NewHeld(slots)
	h2.Hold(g, 4, tail)
	write(t, p, "x\ny\nz\n") // rewritten in place, not appended to
	if _, rw, _ := h2.Late(false); rw != g || h2.File() != nil {
		t.Fatal("a file rewritten after it was held was not handed back")
	}
	g.Close()
}

// TestHeldUnreadable: a held file that cannot be read (EIO; EMFILE alike)
// is neither taken for rewritten nor for "nothing appended": Hold holds
// it and says why it could not look, Late returns the error and keeps it,
// and once it reads again its late lines are there.
func TestHeldUnreadable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.jsonl")
	write(t, p, "a\nb\n")
	var failing atomic.Bool
	failing.Store(true)
	fsy := fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(c fstest.Call) error {
		if failing.Load() && (c.Name == "readat" || c.Name == "fstat") {
			return syscall.EIO
		}
		return nil
	}})
	f, err := fsy.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := TailCRC(g, 4)
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	h := NewHeld(NewSlots(1))
	if rw, err := h.Hold(f, 4, tail); rw != nil || !errors.Is(err, syscall.EIO) || h.File() != f {
		t.Fatalf("Hold of an unreadable file: %v, %v, held %v; want it held and the EIO", rw, err, h.File() != nil)
	}
	appendTo(t, p, "c\n")
	if data, rw, err := h.Late(true); rw != nil || !errors.Is(err, syscall.EIO) || len(data) != 0 || h.File() != f {
		t.Fatalf("Late of an unreadable file: %q, %v, %v; want the EIO, the file still held", data, rw, err)
	}
	failing.Store(false)
	if data, rw, err := h.Late(true); rw != nil || err != nil || string(data) != "c\n" {
		t.Fatalf("Late once it reads: %q, %v, %v; want the late line", data, rw, err)
	}
	h.Drop()
}

// TestFileHelpers: HasPrefix, LineStart, WholeLines, ScanWholeLines,
// KeepAside and SyncFile on a real folder.
func TestFileHelpers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.jsonl")
	write(t, p, "one\ntwo\nthr")
	f, _ := os.Open(p)
	tail, err := TailCRC(f, 8)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := HasPrefix(fsys.OS, p, 8, tail); !ok || err != nil {
		t.Errorf("HasPrefix of the file's first 8 bytes = %v, %v", ok, err)
	}
	if ok, _ := HasPrefix(fsys.OS, p, 8, tail+1); ok {
		t.Error("HasPrefix with another checksum said yes")
	}
	if ok, err := HasPrefix(fsys.OS, filepath.Join(dir, "none"), 8, tail); ok || err != nil {
		t.Errorf("HasPrefix of a missing file = %v, %v", ok, err)
	}
	if at, err := LineStart(fsys.OS, p, 7); at != 4 || err != nil {
		t.Errorf("LineStart(7) = %d, %v; want 4", at, err)
	}
	if got := WholeLines([]byte("a\nb\nc")); !reflect.DeepEqual(got, [][]byte{[]byte("a"), []byte("b")}) {
		t.Errorf("WholeLines = %q", got)
	}
	var lines []string
	if err := ScanWholeLines(fsys.OS, p, 4, 11, func(l []byte) { lines = append(lines, string(l)) }); err != nil || !reflect.DeepEqual(lines, []string{"two"}) {
		t.Errorf("ScanWholeLines(4, 11) = %q, %v", lines, err)
	}
	kept, err := KeepAside(fsys.OS, filepath.Join(dir, "kept", "a"), "copy.jsonl", f2r(t, p))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(kept); string(b) != "one\ntwo\nthr" {
		t.Errorf("the copy holds %q", b)
	}
	if opened, err := SyncFile(fsys.OS, filepath.Join(dir, "none")); opened || err != nil {
		t.Errorf("SyncFile of a missing file = %v, %v", opened, err)
	}
	if opened, err := SyncFile(fsys.OS, p); !opened || err != nil {
		t.Errorf("SyncFile = %v, %v", opened, err)
	}
}

func f2r(t *testing.T, p string) *os.File {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestUnmatchedBoundAndOrder: takes match the oldest of equal lines, the
// oldest line goes first past MaxUnmatched, and lines matched leave no
// trace (a session whose lines are all matched holds nothing).
func TestUnmatchedBoundAndOrder(t *testing.T) {
	var u Unmatched
	a, b := []byte(`{"type":"a"}`), []byte(`{"type":"b"}`)
	u.Note([][]byte{a, b, a, []byte(`{"type":"c","uuid":"x"}`)})
	if u.Len() != 3 || u.Count(DigestOf(a)) != 2 {
		t.Fatalf("noted %d, %d of a; want 3 and 2 (a line with uuid is not noted)", u.Len(), u.Count(DigestOf(a)))
	}
	if !u.Take([]byte(`{ "type" : "a" }`)) || u.Count(DigestOf(a)) != 1 {
		t.Fatal("a copy of a, another encoding, did not match")
	}
	// Filled to the bound: b goes first (a's oldest was taken).
	for i := 0; i < MaxUnmatched-1; i++ {
		u.Add(Digest{byte(i), byte(i >> 8), 1})
	}
	if u.Len() != MaxUnmatched || u.Count(DigestOf(b)) != 0 || u.Count(DigestOf(a)) != 1 {
		t.Fatalf("at the bound: %d lines, b %d, a %d; want %d, 0, 1", u.Len(), u.Count(DigestOf(b)), u.Count(DigestOf(a)), MaxUnmatched)
	}
	u.Add(Digest{9, 9, 9})
	if u.Len() != MaxUnmatched || u.Count(DigestOf(a)) != 0 {
		t.Fatalf("past the bound: %d lines, a %d; want %d and a dropped", u.Len(), u.Count(DigestOf(a)), MaxUnmatched)
	}
	// Every line matched as it is noted: nothing grows.
	var v Unmatched
	for i := 0; i < 10*MaxUnmatched; i++ {
		v.Note([][]byte{a})
		v.Take(a)
	}
	if v.Len() != 0 || len(v.notes) > 2*MaxUnmatched || len(v.live) != 0 {
		t.Fatalf("after noting and matching: %d lines, %d notes kept, %d digests", v.Len(), len(v.notes), len(v.live))
	}
}
