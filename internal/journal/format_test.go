package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"testing"

	"github.com/sessiond/sessiond/internal/frame"
)

const testGen = 0x0123456789abcdef

// decodeAll checks the single frame in b through a window of bufSize bytes
// (small windows make payloads stream across refills) and returns its
// header and payload.
func decodeAll(b []byte, gen uint64, maxRecord, bufSize int) (frame.Header, []byte, error) {
	w := frame.NewWindow(bytes.NewReader(b), int64(len(b)), bufSize)
	h, err := frame.Read(w, 0, gen, rules(maxRecord))
	if err != nil {
		return h, nil, err
	}
	return h, b[frame.HeaderSize : frame.HeaderSize+int(h.Length)], nil
}

// fixCRC recomputes the checksum of the frame at the start of f so a test
// can reach the checks that come after it.
func fixCRC(f []byte, gen uint64) {
	n := binary.LittleEndian.Uint32(f[0:4])
	crc := crc32.Update(frame.ChecksumStart(gen, f), frame.Castagnoli, f[frame.HeaderSize:frame.HeaderSize+int(n)])
	binary.LittleEndian.PutUint32(f[8:12], crc)
}

func TestFrameRoundTrip(t *testing.T) {
	const maxRecord = 4096
	hdr, err := encodeHeader(testHeader(testGen))
	if err != nil {
		t.Fatal(err)
	}
	commit := encodeCommit(7, 3)
	marker := encodeMarker(Marker{Size: 1 << 40, Tail: 0xfeedface})
	type frameCase struct {
		name    string
		typ     frame.Type
		gen     uint64
		payload []byte
	}
	cases := []frameCase{
		{"header", typeHeader, 0, hdr},
		{"commit", typeCommit, testGen, commit[:]},
		{"compacted", typeCompacted, testGen, marker[:]},
		{"empty entry", typeEntry, testGen, nil},
	}
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 100, maxRecord} {
		cases = append(cases, frameCase{fmt.Sprintf("entry of %d bytes", n), typeEntry, testGen, bytes.Repeat([]byte{0xa5}, n)})
	}
	for _, tc := range cases {
		for _, pos := range []int64{0, 8, 1 << 20} {
			prefix := []byte("prefix!!") // appendFrame must append, not overwrite
			f := frame.Append(append([]byte{}, prefix...), tc.typ, tc.payload, tc.gen, pos)
			if !bytes.Equal(f[:len(prefix)], prefix) {
				t.Fatalf("%s: prefix overwritten", tc.name)
			}
			f = f[len(prefix):]
			if len(f)%frame.Align != 0 || int64(len(f)) != frame.Size(len(tc.payload)) {
				t.Fatalf("%s: frame is %d bytes, want %d (8-byte aligned)", tc.name, len(f), frame.Size(len(tc.payload)))
			}
			if pad := f[frame.HeaderSize+len(tc.payload):]; len(pad) >= frame.Align || !bytes.Equal(pad, make([]byte, len(pad))) {
				t.Fatalf("%s: padding %x, want < 8 zero bytes", tc.name, pad)
			}
			for _, bufSize := range []int{frame.HeaderSize, 64, windowSize} {
				h, p, err := decodeAll(f, tc.gen, maxRecord, bufSize)
				if err != nil {
					t.Fatalf("%s (window %d): %v", tc.name, bufSize, err)
				}
				if h.Type != tc.typ || !bytes.Equal(p, tc.payload) || h.WriteStart(1<<30) != 1<<30-pos {
					t.Fatalf("%s: decoded type %v, payload %d bytes, write start %d", tc.name, h.Type, len(p), h.WriteStart(1<<30))
				}
			}
		}
	}
}

// TestFrameLayout pins the documented byte layout independently of
// appendFrame, so the encoder and the doc comment cannot drift together.
func TestFrameLayout(t *testing.T) {
	want := []byte{
		12, 0, 0, 0, // payload length
		3,       // commit
		0, 0, 0, // reserved
		0, 0, 0, 0, // crc, filled below
		3, 0, 0, 0, // position in write: 24 bytes = 3 units
		9, 0, 0, 0, 0, 0, 0, 0, // seq 9
		2, 0, 0, 0, // 2 entries
		0, 0, 0, 0, // padding to 32
	}
	var covered []byte
	covered = binary.LittleEndian.AppendUint64(covered, testGen)
	covered = append(covered, want[0:8]...)
	covered = append(covered, want[12:16]...)
	covered = append(covered, want[16:28]...)
	binary.LittleEndian.PutUint32(want[8:12], crc32.Checksum(covered, crc32.MakeTable(crc32.Castagnoli)))

	p := encodeCommit(9, 2)
	if got := frame.Append(nil, typeCommit, p[:], testGen, 24); !bytes.Equal(got, want) {
		t.Fatalf("commit frame\n got %x\nwant %x", got, want)
	}
}

