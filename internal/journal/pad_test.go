package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// segEnd is where the current segment's next write goes.
func segEnd(l *Log) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur.end
}

// TestCommitsThatEndLateInABlockArePadded: a commit that ends in the
// second half of a 4 KiB block fills the rest with a Pad record, so the
// next commit starts on a fresh block; one that ends in the first half
// does not (the room a small commit would give up). Every entry reads
// back, before and after a reopen, and recovery reads the pads as
// records, not as a torn tail.
func TestCommitsThatEndLateInABlockArePadded(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	s := l.Stream(key("a"))
	if err := s.Begin(Fingerprint{}, true); err != nil {
		t.Fatal(err)
	}
	var want [][]string
	var padded, unpadded int
	var padding uint64
	for size := 1; size < 6000; size += 97 {
		before := segEnd(l)
		stats := l.Stats()
		e := strings.Repeat("e", size)
		if _, err := s.Append(batchesOf([]string{e}), nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, []string{e})
		after := l.Stats()
		end, pad := segEnd(l), after.Padding-stats.Padding
		if wrote := uint64(end - before); after.Bytes-stats.Bytes != wrote {
			t.Fatalf("entry of %d bytes: Bytes grew by %d, the segment by %d", size, after.Bytes-stats.Bytes, wrote)
		}
		// Where the commit's own records ended, before any pad.
		ended := end - int64(pad)
		gap := -ended & (padBlock - 1)
		switch {
		case pad > 0:
			padded++
			padding += pad
			if end%padBlock != 0 || gap > padBlock/2 || int64(pad) != gap {
				t.Fatalf("entry of %d bytes: a pad of %d after a commit ending at %d, the write ends at %d", size, pad, ended, end)
			}
		case gap >= frame.HeaderSize && gap <= padBlock/2:
			t.Fatalf("entry of %d bytes: the commit ends %d bytes before its block's end and was not padded", size, gap)
		default:
			unpadded++
		}
	}
	if padded == 0 || unpadded == 0 {
		t.Fatalf("%d commits padded, %d not: the sizes did not cover both cases", padded, unpadded)
	}
	if got := l.Stats().Padding; got != padding {
		t.Fatalf("Stats.Padding %d, the pads written add up to %d", got, padding)
	}
	if got := contents(t, l, key("a")); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("read back %d batches, want %d", len(got), len(want))
	}
	l.Close()
	l, rec := openLog(t, fsys.OS, dir, Options{})
	defer l.Close()
	if rec.TruncatedBytes != 0 || len(rec.Corrupt) != 0 {
		t.Fatalf("recovery over the pads: %+v", rec)
	}
	if got := contents(t, l, key("a")); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("after a reopen: %d batches, want %d", len(got), len(want))
	}
}

