package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// threeWrites is a journal of three appends; the last one carries one batch
// of three entries so a cut can land in any entry, between them, or in the
// commit.
type threeWrites struct {
	data      []byte
	want      [][]string // all three batches
	lastStart int64      // where the last write began
	spans     [][]Span
}

func makeThreeWrites(t *testing.T) threeWrites {
	path := filepath.Join(t.TempDir(), "src.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	tw := threeWrites{
		want: [][]string{{`{"type":"user"}`, `{"n":2}`}, {`{"type":"assistant"}`}, {"", "five!", "a twenty byte entry."}},
	}
	tw.spans = append(tw.spans, mustAppend(t, j, tw.want[0])...)
	tw.spans = append(tw.spans, mustAppend(t, j, tw.want[1])...)
	tw.lastStart = j.Size()
	tw.spans = append(tw.spans, mustAppend(t, j, tw.want[2])...)
	mustClose(t, j)
	tw.data = readFile(t, path)
	return tw
}

// checkTorn opens data as a journal and checks it recovers exactly want,
// cut back to end, and takes another append that survives a reopen.
func checkTorn(t *testing.T, path string, data []byte, want [][]string, end int64) {
	t.Helper()
	writeFile(t, path, data)
	j, rec := openExpect(t, path, want)
	if rec.End != end || rec.TruncatedBytes != int64(len(data))-end {
		t.Fatalf("End %d TruncatedBytes %d, want %d and %d", rec.End, rec.TruncatedBytes, end, int64(len(data))-end)
	}
	mustAppend(t, j, []string{"after recovery"})
	mustClose(t, j)
	j, rec = openExpect(t, path, append(want[:len(want):len(want)], []string{"after recovery"}))
	if rec.TruncatedBytes != 0 {
		t.Fatalf("second Open cut %d bytes", rec.TruncatedBytes)
	}
	mustClose(t, j)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestTornTailEveryOffset(t *testing.T) {
	tw := makeThreeWrites(t)
	dir := t.TempDir()
	for cut := tw.lastStart; cut < int64(len(tw.data)); cut++ {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			t.Parallel() // each cut costs a few fsyncs
			checkTorn(t, filepath.Join(dir, fmt.Sprintf("torn-%d.wal", cut)), tw.data[:cut], tw.want[:2], tw.lastStart)
		})
	}
	// And the whole file is whole.
	checkTorn(t, filepath.Join(dir, "whole.wal"), tw.data, tw.want, int64(len(tw.data)))
}