func TestFrameRejects(t *testing.T) {
	const maxRecord = 64
	entry := func(n int) []byte { return frame.Append(nil, typeEntry, bytes.Repeat([]byte{'x'}, n), testGen, 0) }
	cases := []struct {
		name  string
		frame func() []byte
		gen   uint64
		want  error
	}{
		{"over max length", func() []byte { return entry(maxRecord + 1) }, testGen, frame.ErrTooLong},
		{"max length is fine", func() []byte { return entry(maxRecord) }, testGen, nil},
		{"length near 4 GiB", func() []byte {
			f := entry(8)
			binary.LittleEndian.PutUint32(f[0:4], 0xfffffff0)
			return f
		}, testGen, frame.ErrTooLong},
		{"wrong generation", func() []byte { return entry(10) }, testGen + 1, frame.ErrChecksum},
		{"generation 0 for an entry", func() []byte { return entry(10) }, 0, frame.ErrChecksum},
		{"payload byte flipped", func() []byte { f := entry(10); f[20] ^= 1; return f }, testGen, frame.ErrChecksum},
		{"crc byte flipped", func() []byte { f := entry(10); f[9] ^= 0x80; return f }, testGen, frame.ErrChecksum},
		{"position in write changed", func() []byte { f := entry(10); f[12] = 1; return f }, testGen, frame.ErrChecksum},
		{"length shortened", func() []byte { f := entry(10); f[0] = 9; return f }, testGen, frame.ErrChecksum},
		{"type changed to commit", func() []byte { f := entry(10); f[4] = byte(typeCommit); return f }, testGen, frame.ErrChecksum},
		{"type 0 (zero fill)", func() []byte { return make([]byte, 32) }, testGen, frame.ErrType},
		{"type 6", func() []byte { f := entry(10); f[4] = 6; fixCRC(f, testGen); return f }, testGen, frame.ErrType},
		{"type 255", func() []byte { f := entry(10); f[4] = 255; fixCRC(f, testGen); return f }, testGen, frame.ErrType},
		{"reserved byte 5", func() []byte { f := entry(10); f[5] = 1; fixCRC(f, testGen); return f }, testGen, frame.ErrReserved},
		{"reserved byte 6", func() []byte { f := entry(10); f[6] = 0x40; fixCRC(f, testGen); return f }, testGen, frame.ErrReserved},
		{"reserved byte 7", func() []byte { f := entry(10); f[7] = 0xff; fixCRC(f, testGen); return f }, testGen, frame.ErrReserved},
		{"padding not zero", func() []byte { f := entry(10); f[len(f)-1] = 1; return f }, testGen, frame.ErrPadding},
		{"length runs past the end", func() []byte { f := entry(10); return f[:len(f)-1] }, testGen, frame.ErrShort},
		{"header cut", func() []byte { return entry(10)[:15] }, testGen, frame.ErrShort},
		{"nothing", func() []byte { return nil }, testGen, frame.ErrShort},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeAll(tc.frame(), tc.gen, maxRecord, 32)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && !frame.IsError(err) {
				t.Fatalf("%v is not reported as a bad frame", err)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, io.ErrClosedPipe }

// A read that fails must never look like damage: Open would cut or move
// aside a healthy journal.
func TestFrameReadErrorIsNotDamage(t *testing.T) {
	w := frame.NewWindow(failingReader{}, 1<<20, 64)
	_, err := frame.Read(w, 0, testGen, rules(1024))
	if err == nil || frame.IsError(err) || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("got %v, want the read error, not a frame error", err)
	}
}

func TestHeaderPayload(t *testing.T) {
	h := testHeader(testGen)
	h.Subpath = "subagents/agent-a2898e3"
	p, err := encodeHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeHeader(p)
	if err != nil || got != h {
		t.Fatalf("decodeHeader = %+v, %v; want %+v", got, err, h)
	}
	bad := []struct {
		name    string
		payload string
		frame   bool // reported as damage, not as a newer version
	}{
		{"not json", `{"v":1,`, true},
		{"trailing data", `{"v":1,"generation":5}{}`, true},
		{"version 0", `{"generation":5}`, true},
		{"generation 0", `{"v":1,"generation":0}`, true},
		{"negative base", `{"v":1,"generation":5,"base_size":-1}`, true},
		{"newer version", `{"v":2,"generation":5}`, false},
	}
	for _, tc := range bad {
		_, err := decodeHeader([]byte(tc.payload))
		if err == nil || frame.IsError(err) != tc.frame {
			t.Errorf("%s: got %v, want frame error %v", tc.name, err, tc.frame)
		}
	}
}
