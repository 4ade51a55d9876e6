package transcript

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
)

// Entry is one validated transcript line.
type Entry struct {
	Line []byte // compacted JSON object, no trailing newline; may be part of the raw input
	UUID string // the top-level "uuid" string field, "" if absent or null
}

// Normalize validates one raw entry sent by an agent and returns it ready to
// store. The entry must be exactly one JSON object, at most maxBytes long
// (maxBytes <= 0 means no limit), in valid UTF-8, with no raw NUL byte,
// objects and arrays nested at most 10000 deep (encoding/json's limit), and
// a top-level "uuid" that, when present, is a string or null. Should "uuid"
// appear more than once, each must be a string or null and the last one is
// the entry's, as readers using JSON.parse see it.
//
// Whitespace between tokens is removed, as json.Compact does; everything
// else, key order and the bytes of every string included, is kept as sent
// (nothing is escaped: <, >, & and U+2028 stay raw). A lone UTF-16
// surrogate escape such as \ud83d is valid JSON text, written by the CLI
// itself, and is kept too: check reports it, repair replaces it. Leading and trailing
// whitespace, a final newline included, is dropped.
//
// Normalize takes raw over: an entry already compact (as agents send them)
// comes back as part of raw, without a copy, so the caller must not change
// raw afterwards.
//
// Errors wrap errdefs.ErrTooLarge or errdefs.ErrInvalidArgument and give the
// byte offset of the problem in raw. The entry is read once: validation,
// compaction and finding the uuid happen in the same pass.
func Normalize(raw []byte, maxBytes int) (Entry, error) {
	if maxBytes > 0 && len(raw) > maxBytes {
		n, limit := size(len(raw)), size(maxBytes)
		if n == limit { // "32.0 MiB, over the 32.0 MiB limit" helps nobody
			n, limit = fmt.Sprintf("%d bytes", len(raw)), fmt.Sprintf("%d-byte", maxBytes)
		}
		return Entry{}, fmt.Errorf("entry is %s, over the %s limit (sessiond --max-entry-bytes): %w",
			n, limit, errdefs.ErrTooLarge)
	}
	line, uuid, err := rawjson.CompactObject(raw, "uuid")
	if err != nil {
		return Entry{}, err
	}
	if uuid.BadOff >= 0 {
		return Entry{}, invalidf(`entry's top-level "uuid" at byte offset %d is %s; it must be a string (or null, or absent)`,
			uuid.BadOff, rawjson.KindName(raw[uuid.BadOff]))
	}
	return Entry{Line: line, UUID: uuid.String}, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// size formats a byte count for people: "512 bytes", "3.5 KiB", "40.0 MiB".
func size(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// CanonicalUUID is id's 16 bytes when id is a UUID in canonical form (the
// form that gives back the same string), so sets and records of entry ids
// may keep 16 bytes instead of 36 and still name the same id.
func CanonicalUUID(id string) (uuid.UUID, bool) {
	if len(id) != 36 {
		return uuid.UUID{}, false
	}
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return uuid.UUID{}, false
	}
	return u, true
}