func TestTornMarkerEveryOffset(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.wal")
	j := mustCreate(t, fsys.OS, src, testHeader(0))
	mustAppend(t, j, []string{"e"})
	before := j.Size()
	if err := j.MarkCompacted(Marker{Size: 99, Tail: 7}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	data := readFile(t, src)
	path := filepath.Join(t.TempDir(), "torn.wal")
	for cut := before; cut < int64(len(data)); cut++ {
		writeFile(t, path, data[:cut])
		j, rec := openExpect(t, path, [][]string{{"e"}})
		if rec.Compacted != nil || rec.End != before {
			t.Fatalf("cut at %d: marker %v, End %d; want none and %d", cut, rec.Compacted, rec.End, before)
		}
		mustClose(t, j)
	}
}

func TestTornTailGarbage(t *testing.T) {
	tw := makeThreeWrites(t)
	size := int64(len(tw.data))
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// Frames of another generation, as a reused file or a misdirected
	// write could leave them.
	otherPath := filepath.Join(t.TempDir(), "other.wal")
	other := mustCreate(t, fsys.OS, otherPath, testHeader(0))
	otherStart := other.Size()
	mustAppend(t, other, []string{"stale 1", "stale 2"}, []string{"stale 3"})
	mustClose(t, other)
	otherData := readFile(t, otherPath)
	// Another generation that reached batch 4: its fourth write would be
	// accepted as our next batch if checksums ignored the generation.
	nextPath := filepath.Join(t.TempDir(), "next.wal")
	next := mustCreate(t, fsys.OS, nextPath, testHeader(0))
	mustAppend(t, next, []string{"n1"}, []string{"n2"}, []string{"n3"})
	nextStart := next.Size()
	mustAppend(t, next, []string{"stale batch 4"})
	mustClose(t, next)
	nextData := readFile(t, nextPath)

	lastWriteZeroed := bytes.Clone(tw.data)
	clear(lastWriteZeroed[tw.lastStart:])

	cases := []struct {
		name string
		data []byte
		want [][]string
		end  int64
	}{
		{"8 zero bytes", append(bytes.Clone(tw.data), make([]byte, 8)...), tw.want, size},
		{"13 zero bytes", append(bytes.Clone(tw.data), make([]byte, 13)...), tw.want, size},
		{"a zero page", append(bytes.Clone(tw.data), make([]byte, 4096)...), tw.want, size},
		{"a zero MiB", append(bytes.Clone(tw.data), make([]byte, 1<<20)...), tw.want, size},
		{"last write zero-filled (ext4 after power loss)", lastWriteZeroed, tw.want[:2], tw.lastStart},
		{"last write zero-filled and more zeros", append(bytes.Clone(lastWriteZeroed), make([]byte, 8192)...), tw.want[:2], tw.lastStart},
		{"3 random bytes", append(bytes.Clone(tw.data), random(3)...), tw.want, size},
		{"random garbage", append(bytes.Clone(tw.data), random(5000)...), tw.want, size},
		{"random garbage over the last write", append(bytes.Clone(tw.data[:tw.lastStart+5]), random(300)...), tw.want[:2], tw.lastStart},
		{"frames of another generation", append(bytes.Clone(tw.data), otherData[otherStart:]...), tw.want, size},
		{"another generation's batch 4", append(bytes.Clone(tw.data), nextData[nextStart:]...), tw.want, size},
		{"another whole journal", append(bytes.Clone(tw.data), otherData...), tw.want, size},
		{"another journal over the last write", append(bytes.Clone(tw.data[:tw.lastStart]), otherData...), tw.want[:2], tw.lastStart},
	}
	path := filepath.Join(t.TempDir(), "torn.wal")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkTorn(t, path, tc.data, tc.want, tc.end)
		})
	}
}

// TestTornWriteWithHole: the page cache may write the pages of one write()
// back in any order, so a crash can leave a hole with valid frames of the
// same write after it. That write was never synced (nor acknowledged): it
// is a torn tail, not corruption.
func TestTornWriteWithHole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "src.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	mustAppend(t, j, []string{"acked"})
	lastStart := j.Size()
	spans := mustAppend(t, j, []string{"b1 first", "b1 second"}, []string{"b2 only"})
	mustClose(t, j)
	data := readFile(t, path)
	commit1 := spans[0][1].Off + frame.Size(len("b1 second")) - frame.HeaderSize
	commit1End := commit1 + frame.Size(commitPayloadSize)

	hole := func(from, n int64) []byte {
		d := bytes.Clone(data)
		clear(d[from : from+n])
		return d
	}
	cases := []struct {
		name string
		data []byte
		want [][]string
		end  int64
	}{
		{"first entry missing", hole(lastStart, 8), [][]string{{"acked"}}, lastStart},
		{"second entry missing", hole(spans[0][1].Off-frame.HeaderSize, frame.Size(len("b1 second"))), [][]string{{"acked"}}, lastStart},
		{"first commit missing", hole(commit1, 16), [][]string{{"acked"}}, lastStart},
		{"second batch's entry missing", hole(spans[1][0].Off, 4), [][]string{{"acked"}, {"b1 first", "b1 second"}}, commit1End},
	}
	torn := filepath.Join(t.TempDir(), "torn.wal")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkTorn(t, torn, tc.data, tc.want, tc.end)
		})
	}
}

