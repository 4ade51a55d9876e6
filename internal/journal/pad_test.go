package journal

import (
	"bytes"
	"encoding/json"
	"errors"
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
	toVersion1(t, filepath.Join(dir, segName(1)))
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

// toVersion1 gives the segment at path a version 1 header: same length,
// so every record stays where it was.
func toVersion1(t *testing.T, path string) {
	t.Helper()
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
}

// TestDamageInsideAPadLosesNothing: a byte the disk changed inside a Pad
// record is reported as damaged padding and costs no record, whether an
// intact later write follows it or it ends the segment's last write (the
// acknowledgement record counts that write's end with its pad): recovery
// reads on and calls nothing corrupt or lost. The same damage to the
// pad's type is damage like any other.
func TestDamageInsideAPadLosesNothing(t *testing.T) {
	for _, later := range []bool{true, false} {
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
		if later {
			if _, err := s.Append(batchesOf([]string{"after the pad"}), nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, []string{"after the pad"})
		}
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
			t.Run(fmt.Sprintf("%s, later write %v", c.name, later), func(t *testing.T) {
				d := t.TempDir()
				b := bytes.Clone(clean)
				b[c.at] ^= 0x20
				if err := os.WriteFile(filepath.Join(d, segName(1)), b, 0o600); err != nil {
					t.Fatal(err)
				}
				// The acknowledgement record too: it is what tells a
				// damaged last write from a loss.
				ack, err := os.ReadFile(filepath.Join(dir, ackName))
				if err != nil {
					t.Fatalf("the acknowledgement record: %v", err)
				}
				if err := os.WriteFile(filepath.Join(d, ackName), ack, 0o600); err != nil {
					t.Fatal(err)
				}
				l, rec, err := Open(Options{FS: fsys.OS, Dir: d})
				if c.corrupt {
					// Later write or not, the damaged records are
					// reported (as corrupt, or as a loss that stops
					// the start).
					if err == nil {
						defer l.Close()
						if len(rec.Corrupt) != 1 || len(rec.PadDamaged) != 0 {
							t.Fatalf("recovery %+v: want the damage called corrupt", rec)
						}
					} else if !errors.Is(err, ErrLost) {
						t.Fatalf("Open: %v, want the damage refused as a loss", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Open over damaged padding: %v", err)
				}
				defer l.Close()
				if len(rec.Corrupt) != 0 || len(rec.Lost) != 0 || len(rec.PadDamaged) != 1 || !strings.Contains(rec.PadDamaged[0], "nothing is lost") {
					t.Fatalf("recovery %+v: want damaged padding and nothing corrupt or lost", rec)
				}
				if got := contents(t, l, key("a")); !slices.EqualFunc(got, want, slices.Equal) {
					t.Fatalf("read back %d batches, want %d", len(got), len(want))
				}
			})
		}
	}
}

// TestPadUntilTellsPaddingFromARecord: padUntil takes a damaged frame for
// a pad only when what changed is where a pad holds nothing, the pad ends
// the write the scan is in, no batch is open and the segment may hold
// pads; a marker whose type byte turned into a Pad's, ending on the same
// block boundary, is a record that was damaged, never padding.
func TestPadUntilTellsPaddingFromARecord(t *testing.T) {
	const seed, pos = 99, 64 // the pad ends a write that began 64 bytes before it
	rules := frame.Rules{MaxType: maxType, MaxRecord: padBlock}
	pad := padAfter(nil, padBlock-200, seed, pos)
	if len(pad) != 200 {
		t.Fatalf("padAfter wrote %d bytes for a gap of 200", len(pad))
	}
	marker := frame.Append(nil, typeCompacted, encodeMarker(1<<32|5, Fingerprint{Size: 12345, Tail: 77}), seed, pos)
	for _, c := range []struct {
		name    string
		f       []byte
		change  func(f []byte)
		v1      bool
		pending bool
		want    bool
	}{
		{name: "a pad's zeros", f: pad, change: func(f []byte) { f[frame.HeaderSize+30] ^= 0x10 }, want: true},
		{name: "a pad's checksum", f: pad, change: func(f []byte) { f[9] ^= 0x10 }, want: true},
		{name: "a pad's position in its write", f: pad, change: func(f []byte) { f[13] ^= 0x10 }},
		{name: "a pad's length", f: pad, change: func(f []byte) { f[0] ^= 0x10 }},
		{name: "a marker turned into a pad", f: marker, change: func(f []byte) { f[4] = byte(typePad) }},
		{name: "a pad's zeros in a version 1 segment", f: pad, change: func(f []byte) { f[frame.HeaderSize+30] ^= 0x10 }, v1: true},
		{name: "a pad's zeros while a batch lacks its commit", f: pad, change: func(f []byte) { f[frame.HeaderSize+30] ^= 0x10 }, pending: true},
	} {
		f := bytes.Clone(c.f)
		c.change(f)
		off := int64(padBlock - len(f))
		b := append(make([]byte, off), f...)
		w := frame.NewWindow(bytes.NewReader(b), int64(len(b)), len(b))
		sc := &scanner{l: &Log{rules: rules}, pending: map[uint64]*pendingBatch{}}
		if c.pending {
			sc.pending[1] = &pendingBatch{}
		}
		got := sc.padUntil(w, &segment{id: seed, v1: c.v1}, off, off-pos)
		if (got == padBlock) != c.want || (!c.want && got != -1) {
			t.Errorf("%s: padUntil = %d, want padding: %v", c.name, got, c.want)
		}
	}
}
