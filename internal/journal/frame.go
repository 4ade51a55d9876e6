package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
)

const (
	frameHeaderSize = 16
	frameAlign      = 8

	// Commit: seq uint64 + entry count uint32. Compacted: size int64 + tail uint32.
	commitPayloadSize = 12
	markerPayloadSize = 12

	// DefaultMaxRecord is the payload limit used when Options.MaxRecord is 0.
	DefaultMaxRecord = 64 << 20
	// maxRecordLimit keeps frame arithmetic far from int overflow on 32-bit
	// platforms; no transcript entry comes near it.
	maxRecordLimit = 1 << 30
	// maxHeaderPayload bounds what Open reads into memory for the Header
	// record; real headers are a few hundred bytes.
	maxHeaderPayload = 64 << 10
	// MaxMeta bounds a batch's Meta record, which recovery holds in memory
	// for every batch it finds.
	MaxMeta = 64 << 10
	// maxWrite is the largest single write Append can describe: the
	// position-in-write field counts 8-byte units in a uint32.
	maxWrite = math.MaxUint32 * frameAlign

	headerVersion = 1
)

type recordType uint8

const (
	typeHeader    recordType = 1
	typeEntry     recordType = 2
	typeCommit    recordType = 3
	typeCompacted recordType = 4
	typeMeta      recordType = 5
)

