// Package frame encodes and checks the records sessiond's logs are made
// of: 8-byte aligned frames, each with a length, a type, a CRC32C seeded
// with the file's identity, and its position inside the write() that
// carried it. The journal (internal/journal) is built on it;
// what each record type means is the log's business, not this package's.
//
// # Layout
//
// Every frame starts at an 8-byte aligned offset and is zero-padded to the
// next 8-byte boundary, so the first 8 bytes of a header (length and type)
// never straddle a sector and cannot tear. Integers are little-endian.
//
//	offset size field
//	0      4    payload length n (at most the caller's record limit)
//	4      1    record type (0 is invalid: zero fill never parses)
//	5      3    reserved, must be zero
//	8      4    CRC32C (Castagnoli)
//	12     4    position in write: (this frame's offset - offset where the write() that carried it began) / 8
//	16     n    payload
//	16+n   0-7  zero padding to a multiple of 8
//
// The CRC covers, in order: a 64-bit seed naming the file (so a frame left
// from another file never validates in this one), bytes 0-7, bytes 12-15,
// and the payload. Reserved bytes and padding are checked to be zero.
//
// The position-in-write field is what lets recovery tell a torn tail from
// corruption: a writer issues the next write only after the previous one
// was synced, so a valid frame whose write began after a bad frame proves
// the bad bytes had been synced (FindLaterWrite). WriteSynced writes that
// way, and cuts a failed write back off.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
)

const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 16
	// Align is the alignment of every frame.
	Align = 8
	// MaxRecordLimit keeps frame arithmetic far from int overflow on
	// 32-bit platforms; no transcript entry comes near it.
	MaxRecordLimit = 1 << 30
	// MaxWrite is the largest single write a frame can describe: the
	// position-in-write field counts 8-byte units in a uint32.
	MaxWrite = int64(^uint32(0)) * Align
)

// Castagnoli is the CRC table every checksum uses.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Type is a record type; 0 is never valid.
type Type uint8

// Rules are what a reader accepts: record types 1..MaxType and payloads
// of at most MaxRecord bytes.
type Rules struct {
	MaxType   Type
	MaxRecord int
}

// Error says why bytes are not a valid frame. Anything else a reader
// returns is a failed read, which must not be mistaken for damage.
type Error string

func (e Error) Error() string { return string(e) }

// Reasons a frame is invalid.
const (
	ErrShort    = Error("frame runs past the end of the file")
	ErrType     = Error("unknown record type")
	ErrReserved = Error("reserved header bytes are not zero")
	ErrTooLong  = Error("length is over the record size limit")
	ErrChecksum = Error("checksum mismatch")
	ErrPadding  = Error("padding is not zero")
)

// IsError reports whether err says bytes are damaged (as opposed to a
// failed read).
func IsError(err error) bool {
	var fe Error
	return errors.As(err, &fe)
}

// Header is a parsed frame header.
type Header struct {
	Length     uint32
	Type       Type
	CRC        uint32
	PosInWrite uint32 // in 8-byte units
}

// Size is the on-disk size of a frame carrying n payload bytes.
func Size(n int) int64 {
	return (HeaderSize + int64(n) + Align - 1) &^ (Align - 1)
}

// Size is the on-disk size of the frame h heads.
func (h Header) Size() int64 { return Size(int(h.Length)) }

// WriteStart is the offset of the write() that carried the frame at off.
func (h Header) WriteStart(off int64) int64 { return off - int64(h.PosInWrite)*Align }

// ParseHeader checks a frame header's fields (not its checksum).
func ParseHeader(b []byte, r Rules) (Header, error) {
	h := Header{
		Length:     binary.LittleEndian.Uint32(b[0:4]),
		Type:       Type(b[4]),
		CRC:        binary.LittleEndian.Uint32(b[8:12]),
		PosInWrite: binary.LittleEndian.Uint32(b[12:16]),
	}
	switch {
	case h.Type == 0 || h.Type > r.MaxType:
		return h, ErrType
	case b[5]|b[6]|b[7] != 0:
		return h, ErrReserved
	case int64(h.Length) > int64(r.MaxRecord):
		return h, ErrTooLong
	}
	return h, nil
}

