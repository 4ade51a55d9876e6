package transcript

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// Entry is one validated transcript line.
type Entry struct {
	Line []byte // compacted JSON object, no trailing newline; never shares memory with the raw input
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
	s := scanner{data: raw, strict: true, findKey: true, key: "uuid", keyASCII: true}
	s.ws()
	start := s.pos
	switch {
	case len(raw) == 0:
		return Entry{}, invalidf("entry is empty; expected one JSON object")
	case start == len(raw):
		return Entry{}, invalidf("entry is only whitespace (%d bytes); expected one JSON object", len(raw))
	case bytes.HasPrefix(raw[start:], BOM):
		return Entry{}, invalidf("entry starts with a UTF-8 byte order mark (bytes EF BB BF at byte offset %d); JSON text must not have one: remove it", start)
	case raw[start] != '{':
		return Entry{}, s.notObject()
	}

	s.compact = true
	s.out = make([]byte, 0, len(raw)-start)
	s.seg = start
	if err := s.value(); err != nil {
		return Entry{}, err
	}
	s.flush()
	s.compact = false
	if err := s.end(start); err != nil {
		return Entry{}, err
	}
	if s.badMember {
		return Entry{}, invalidf(`entry's top-level "uuid" at byte offset %d is %s; it must be a string (or null, or absent)`,
			s.badOff, KindName(raw[s.badOff]))
	}
	e := Entry{Line: s.out}
	if s.found && s.kind == '"' {
		e.UUID = s.memberString()
	}
	return e, nil
}

var BOM = []byte{0xEF, 0xBB, 0xBF}

// end checks that nothing but whitespace follows the value that started at
// start.
func (s *scanner) end(start int) error {
	objEnd := s.pos
	s.ws()
	if s.pos == len(s.data) {
		return nil
	}
	switch c := s.data[s.pos]; {
	case c == 0:
		return s.nulByte(s.pos)
	case c >= utf8.RuneSelf:
		if r, n := utf8.DecodeRune(s.data[s.pos:]); r == utf8.RuneError && n == 1 {
			return s.badUTF8(s.pos)
		}
	}
	return invalidf("entry has more data after its JSON value (which spans bytes %d-%d): found %s at byte offset %d; send exactly one JSON object per entry (two records on one line usually means two writers interleaved)",
		start, objEnd-1, DescribeAt(s.data, s.pos), s.pos)
}

// notObject explains why an entry that does not start with '{' is refused:
// either it is not JSON at all, or it is JSON of another type.
func (s *scanner) notObject() error {
	start := s.pos
	if err := s.value(); err != nil {
		return err
	}
	if err := s.end(start); err != nil {
		return err
	}
	return invalidf("entry is %s, not an object; a transcript entry must be one JSON object ({...})", KindName(s.data[start]))
}

// KindName names the type of the JSON value that starts with c.
func KindName(c byte) string {
	switch c {
	case '{':
		return "a JSON object"
	case '[':
		return "a JSON array"
	case '"':
		return "a JSON string"
	case 't', 'f':
		return "a JSON boolean"
	case 'n':
		return "JSON null"
	}
	return "a JSON number"
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