func TestCorruptionInTheMiddle(t *testing.T) {
	tw := makeThreeWrites(t)
	firstEntry := tw.spans[0][0].Off - frame.HeaderSize
	firstCommit := tw.spans[0][1].Off - frame.HeaderSize + frame.Size(len(tw.want[0][1]))
	secondEntry := tw.spans[1][0].Off - frame.HeaderSize
	flip := func(at int64, mask byte) func([]byte) {
		return func(d []byte) { d[at] ^= mask }
	}
	cases := []struct {
		name   string
		damage func([]byte)
		at     int64 // offset of the damaged frame
	}{
		{"header length", flip(0, 0x01), 0},
		{"header type", flip(4, 0x07), 0},
		{"header reserved", flip(6, 0x01), 0},
		{"header crc", flip(10, 0x10), 0},
		{"header position in write", flip(13, 0x01), 0},
		{"header payload", flip(30, 0x02), 0},
		{"first entry payload", flip(tw.spans[0][0].Off+3, 0x04), firstEntry},
		{"first entry length", flip(firstEntry, 0x08), firstEntry},
		{"first entry zeroed", func(d []byte) { clear(d[firstEntry : firstEntry+frame.Size(tw.spans[0][0].Len)]) }, firstEntry},
		{"first commit seq", flip(firstCommit+frame.HeaderSize, 0x01), firstCommit},
		{"first commit count", flip(firstCommit+frame.HeaderSize+8, 0x01), firstCommit},
		{"second write's entry", flip(tw.spans[1][0].Off, 0x40), secondEntry},
		{"everything after the header is garbage but the last write", func(d []byte) {
			for i := firstEntry; i < tw.lastStart; i++ {
				d[i] = 0xee
			}
		}, firstEntry},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("c%d.wal", i))
			data := bytes.Clone(tw.data)
			tc.damage(data)
			writeFile(t, path, data)
			expectCorrupt(t, path, data, tc.at)
		})
	}
}

// A damaged header is never a torn write (Create syncs it before the file
// gets its name), so even with nothing after it Open refuses to guess.
func TestBadHeaderAlone(t *testing.T) {
	hdr := buildJournal(t, testGen)
	payload := hdr[frame.HeaderSize : frame.HeaderSize+binary.LittleEndian.Uint32(hdr[0:4])]
	dir := t.TempDir()
	for i, data := range [][]byte{
		nil,
		hdr[:10],
		hdr[:len(hdr)-1],
		append(bytes.Clone(hdr[:20]), 'X'),
		make([]byte, 64),
		frame.Append(nil, typeEntry, []byte("x"), 0, 0),        // valid frame, wrong type
		frame.Append(nil, typeHeader, payload, 0, frame.Align), // header claiming to be mid-write
		frame.Append(nil, typeHeader, []byte(`{"v":1}`), 0, 0), // generation 0
		frame.Append(nil, typeHeader, []byte(`{"v":1,`), 0, 0), // not JSON
	} {
		path := filepath.Join(dir, fmt.Sprintf("h%d.wal", i))
		writeFile(t, path, data)
		expectCorrupt(t, path, data, 0)
	}
}

