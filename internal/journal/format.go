package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/layout"
)

const (
	typeHeader    frame.Type = 1
	typeBind      frame.Type = 2
	typeEntry     frame.Type = 3
	typeMeta      frame.Type = 4
	typeCommit    frame.Type = 5
	typeCompacted frame.Type = 6
	typePad       frame.Type = 7
	maxType                  = typePad

	streamSize = 8
	commitSize = streamSize + 8 + 4
	markerSize = streamSize + 8 + 4
	// formatV 2 adds the Pad record; 1 is still read (it has none).
	formatV     = 2
	maxJSONSize = 64 << 10

	// MaxMeta bounds a batch's Meta record, which the journal keeps in memory
	// for every batch of a live stream.
	MaxMeta = 64 << 10
	// DefaultMaxRecord is the entry limit when Options.MaxRecord is 0.
	DefaultMaxRecord = 64 << 20
)

// Fingerprint identifies a canonical file's content (its size and a
// checksum of its tail); opaque to the journal.
type Fingerprint struct {
	Size int64
	Tail uint32
}

type segHeader struct {
	Version int    `json:"v"`
	Seq     uint64 `json:"seq"`
	ID      uint64 `json:"id"`
	PrevEnd int64  `json:"prev_end,omitempty"`
}

type bindRec struct {
	Stream     uint64 `json:"stream"`
	ProjectKey string `json:"project_key"`
	SessionID  string `json:"session_id"`
	Subpath    string `json:"subpath"`
	BaseSize   int64  `json:"base_size"`
	BaseTail   uint32 `json:"base_tail"`
}

func (b bindRec) key() layout.Key {
	return layout.Key{ProjectKey: b.ProjectKey, SessionID: b.SessionID, Subpath: b.Subpath}
}

func encodeBind(b bindRec) ([]byte, error) {
	if err := frame.CheckJSONStrings("log key", b.ProjectKey, b.SessionID, b.Subpath); err != nil {
		return nil, err
	}
	if b.BaseSize < 0 {
		return nil, fmt.Errorf("log bind base size %d is negative: %w", b.BaseSize, errdefs.ErrInvalidArgument)
	}
	p, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode bind record: %w", err)
	}
	if len(p) > maxJSONSize {
		return nil, fmt.Errorf("bind record encodes to %d bytes, over %d (project key or subpath too long?): %w", len(p), maxJSONSize, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

func decodeBind(p []byte) (bindRec, error) {
	var b bindRec
	if err := json.Unmarshal(p, &b); err != nil {
		return b, frame.Error("bind payload is not valid JSON: " + err.Error())
	}
	if b.Stream == 0 || b.BaseSize < 0 {
		return b, frame.Error("bind record has stream 0 or a negative base size")
	}
	return b, nil
}

func decodeHeader(p []byte) (segHeader, error) {
	var h segHeader
	if err := json.Unmarshal(p, &h); err != nil {
		return h, frame.Error("segment header is not valid JSON: " + err.Error())
	}
	if h.Version > formatV {
		return h, unsupportedVersionError{h.Version}
	}
	if h.Version < 1 || h.ID == 0 || h.Seq == 0 || h.PrevEnd < 0 {
		return h, frame.Error(fmt.Sprintf("segment header has version %d, id %d, seq %d, prev_end %d", h.Version, h.ID, h.Seq, h.PrevEnd))
	}
	return h, nil
}

// unsupportedVersionError is a segment a newer sessiond wrote: not damage,
// and not to be touched.
type unsupportedVersionError struct{ version int }

func (e unsupportedVersionError) Error() string {
	return fmt.Sprintf("log format version %d is newer than this sessiond understands (%d); upgrade sessiond", e.version, formatV)
}

// padBlock is the unit the kernel writes a file's cached data in (a page,
// and the block of ext4, XFS and APFS alike). A commit that ends inside a
// block leaves it to the next commit, whose sync writes that block again:
// a commit of one 3 KiB append cost 1.77 blocks of writes to the disk
// here, against 1 when padded (BENCHMARKS.md). So a commit that ends in
// the second half of a block fills it with a Pad record (the half bounds
// the room a commit of a few bytes gives up).
const padBlock = 4096

// padAfter appends to dst the Pad frame that fills the rest of the block
// a write of the segment ends in at end, and returns dst unchanged when
// that rest is more than half a block or too small for a frame.
// posInWrite is the pad's distance from the write's start.
func padAfter(dst []byte, end int64, seed uint64, posInWrite int64) []byte {
	gap := int(-end & (padBlock - 1))
	if gap < frame.HeaderSize || gap > padBlock/2 {
		return dst
	}
	return frame.Append(dst, typePad, zeros[:gap-frame.HeaderSize], seed, posInWrite)
}

var zeros = make([]byte, padBlock/2)

func putStream(b []byte, s uint64) []byte { return binary.LittleEndian.AppendUint64(b, s) }

func streamOf(p []byte) uint64 { return binary.LittleEndian.Uint64(p[:streamSize]) }

func encodeCommit(stream, seq uint64, count int) []byte {
	b := make([]byte, 0, commitSize)
	b = putStream(b, stream)
	b = binary.LittleEndian.AppendUint64(b, seq)
	return binary.LittleEndian.AppendUint32(b, uint32(count))
}

func decodeCommit(p []byte) (stream, seq uint64, count int) {
	return streamOf(p), binary.LittleEndian.Uint64(p[8:16]), int(binary.LittleEndian.Uint32(p[16:20]))
}

func encodeMarker(stream uint64, m Fingerprint) []byte {
	b := make([]byte, 0, markerSize)
	b = putStream(b, stream)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.Size))
	return binary.LittleEndian.AppendUint32(b, m.Tail)
}

func decodeMarker(p []byte) (uint64, Fingerprint) {
	return streamOf(p), Fingerprint{Size: int64(binary.LittleEndian.Uint64(p[8:16])), Tail: binary.LittleEndian.Uint32(p[16:20])}
}
