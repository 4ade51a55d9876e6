package frame

import (
	"bytes"
	"testing"
)

// TestFindLaterWriteAcrossZeros: a valid frame of a later write that lies
// behind a long run of zeros (more than one read buffer: a reserved,
// partly written segment) is still found, at its exact offset, and zeros
// alone prove nothing.
func TestFindLaterWriteAcrossZeros(t *testing.T) {
	const seed = 42
	rules := Rules{MaxType: 3, MaxRecord: 1 << 10}
	first := Append(nil, 1, []byte("first write"), seed, 0)
	bad := int64(len(first))
	data := append(bytes.Clone(first), make([]byte, 3<<20+8)...)
	later := int64(len(data))
	data = Append(data, 2, []byte("a later write"), seed, 0) // position 0: its own write
	for _, buf := range []int{64, 4096, 1 << 20} {
		w := NewWindow(bytes.NewReader(data), int64(len(data)), buf)
		got, err := FindLaterWrite(w, bad, seed, rules)
		if err != nil || got != later {
			t.Fatalf("buffer %d: FindLaterWrite = %d, %v; want %d", buf, got, err, later)
		}
		zeros := NewWindow(bytes.NewReader(data[:later]), later, buf)
		if got, err := FindLaterWrite(zeros, bad, seed, rules); err != nil || got != -1 {
			t.Fatalf("buffer %d, zeros only: FindLaterWrite = %d, %v; want -1", buf, got, err)
		}
	}
}