// TestRecordOrderChecks: frames that checksum fine but contradict the
// records before them are damage like any other: corruption when a later
// write follows, a torn tail otherwise.
func TestRecordOrderChecks(t *testing.T) {
	good := []frameSpec{entryRec("ok"), commitRec(1, 1)}
	later := []frameSpec{entryRec("later"), commitRec(3, 1)}
	cases := []struct {
		name string
		bad  [][]frameSpec // writes after the good one
		at   int           // index of the contradicting frame among bad's frames
	}{
		{"seq gap", [][]frameSpec{{entryRec("x"), commitRec(3, 1)}}, 1},
		{"seq repeated", [][]frameSpec{{commitRec(1, 0)}}, 0},
		{"count too high", [][]frameSpec{{entryRec("x"), commitRec(2, 2)}}, 1},
		{"count too low", [][]frameSpec{{entryRec("x"), entryRec("y"), commitRec(2, 1)}}, 2},
		{"commit payload short", [][]frameSpec{{{typeCommit, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}}}, 0},
		{"marker payload long", [][]frameSpec{{{typeCompacted, make([]byte, 13)}}}, 0},
		{"marker negative size", [][]frameSpec{{markerRec(Marker{Size: -5})}}, 0},
		{"header record again", [][]frameSpec{{{typeHeader, []byte(`{}`)}}}, 0},
		{"entries left uncommitted by an earlier write", [][]frameSpec{{entryRec("orphan")}, {entryRec("x"), commitRec(2, 1)}}, 1},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := buildJournal(t, testGen, good)
			damageAt := int64(len(base))
			k := 0
			for _, w := range tc.bad {
				for _, r := range w {
					if k < tc.at {
						damageAt += frame.Size(len(r.payload))
					}
					k++
				}
			}

			// Alone at the end: a torn tail, cut back to the good write.
			torn := buildJournal(t, testGen, append([][]frameSpec{good}, tc.bad...)...)
			path := filepath.Join(dir, fmt.Sprintf("t%d.wal", i))
			writeFile(t, path, torn)
			j, rec := openExpect(t, path, [][]string{{"ok"}})
			if rec.End != int64(len(base)) {
				t.Fatalf("End %d, want %d", rec.End, len(base))
			}
			mustClose(t, j)

			// Followed by a later write: corruption at the contradicting frame.
			writes := append([][]frameSpec{good}, tc.bad...)
			data := buildJournal(t, testGen, append(writes, later)...)
			path = filepath.Join(dir, fmt.Sprintf("c%d.wal", i))
			writeFile(t, path, data)
			expectCorrupt(t, path, data, damageAt)
		})
	}
}

// A frame whose position-in-write disagrees with the frames of its write
// cannot be trusted to say which write it belongs to.
func TestPositionInWriteChecked(t *testing.T) {
	data := buildJournal(t, testGen, []frameSpec{entryRec("ok"), commitRec(1, 1)})
	good := int64(len(data))
	// One write of two frames, but the second claims a different start.
	data = frame.Append(data, typeEntry, []byte("x"), testGen, 0)
	bad := int64(len(data))
	data = frame.Append(data, typeCommit, commitRec(2, 1).payload, testGen, 8)
	path := filepath.Join(t.TempDir(), "s.wal")
	writeFile(t, path, data)
	j, rec := openExpect(t, path, [][]string{{"ok"}})
	mustClose(t, j)
	if rec.End != good {
		t.Fatalf("End %d, want %d", rec.End, good)
	}
	// With a later write after it, the same frame is corruption.
	later := int64(len(data))
	data = frame.Append(data, typeEntry, []byte("later"), testGen, 0)
	data = frame.Append(data, typeCommit, commitRec(3, 1).payload, testGen, int64(len(data))-later)
	writeFile(t, path, data)
	expectCorrupt(t, path, data, bad)
}

func TestOpenNewerVersionLeavesFileAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	data := frame.Append(nil, typeHeader, []byte(`{"v":2,"generation":77}`), 0, 0)
	writeFile(t, path, data)
	_, _, err := Open(fsys.OS, path, Options{})
	if err == nil || errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("Open of a newer format: %v, want a non-corruption error", err)
	}
	if !bytes.Equal(readFile(t, path), data) {
		t.Fatal("Open changed a journal it cannot read")
	}
}

func TestQuarantineKeepsEveryCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.wal")
	for i := range 3 {
		data := []byte(fmt.Sprintf("not a journal %d", i))
		writeFile(t, path, data)
		if _, _, err := Open(fsys.OS, path, Options{}); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
	}
	asides, _ := filepath.Glob(path + ".corrupt-*")
	if len(asides) != 3 {
		t.Fatalf("kept-aside copies %q, want 3", asides)
	}
}