func (t recordType) String() string {
	switch t {
	case typeHeader:
		return "header"
	case typeEntry:
		return "entry"
	case typeCommit:
		return "commit"
	case typeCompacted:
		return "compacted"
	case typeMeta:
		return "meta"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameError says why bytes are not a valid frame. Anything else a decoder
// returns is a failed read, which must not be mistaken for damage.
type frameError string

func (e frameError) Error() string { return string(e) }

const (
	errShortFrame = frameError("frame runs past the end of the file")
	errRecordType = frameError("unknown record type")
	errReserved   = frameError("reserved header bytes are not zero")
	errTooLong    = frameError("length is over the record size limit")
	errChecksum   = frameError("checksum mismatch")
	errPadding    = frameError("padding is not zero")
)

func isFrameError(err error) bool {
	var fe frameError
	return errors.As(err, &fe)
}

type frameHeader struct {
	length     uint32
	typ        recordType
	crc        uint32
	posInWrite uint32 // in 8-byte units
}

// frameSize is the on-disk size of a frame carrying n payload bytes.
func frameSize(n int) int64 {
	return (frameHeaderSize + int64(n) + frameAlign - 1) &^ (frameAlign - 1)
}

func (h frameHeader) size() int64 { return frameSize(int(h.length)) }

// writeStart is the offset of the write() that carried the frame at off.
func (h frameHeader) writeStart(off int64) int64 { return off - int64(h.posInWrite)*frameAlign }

func parseFrameHeader(b []byte, maxRecord int) (frameHeader, error) {
	h := frameHeader{
		length:     binary.LittleEndian.Uint32(b[0:4]),
		typ:        recordType(b[4]),
		crc:        binary.LittleEndian.Uint32(b[8:12]),
		posInWrite: binary.LittleEndian.Uint32(b[12:16]),
	}
	switch {
	case h.typ < typeHeader || h.typ > typeMeta:
		return h, errRecordType
	case b[5]|b[6]|b[7] != 0:
		return h, errReserved
	case int64(h.length) > int64(maxRecord):
		return h, errTooLong
	}
	return h, nil
}

// checksumStart is the CRC of everything a frame's checksum covers except
// the payload: the generation first, so frames of another generation fail.
func checksumStart(gen uint64, hdr []byte) uint32 {
	var g [8]byte
	binary.LittleEndian.PutUint64(g[:], gen)
	c := crc32.Update(0, castagnoli, g[:])
	c = crc32.Update(c, castagnoli, hdr[0:8])
	return crc32.Update(c, castagnoli, hdr[12:16])
}

// appendFrame appends one frame to dst. posInWrite is the distance in bytes
// from the start of the write that will carry dst's frames.
func appendFrame(dst []byte, t recordType, payload []byte, gen uint64, posInWrite int64) []byte {
	start := len(dst)
	total := int(frameSize(len(payload)))
	dst = slices.Grow(dst, total)[:start+total]
	f := dst[start:]
	binary.LittleEndian.PutUint32(f[0:4], uint32(len(payload)))
	f[4] = byte(t)
	f[5], f[6], f[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(f[12:16], uint32(posInWrite/frameAlign))
	n := copy(f[frameHeaderSize:], payload)
	clear(f[frameHeaderSize+n:])
	crc := crc32.Update(checksumStart(gen, f), castagnoli, payload)
	binary.LittleEndian.PutUint32(f[8:12], crc)
	return dst
}

// window reads a file through one reusable buffer, so checking a journal
// costs one buffer of memory whatever the record sizes.
type window struct {
	r    io.ReaderAt
	size int64 // file size; nothing at or past it is read
	buf  []byte
	off  int64 // file offset of buf[0]
	n    int   // valid bytes in buf
}

func newWindow(r io.ReaderAt, size int64, bufSize int) *window {
	return &window{r: r, size: size, buf: make([]byte, bufSize)}
}

// at returns n bytes (n <= len(w.buf)) at off. The slice is valid until the
// next call. Bytes past the file's end are errShortFrame: a cut, not a
// failed read.
func (w *window) at(off int64, n int) ([]byte, error) {
	if off < 0 || off+int64(n) > w.size {
		return nil, errShortFrame
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

// readFrame checks the frame at off against gen: header fields, that it fits
// in the file, checksum and padding. The payload is streamed through the
// window, never held whole.
func readFrame(w *window, off int64, gen uint64, maxRecord int) (frameHeader, error) {
	b, err := w.at(off, frameHeaderSize)
	if err != nil {
		return frameHeader{}, err
	}
	h, err := parseFrameHeader(b, maxRecord)
	if err != nil {
		return h, err
	}
	if off+h.size() > w.size {
		return h, errShortFrame
	}
	crc := checksumStart(gen, b)
	p, end := off+frameHeaderSize, off+frameHeaderSize+int64(h.length)
	for p < end {
		n := min(end-p, int64(len(w.buf)))
		chunk, err := w.at(p, int(n))
		if err != nil {
			return h, err
		}
		crc = crc32.Update(crc, castagnoli, chunk)
		p += n
	}
	if crc != h.crc {
		return h, errChecksum
	}
	if pad := off + h.size() - end; pad > 0 {
		chunk, err := w.at(end, int(pad))
		if err != nil {
			return h, err
		}
		for _, c := range chunk {
			if c != 0 {
				return h, errPadding
			}
		}
	}
	return h, nil
}

// headerJSON is version 1 of the Header record's payload. Field order is
// part of the golden files: append new fields at the end.
type headerJSON struct {
	Version    int    `json:"v"`
	Generation uint64 `json:"generation"`
	ProjectKey string `json:"project_key"`
	SessionID  string `json:"session_id"`
	Subpath    string `json:"subpath"`
	BaseSize   int64  `json:"base_size"`
	BaseTail   uint32 `json:"base_tail"`
}

func encodeHeader(h Header) ([]byte, error) {
	for _, s := range []string{h.ProjectKey, h.SessionID, h.Subpath} {
		// JSON would silently replace invalid UTF-8, and the header must
		// read back exactly as given.
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("journal header field %q is not valid UTF-8: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	if h.BaseSize < 0 {
		return nil, fmt.Errorf("journal header base size %d is negative: %w", h.BaseSize, errdefs.ErrInvalidArgument)
	}
	b, err := json.Marshal(headerJSON{
		Version:    headerVersion,
		Generation: h.Generation,
		ProjectKey: h.ProjectKey,
		SessionID:  h.SessionID,
		Subpath:    h.Subpath,
		BaseSize:   h.BaseSize,
		BaseTail:   h.BaseTail,
	})
	if err != nil {
		return nil, fmt.Errorf("encode journal header: %w", err)
	}
	if len(b) > maxHeaderPayload {
		return nil, fmt.Errorf("journal header encodes to %d bytes, over the %d-byte limit (project key or subpath too long?): %w",
			len(b), maxHeaderPayload, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

// unsupportedVersionError is a Header record this code cannot read but
// that is not damaged either (a newer sessiond wrote it): it must stay in
// place for that version.
type unsupportedVersionError struct{ version int }

func (e unsupportedVersionError) Error() string {
	return fmt.Sprintf("journal format version %d is newer than this sessiond understands (%d); upgrade sessiond", e.version, headerVersion)
}

func decodeHeader(b []byte) (Header, error) {
	var hj headerJSON
	if err := json.Unmarshal(b, &hj); err != nil {
		return Header{}, frameError("header payload is not valid JSON: " + err.Error())
	}
	if hj.Version > headerVersion {
		return Header{}, unsupportedVersionError{hj.Version}
	}
	if hj.Version != headerVersion {
		return Header{}, frameError(fmt.Sprintf("header payload has version %d", hj.Version))
	}
	if hj.Generation == 0 {
		return Header{}, frameError("header has generation 0")
	}
	if hj.BaseSize < 0 {
		return Header{}, frameError("header has a negative base size")
	}
	return Header{
		Generation: hj.Generation,
		ProjectKey: hj.ProjectKey,
		SessionID:  hj.SessionID,
		Subpath:    hj.Subpath,
		BaseSize:   hj.BaseSize,
		BaseTail:   hj.BaseTail,
	}, nil
}

func encodeCommit(seq uint64, count int) (b [commitPayloadSize]byte) {
	binary.LittleEndian.PutUint64(b[0:8], seq)
	binary.LittleEndian.PutUint32(b[8:12], uint32(count))
	return b
}

func decodeCommit(b []byte) (seq uint64, count int) {
	return binary.LittleEndian.Uint64(b[0:8]), int(binary.LittleEndian.Uint32(b[8:12]))
}

func encodeMarker(m Marker) (b [markerPayloadSize]byte) {
	binary.LittleEndian.PutUint64(b[0:8], uint64(m.Size))
	binary.LittleEndian.PutUint32(b[8:12], m.Tail)
	return b
}

func decodeMarker(b []byte) Marker {
	return Marker{Size: int64(binary.LittleEndian.Uint64(b[0:8])), Tail: binary.LittleEndian.Uint32(b[8:12])}
}