// TestVersion1SegmentIsRead: a segment an older sessiond wrote (format
// version 1, before Pad records) is recovered as before.
func TestVersion1SegmentIsRead(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	s := l.Stream(key("a"))
	s.Begin(Fingerprint{Size: 7, Tail: 1}, true)
	want := [][]string{{"one", "two"}, {"three"}}
	if _, err := s.Append(batchesOf(want...), nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// The same segment with a version 1 header: same length, so every
	// record stays where it was.
	path := filepath.Join(dir, segName(1))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := frame.NewWindow(bytes.NewReader(b), int64(len(b)), len(b))
	h, end, err := readHeader(w)
	if err != nil || h.Version != formatV {
		t.Fatalf("header %+v, %v", h, err)
	}
	h.Version = 1
	p, _ := json.Marshal(h)
	old := frame.Append(nil, typeHeader, p, 0, 0)
	if int64(len(old)) != end {
		t.Fatalf("a version 1 header is %d bytes, the version %d one %d", len(old), formatV, end)
	}
	copy(b, old)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec := openLog(t, fsys.OS, dir, Options{})
	defer l.Close()
	if rec.Segments != 1 || rec.TruncatedBytes != 0 || len(rec.Corrupt) != 0 {
		t.Fatalf("recovery of a version 1 segment: %+v", rec)
	}
	if got := contents(t, l, key("a")); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if e, _ := l.Epoch(key("a")); e.Base != (Fingerprint{7, 1}) {
		t.Fatalf("base %+v", e.Base)
	}
}

// TestDamageInsideAPadLosesNothing: a byte the disk changed inside a Pad
// record, followed by an intact later write, is reported as damaged
// padding and costs no record: recovery reads on and calls nothing
// corrupt. The same damage to the pad's type is damage like any other.
func TestDamageInsideAPadLosesNothing(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, fsys.OS, dir, Options{})
	s := l.Stream(key("a"))
	s.Begin(Fingerprint{}, true)
	var want [][]string
	padAt := int64(-1)
	for i := 0; padAt < 0; i++ {
		if i > 100 {
			t.Fatal("no commit was padded")
		}
		before := l.Stats().Padding
		e := fmt.Sprintf("%d-%s", i, strings.Repeat("p", 900))
		if _, err := s.Append(batchesOf([]string{e}), nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, []string{e})
		if pad := l.Stats().Padding - before; pad > 0 {
			padAt = segEnd(l) - int64(pad)
		}
	}
	if _, err := s.Append(batchesOf([]string{"after the pad"}), nil); err != nil {
		t.Fatal(err)
	}
	want = append(want, []string{"after the pad"})
	l.Close()
	path := filepath.Join(dir, segName(1))
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		at      int64
		corrupt bool
	}{
		{"a byte of the pad's zeros", padAt + frame.HeaderSize + 5, false},
		{"the pad's checksum", padAt + 9, false},
		{"the pad's type", padAt + 4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			b := bytes.Clone(clean)
			b[c.at] ^= 0x20
			if err := os.WriteFile(filepath.Join(d, segName(1)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			l, rec := openLog(t, fsys.OS, d, Options{})
			defer l.Close()
			if c.corrupt {
				if len(rec.Corrupt) != 1 || len(rec.PadDamaged) != 0 {
					t.Fatalf("recovery %+v: want the damage called corrupt", rec)
				}
				return
			}
			if len(rec.Corrupt) != 0 || len(rec.PadDamaged) != 1 || !strings.Contains(rec.PadDamaged[0], "nothing is lost") {
				t.Fatalf("recovery %+v: want damaged padding and nothing corrupt", rec)
			}
			if got := contents(t, l, key("a")); !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("read back %d batches, want %d", len(got), len(want))
			}
		})
	}
}

// TestPadUntilTellsPaddingFromARecord: padUntil takes a damaged frame for
// a pad only when what changed is where a pad holds nothing; a marker
// whose type byte turned into a Pad's, ending on the same block boundary,
// is a record that was damaged, never padding.
func TestPadUntilTellsPaddingFromARecord(t *testing.T) {
	const seed = 99
	rules := frame.Rules{MaxType: maxType, MaxRecord: padBlock}
	at := func(f []byte) (*frame.Window, int64) {
		// f placed so it ends on the first block boundary.
		b := append(make([]byte, padBlock-len(f)), f...)
		return frame.NewWindow(bytes.NewReader(b), int64(len(b)), len(b)), int64(padBlock - len(f))
	}
	pad := padAfter(nil, padBlock-200, seed, 0)
	marker := frame.Append(nil, typeCompacted, encodeMarker(1<<32|5, Fingerprint{Size: 12345, Tail: 77}), seed, 0)
	for _, c := range []struct {
		name string
		f    []byte
		flip int
		want bool
	}{
		{"a pad's zeros", pad, frame.HeaderSize + 30, true},
		{"a pad's checksum", pad, 9, true},
		{"a pad's position in its write", pad, 13, true},
		{"a pad's length", pad, 0, false},
		{"a marker turned into a pad", marker, 4, false},
	} {
		f := bytes.Clone(c.f)
		if c.name == "a marker turned into a pad" {
			f[4] = byte(typePad)
		} else {
			f[c.flip] ^= 0x10
		}
		w, off := at(f)
		got := padUntil(w, off, seed, rules)
		if (got == padBlock) != c.want || (!c.want && got != -1) {
			t.Errorf("%s: padUntil = %d, want padding: %v", c.name, got, c.want)
		}
	}
	// Undamaged, a pad of 200 bytes is what padAfter writes there.
	if len(pad) != 200 {
		t.Fatalf("padAfter wrote %d bytes for a gap of 200", len(pad))
	}
}