// A record bigger than the reader's limit is damage for that reader: Open
// must not trust a length it was told is impossible.
func TestOpenHonoursMaxRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	mustAppend(t, j, []string{"small"})
	end := j.Size()
	mustAppend(t, j, []string{string(make([]byte, 2000))})
	mustClose(t, j)
	j, rec, err := Open(fsys.OS, path, Options{MaxRecord: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(rec.Batches) != 1 || rec.End != end {
		t.Fatalf("recovered %d batches to %d, want 1 to %d", len(rec.Batches), rec.End, end)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r     io.ReaderAt
	bytes int64
}

func (c *countingReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(b, off)
	c.bytes += int64(n)
	return n, err
}

// A tail where every aligned offset looks like a frame header makes Open
// check each one; that must stay a bounded number of passes over the file,
// not a window refill per candidate.
func TestGarbageTailReadCost(t *testing.T) {
	const maxRecord = 4096
	data := buildJournal(t, testGen, []frameSpec{entryRec("ok"), commitRec(1, 1)})
	end := int64(len(data))
	// Each 8 bytes read as a header: length 4096, entry, reserved zero; and
	// as the second half of one: a wrong crc and a position of 2 units,
	// which places the candidate's write after the damage.
	pattern := []byte{0x00, 0x10, 0x00, 0x00, byte(typeEntry), 0, 0, 0}
	for range (1 << 20) / len(pattern) {
		data = append(data, pattern...)
	}
	cr := &countingReader{r: bytes.NewReader(data)}
	res, err := scan(cr, int64(len(data)), maxRecord)
	if err != nil || res.damage >= 0 || res.rec.End != end {
		t.Fatalf("scan: %v, damage %d, End %d; want a torn tail at %d", err, res.damage, res.rec.End, end)
	}
	if limit := 4 * int64(len(data)); cr.bytes > limit {
		t.Fatalf("scan read %d bytes of a %d-byte file, want at most %d", cr.bytes, len(data), limit)
	}
}

// TestCrashInLastWrite simulates power loss during a write that was never
// synced: its sectors reach the disk in any order, each one either whole or
// lost (zeros, or stale garbage), and the file size may be anywhere in it.
// Open must never call that corruption, must keep every batch of the earlier
// (synced) writes, and may keep only intact batches of the torn one.
func TestCrashInLastWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	src := filepath.Join(t.TempDir(), "src.wal")
	j := mustCreate(t, fsys.OS, src, testHeader(0))
	var all [][]string   // every batch, in order
	var writeEnd []int64 // where each write ended
	var before []int     // batches committed before each write
	starts := []int64{j.Size()}
	for range 12 {
		var bs [][]string
		for range 1 + rng.IntN(3) {
			var b []string
			for range rng.IntN(4) {
				b = append(b, string(bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(700))))
			}
			bs = append(bs, b)
		}
		before = append(before, len(all))
		mustAppend(t, j, bs...)
		all = append(all, bs...)
		writeEnd = append(writeEnd, j.Size())
		starts = append(starts, j.Size())
	}
	mustClose(t, j)
	data := readFile(t, src)

	const sector = 512
	dir := t.TempDir()
	for trial := range 300 {
		k := rng.IntN(len(writeEnd)) // the write the crash hit
		start, end := starts[k], writeEnd[k]
		d := bytes.Clone(data[:end])
		for s := start &^ (sector - 1); s < end; s += sector {
			lo, hi := max(s, start), min(s+sector, end)
			switch rng.IntN(3) {
			case 0: // lost: zeros
				clear(d[lo:hi])
			case 1: // lost: stale garbage
				for i := lo; i < hi; i++ {
					d[i] = byte(rng.Uint32())
				}
			}
		}
		d = d[:start+rng.Int64N(end-start+1)]

		path := filepath.Join(dir, fmt.Sprintf("crash-%d.wal", trial))
		writeFile(t, path, d)
		j, rec, err := Open(noSyncFS{fsys.OS}, path, Options{})
		if err != nil {
			t.Fatalf("trial %d (write %d cut at %d): %v", trial, k, len(d), err)
		}
		got := contents(t, j, rec.Batches)
		mustClose(t, j)
		if len(got) < before[k] || len(got) > len(all) || !slices.EqualFunc(got, all[:len(got)], slices.Equal[[]string]) {
			t.Fatalf("trial %d: recovered %d batches, want the first %d at least and a prefix of all %d",
				trial, len(got), before[k], len(all))
		}
		if k+1 < len(before) && len(got) > before[k+1] {
			t.Fatalf("trial %d: recovered batches of writes after the crash", trial)
		}
	}
}
