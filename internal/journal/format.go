package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
)

// The frames themselves (layout, checksums, the torn-tail rules) are
// internal/frame's; what follows is what a journal puts in them.

const (
	// Commit: seq uint64 + entry count uint32. Compacted: size int64 + tail uint32.
	commitPayloadSize = 12
	markerPayloadSize = 12

	// DefaultMaxRecord is the payload limit used when Options.MaxRecord is 0.
	DefaultMaxRecord = 64 << 20
	// maxHeaderPayload bounds what Open reads into memory for the Header
	// record; real headers are a few hundred bytes.
	maxHeaderPayload = 64 << 10
	// MaxMeta bounds a batch's Meta record, which recovery holds in memory
	// for every batch it finds.
	MaxMeta = 64 << 10

	headerVersion = 1
)

// Record types of a journal (internal/wal numbers its own differently).
const (
	typeHeader    frame.Type = 1
	typeEntry     frame.Type = 2
	typeCommit    frame.Type = 3
	typeCompacted frame.Type = 4
	typeMeta      frame.Type = 5
)

// rules are what a journal with records of at most maxRecord bytes
// accepts.
func rules(maxRecord int) frame.Rules {
	return frame.Rules{MaxType: typeMeta, MaxRecord: maxRecord}
}

// typeName names a record type in error messages.
func typeName(t frame.Type) string {
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
	if err := frame.CheckJSONStrings("journal header", h.ProjectKey, h.SessionID, h.Subpath); err != nil {
		return nil, err
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
		return Header{}, frame.Error("header payload is not valid JSON: " + err.Error())
	}
	if hj.Version > headerVersion {
		return Header{}, unsupportedVersionError{hj.Version}
	}
	if hj.Version != headerVersion {
		return Header{}, frame.Error(fmt.Sprintf("header payload has version %d", hj.Version))
	}
	if hj.Generation == 0 {
		return Header{}, frame.Error("header has generation 0")
	}
	if hj.BaseSize < 0 {
		return Header{}, frame.Error("header has a negative base size")
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
