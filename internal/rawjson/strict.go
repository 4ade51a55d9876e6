package rawjson

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// Strict scans apply the rules sessiond sets for a transcript entry on top
// of JSON's (no raw NUL byte, valid UTF-8 everywhere) and explain a failure
// to whoever sent the entry: what is wrong, at which byte offset, and what
// would be accepted. Their errors wrap errdefs.ErrInvalidArgument.

// KeyValue is what a strict scan saw of one top-level member.
type KeyValue struct {
	// String is the last value of the key, decoded, when it is a string.
	String   string
	IsString bool
	// BadOff is where the first value of the key that is neither a string
	// nor null starts, or -1 when there is none.
	BadOff int
}

// CompactObject checks that raw is exactly one JSON object, surrounding
// whitespace allowed, under the strict rules, and returns it without the
// whitespace between tokens (as json.Compact does; every other byte is
// kept, key order and string bytes included). It also reports the
// top-level member key, whose ASCII name is compared without decoding. The
// output is part of raw when raw holds no whitespace between tokens, a new
// slice otherwise: the caller hands raw over. The text is read once: checking,
// compacting and finding the key happen in the same pass.
func CompactObject(raw []byte, key string) (out []byte, kv KeyValue, err error) {
	s := scanner{data: raw, strict: true, findKey: true, key: key, keyASCII: isASCII(key)}
	s.ws()
	start := s.pos
	switch {
	case len(raw) == 0:
		return nil, kv, invalidf("entry is empty; expected one JSON object")
	case start == len(raw):
		return nil, kv, invalidf("entry is only whitespace (%d bytes); expected one JSON object", len(raw))
	case bytes.HasPrefix(raw[start:], BOM):
		return nil, kv, invalidf("entry starts with a UTF-8 byte order mark (bytes EF BB BF at byte offset %d); JSON text must not have one: remove it", start)
	case raw[start] != '{':
		return nil, kv, s.notObject()
	}

	s.compact = true
	s.seg = start
	if err := s.value(); err != nil {
		return nil, kv, err
	}
	if s.out == nil {
		// No whitespace inside: the object is raw's own bytes (what agents
		// send), returned without a copy; its capacity ends with it, so an
		// append to out never writes into raw.
		s.out = raw[start:s.pos:s.pos]
	} else {
		s.flush()
	}
	s.compact = false
	if err := s.end(start); err != nil {
		return nil, kv, err
	}
	kv.BadOff = -1
	if s.badMember {
		kv.BadOff = s.badOff
	}
	if s.found && s.kind == '"' {
		kv.String, kv.IsString = s.memberString(), true
	}
	return s.out, kv, nil
}

// BOM is the UTF-8 byte order mark, which JSON text must not start with.
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

// Errors. A lenient scan returns errMalformed without building a message;
// a strict one says what is wrong, at which byte offset of the entry, and
// what would be accepted.

// unexpected reports that want was expected at data[off].
func (s *scanner) unexpected(off int, want string) error {
	if !s.strict {
		return errMalformed
	}
	if off >= len(s.data) {
		return invalidf("entry is not valid JSON: it ends at byte offset %d where %s was expected (the entry looks cut short)", off, want)
	}
	switch c := s.data[off]; {
	case c == 0:
		return s.nulByte(off)
	case c >= utf8.RuneSelf:
		if r, size := utf8.DecodeRune(s.data[off:]); r == utf8.RuneError && size == 1 {
			return s.badUTF8(off)
		}
	}
	return invalidf("entry is not valid JSON: at byte offset %d expected %s, found %s", off, want, DescribeAt(s.data, off))
}

func (s *scanner) unterminated(start int) error {
	if !s.strict {
		return errMalformed
	}
	return invalidf("entry is not valid JSON: the string starting at byte offset %d has no closing quote before the entry ends at byte offset %d (the entry looks cut short)", start, len(s.data))
}

func (s *scanner) controlInString(off int) error {
	if !s.strict {
		return errMalformed
	}
	c := s.data[off]
	if c == 0 {
		return s.nulByte(off)
	}
	esc := map[byte]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[c]
	if esc == "" {
		esc = fmt.Sprintf(`\u%04x`, c)
	}
	return invalidf("entry is not valid JSON: raw control character 0x%02x at byte offset %d inside a string; JSON requires it escaped, as %s", c, off, esc)
}

func (s *scanner) badEscape(off int) error {
	if !s.strict {
		return errMalformed
	}
	return invalidf(`entry is not valid JSON: invalid escape %s at byte offset %d; the escapes JSON allows are \" \\ \/ \b \f \n \r \t and \uXXXX (write a literal backslash as \\)`,
		DescribeAt(s.data, off+1), off)
}

func (s *scanner) badUnicodeEscape(off int) error {
	if !s.strict {
		return errMalformed
	}
	if off+6 > len(s.data) {
		return s.unterminated(s.pos)
	}
	end := off + 6
	return invalidf(`entry is not valid JSON: escape %q at byte offset %d is not \u followed by 4 hex digits (write a literal backslash as \\)`, s.data[off:end], off)
}

func (s *scanner) badUTF8(off int) error {
	if !s.strict {
		return errMalformed
	}
	return invalidf("entry has invalid UTF-8 at byte offset %d (byte 0x%02x); transcript lines must be valid UTF-8: convert the text to UTF-8, and encode binary data (e.g. as base64) before putting it in a string", off, s.data[off])
}

func (s *scanner) nulByte(off int) error {
	return invalidf(`entry has a NUL byte (0x00) at byte offset %d; raw NUL bytes are never valid in a transcript line (inside a string, write \u0000)`, off)
}

func (s *scanner) numberError(off int, want string) error {
	if !s.strict {
		return errMalformed
	}
	return invalidf("entry is not valid JSON: bad number at byte offset %d: JSON numbers %s", off, want)
}

func (s *scanner) tooDeep(off int) error {
	if !s.strict {
		return errMalformed
	}
	return invalidf("entry nests objects and arrays more than %d levels deep (at byte offset %d); flatten the data", MaxDepth, off)
}

// DescribeAt names the character at data[off] for an error message.
func DescribeAt(data []byte, off int) string {
	c := data[off]
	switch {
	case c == '\'':
		return `"'"`
	case c > ' ' && c < 0x7f:
		return fmt.Sprintf("'%c'", c)
	case c < utf8.RuneSelf:
		return fmt.Sprintf("byte 0x%02x", c)
	}
	r, size := utf8.DecodeRune(data[off:])
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return fmt.Sprintf("%q (U+%04X)", r, r)
}