// ChecksumStart is the CRC of everything a frame's checksum covers except
// the payload.
func ChecksumStart(seed uint64, hdr []byte) uint32 {
	var g [8]byte
	binary.LittleEndian.PutUint64(g[:], seed)
	c := crc32.Update(0, Castagnoli, g[:])
	c = crc32.Update(c, Castagnoli, hdr[0:8])
	return crc32.Update(c, Castagnoli, hdr[12:16])
}

// Verify reports whether payload matches the checksum in hdr.
func Verify(seed uint64, hdr, payload []byte) bool {
	return crc32.Update(ChecksumStart(seed, hdr), Castagnoli, payload) == binary.LittleEndian.Uint32(hdr[8:12])
}

// Append appends one frame to dst. posInWrite is the distance in bytes
// from the start of the write that will carry dst's frames.
func Append(dst []byte, t Type, payload []byte, seed uint64, posInWrite int64) []byte {
	return AppendParts(dst, t, seed, posInWrite, payload)
}

// AppendParts is Append for a payload given in parts (a prefix and the
// caller's bytes), so the payload is never assembled in a buffer of its
// own.
func AppendParts(dst []byte, t Type, seed uint64, posInWrite int64, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	start := len(dst)
	total := int(Size(n))
	dst = slices.Grow(dst, total)[:start+total]
	f := dst[start:]
	binary.LittleEndian.PutUint32(f[0:4], uint32(n))
	f[4] = byte(t)
	f[5], f[6], f[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(f[12:16], uint32(posInWrite/Align))
	crc := ChecksumStart(seed, f)
	w := HeaderSize
	for _, p := range parts {
		copy(f[w:], p)
		crc = crc32.Update(crc, Castagnoli, p)
		w += len(p)
	}
	clear(f[w:])
	binary.LittleEndian.PutUint32(f[8:12], crc)
	return dst
}

// Window reads a file through one reusable buffer, so checking a log
// costs one buffer of memory whatever the record sizes.
type Window struct {
	r    io.ReaderAt
	size int64 // file size; nothing at or past it is read
	buf  []byte
	off  int64 // file offset of buf[0]
	n    int   // valid bytes in buf
}

// NewWindow reads r, of size bytes, through a buffer of bufSize bytes.
func NewWindow(r io.ReaderAt, size int64, bufSize int) *Window {
	return NewWindowBuf(r, size, make([]byte, bufSize))
}

// NewWindowBuf is NewWindow with the caller's buffer.
func NewWindowBuf(r io.ReaderAt, size int64, buf []byte) *Window {
	return &Window{r: r, size: size, buf: buf}
}

// FileSize is the size the window reads up to.
func (w *Window) FileSize() int64 { return w.size }

// BufSize is the largest read At can serve.
func (w *Window) BufSize() int { return len(w.buf) }

// At returns n bytes (n <= BufSize) at off. The slice is valid until the
// next call. Bytes past the file's end are ErrShort: a cut, not a failed
// read.
func (w *Window) At(off int64, n int) ([]byte, error) {
	if off < 0 || off+int64(n) > w.size {
		return nil, ErrShort
	}
	if off >= w.off && off+int64(n) <= w.off+int64(w.n) {
		return w.buf[off-w.off:][:n], nil
	}
	m := len(w.buf)
	if rest := w.size - off; rest < int64(m) {
		m = int(rest)
	}
	k, err := w.r.ReadAt(w.buf[:m], off)
	if k < m {
		w.n = 0
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d bytes at offset %d: %w", m, off, err)
	}
	w.off, w.n = off, m
	return w.buf[:n], nil
}

// Read checks the frame at off against seed: header fields, that it fits
// in the file, checksum and padding. The payload is streamed through the
// window, never held whole.
func Read(w *Window, off int64, seed uint64, r Rules) (Header, error) {
	b, err := w.At(off, HeaderSize)
	if err != nil {
		return Header{}, err
	}
	h, err := ParseHeader(b, r)
	if err != nil {
		return h, err
	}
	if off+h.Size() > w.size {
		return h, ErrShort
	}
	crc := ChecksumStart(seed, b)
	p, end := off+HeaderSize, off+HeaderSize+int64(h.Length)
	for p < end {
		n := min(end-p, int64(len(w.buf)))
		chunk, err := w.At(p, int(n))
		if err != nil {
			return h, err
		}
		crc = crc32.Update(crc, Castagnoli, chunk)
		p += n
	}
	if crc != h.CRC {
		return h, ErrChecksum
	}
	if pad := off + h.Size() - end; pad > 0 {
		chunk, err := w.At(end, int(pad))
		if err != nil {
			return h, err
		}
		for _, c := range chunk {
			if c != 0 {
				return h, ErrPadding
			}
		}
	}
	return h, nil
}

// FindLaterWrite looks at every aligned offset after the bad frame at bad
// for a valid frame (seeded with seed) whose write began after bad. Such a
// frame was written after a sync that covered bad, so it turns a torn tail
// into corruption. It returns that frame's offset, or -1.
func FindLaterWrite(w *Window, bad int64, seed uint64, r Rules) (int64, error) {
	for c := bad + Align; c+HeaderSize <= w.size; c += Align {
		if z, err := zeroRun(w, c); err != nil {
			return -1, err
		} else if z > 0 {
			// Zero fill (a reserved, never written tail) holds no
			// header: skip it whole.
			c += z - Align
			continue
		}
		b, err := w.At(c, HeaderSize)
		if err != nil {
			return -1, err
		}
		// Cheap header checks first: a zero-filled or garbage tail fails
		// them at nearly every offset, so the checksum runs rarely.
		h, err := ParseHeader(b, r)
		if err != nil || h.WriteStart(c) <= bad || c+h.Size() > w.size {
			continue
		}
		switch _, err := Read(w, c, seed, r); {
		case err == nil:
			return c, nil
		case !IsError(err):
			return -1, err
		}
	}
	return -1, nil
}

// zeroRun returns how many bytes of zeros start at c, in whole Align
// units, looking no further than the window's buffer already reaches (0
// when the word at c is not zero). A header never starts with a zero word
// (type 0 is invalid).
func zeroRun(w *Window, c int64) (int64, error) {
	b, err := w.At(c, Align)
	if err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint64(b) != 0 {
		return 0, nil
	}
	b = w.buf[c-w.off : w.n] // At left c inside the buffer
	i := Align
	for i+Align <= len(b) && binary.LittleEndian.Uint64(b[i:]) == 0 {
		i += Align
	}
	return int64(i), nil
}

// ReadFull is ReadAt that tells a range past the end of the file (the
// caller's mistake) from a failed read (the disk's).
func ReadFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	switch {
	case n == len(b):
		return nil
	case err == io.EOF:
		return fmt.Errorf("%d bytes at offset %d run past the end of the file: %w", len(b), off, errdefs.ErrInvalidArgument)
	case err == nil:
		err = io.ErrUnexpectedEOF
	}
	return errdefs.FromIO(fmt.Errorf("read %d bytes at offset %d: %w", len(b), off, err))
}

// CheckJSONStrings refuses strings that a JSON record payload would not
// read back exactly: encoding/json silently replaces invalid UTF-8, and a
// record naming a transcript must name the same one when it is read.
// what says whose fields they are, for the error.
func CheckJSONStrings(what string, ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%s field %q is not valid UTF-8: %w", what, s, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
