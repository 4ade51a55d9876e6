package rawjson

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deeply objects and arrays may nest, counting the entry
// itself. It is encoding/json's limit, so sessiond accepts exactly the
// nesting Go's own JSON code does and a hostile "[[[[..." entry cannot run
// the scanner out of memory.
const MaxDepth = 10000

// WellFormedObject reports whether line is one well-formed JSON object (what
// JSON.parse accepts as an object), surrounding whitespace allowed. A torn
// line, two records spliced together or a foreign line of text is not:
// readers skip such a line, and it must never be handed to a SessionStore
// as an entry.
func WellFormedObject(line []byte) bool {
	s := scanner{data: line}
	s.ws()
	if s.pos >= len(line) || line[s.pos] != '{' || s.value() != nil {
		return false
	}
	s.ws()
	return s.pos == len(line)
}

// TopLevelString returns the value of the string member key of the JSON
// object line, with its escapes decoded. Only the top level is looked at:
// the same key inside a nested value or inside a string does not count.
// When the key appears more than once the last one wins, as in JavaScript's
// JSON.parse and Python's json module.
//
// ok is false when line is not one well-formed JSON object (a torn line has
// no fields), when the key is absent, or when its value is not a string.
// Well-formed means what encoding/json accepts; the stricter entry rules of
// Normalize (no raw NUL, valid UTF-8, no lone surrogates) are not applied,
// and invalid UTF-8 or lone surrogates in the value decode to U+FFFD as in
// encoding/json.
func TopLevelString(line []byte, key string) (value string, ok bool) {
	s := scanner{data: line, findKey: true, key: key, keyASCII: isASCII(key)}
	s.ws()
	if s.pos >= len(line) || line[s.pos] != '{' {
		return "", false
	}
	if s.value() != nil {
		return "", false
	}
	s.ws()
	if s.pos != len(line) || !s.found || s.kind != '"' {
		return "", false
	}
	return s.memberString(), true
}

// scanner validates one JSON text in a single pass. Besides the grammar it
// can apply the transcript rules (strict), copy the text without
// insignificant whitespace (compact), and remember the value of one
// top-level member (key).
type scanner struct {
	data []byte
	pos  int

	// strict adds the transcript rules to JSON's: no raw NUL byte, valid
	// UTF-8 everywhere. It also makes
	// errors descriptive; a lenient scan only needs to know that it failed.
	strict bool

	// compact collects the text read so far, minus the whitespace between
	// tokens, in out. data[seg:pos] is read but not yet copied.
	compact bool
	out     []byte
	seg     int

	// findKey asks for a report on the top-level member key; keyASCII
	// says whether key is plain ASCII (then raw key bytes can be compared
	// without decoding).
	findKey  bool
	key      string
	keyASCII bool
	pending  bool // the value about to be scanned belongs to key
	// found, kind, valStart, valEnd, valFlags describe the last value of
	// key: kind is its first byte, and for a string valStart:valEnd spans
	// it, quotes included.
	found            bool
	kind             byte
	valStart, valEnd int
	valFlags         uint8
	// badMember says whether some value of key was neither a string nor
	// null, and badOff where the first one starts.
	badMember bool
	badOff    int
}

// String flags returned by str.
const (
	strEscaped  = 1 << iota // has a backslash escape
	strNonASCII             // has a byte >= 0x80
)

// errMalformed is what a lenient scan fails with: callers only test it.
var errMalformed = errors.New("malformed JSON")

// plain[c] is true for the ASCII bytes that need no attention inside a
// string: all but '"', '\\' and control bytes.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// SkipPlain returns the index of the first byte at or after i that is not
// plain, or len(data). Strings are most of an entry's bytes, so it looks at
// eight bytes at a time: a byte needs attention when it is below 0x20, '"' or
// '\\' (found with the classic "has a zero byte" borrow trick on x, x^'"'
// and x^'\\'), or has its high bit set. Borrows only run upwards, so the
// lowest flagged byte is exact.
func SkipPlain(data []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(data); i += 8 {
		x := binary.LittleEndian.Uint64(data[i:])
		m := ((x - 0x20*ones) | ((x ^ '"'*ones) - ones) | ((x ^ '\\'*ones) - ones) | x) & highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(data) && plain[data[i]] {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// ws skips whitespace. It is inlined on the fast path where there is none.
func (s *scanner) ws() {
	if s.pos < len(s.data) && s.data[s.pos] <= ' ' {
		s.skipSpace()
	}
}

func (s *scanner) skipSpace() {
	i := s.pos
	for i < len(s.data) && isSpace(s.data[i]) {
		i++
	}
	if i == s.pos {
		return
	}
	if s.compact {
		if s.out == nil {
			// The first whitespace to drop: only now is a copy needed.
			s.out = make([]byte, 0, len(s.data)-s.seg)
		}
		s.out = append(s.out, s.data[s.seg:s.pos]...)
		s.seg = i
	}
	s.pos = i
}

// flush copies what is read but not yet copied to out.
func (s *scanner) flush() {
	s.out = append(s.out, s.data[s.seg:s.pos]...)
	s.seg = s.pos
}

// value scans one JSON value starting at s.pos, which holds no whitespace,
// and leaves s.pos just after it. Nesting is tracked with an explicit stack
// rather than recursion: entries are up to tens of MiB, and recursion depth
// would then be chosen by whoever sends the entry.
func (s *scanner) value() error {
	var stackBuf [64]byte
	stack := stackBuf[:0] // closing byte of each open container
	data := s.data
values:
	for {
		member := s.pending && len(stack) == 1
		s.pending = false
		if s.pos >= len(data) {
			return s.unexpected(s.pos, "a value")
		}
		c := data[s.pos]
		start := s.pos
		if member {
			// Should the value turn out malformed, the scan fails and
			// this is never looked at.
			s.found, s.kind = true, c
			if c != '"' && c != 'n' && !s.badMember {
				s.badMember, s.badOff = true, start
			}
		}
		switch c {
		case '"':
			flags, err := s.str()
			if err != nil {
				return err
			}
			if member {
				s.valStart, s.valEnd, s.valFlags = start, s.pos, flags
			}
		case '{', '[':
			if len(stack) >= MaxDepth {
				return s.tooDeep(start)
			}
			s.pos++
			s.ws()
			closer := c + 2 // '{'+2 == '}', '['+2 == ']'
			if s.pos < len(data) && data[s.pos] == closer {
				s.pos++
				break
			}
			stack = append(stack, closer)
			if c == '{' {
				if err := s.member(len(stack) == 1); err != nil {
					return err
				}
			}
			continue values
		case 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if err := s.number(); err != nil {
				return err
			}
		default:
			return s.unexpected(start, "a value (object, array, string, number, true, false or null)")
		}

		// A value is complete: close the containers it completes, then
		// go on with the next member or element.
		for len(stack) > 0 {
			s.ws()
			closer := stack[len(stack)-1]
			if s.pos < len(data) {
				switch data[s.pos] {
				case ',':
					s.pos++
					s.ws()
					if closer == '}' {
						if err := s.member(len(stack) == 1); err != nil {
							return err
						}
					}
					continue values
				case closer:
					s.pos++
					stack = stack[:len(stack)-1]
					continue
				}
			}
			if closer == '}' {
				return s.unexpected(s.pos, "',' or '}' after an object member")
			}
			return s.unexpected(s.pos, "',' or ']' after an array element")
		}
		return nil
	}
}

// member scans an object key and its colon. top says whether the object is
// the top-level one, whose keys are compared with s.key.
func (s *scanner) member(top bool) error {
	data := s.data
	if s.pos >= len(data) || data[s.pos] != '"' {
		return s.unexpected(s.pos, `an object key in double quotes (after '{' or ',', and with no trailing comma before '}')`)
	}
	start := s.pos
	flags, err := s.str()
	if err != nil {
		return err
	}
	if top && s.findKey {
		raw := data[start+1 : s.pos-1]
		switch {
		case flags == 0:
			// Nothing to decode; a non-ASCII key cannot match.
			s.pending = s.keyASCII && string(raw) == s.key
		default:
			s.pending = Unquote(raw) == s.key
		}
	}
	s.ws()
	if s.pos >= len(data) || data[s.pos] != ':' {
		return s.unexpected(s.pos, "':' after an object key")
	}
	s.pos++
	s.ws()
	return nil
}

// str scans the string that starts at s.pos and leaves s.pos after its
// closing quote.
func (s *scanner) str() (flags uint8, err error) {
	data := s.data
	i := s.pos + 1
	for {
		i = SkipPlain(data, i)
		if i >= len(data) {
			return 0, s.unterminated(s.pos)
		}
		switch c := data[i]; {
		case c == '"':
			s.pos = i + 1
			return flags, nil
		case c == '\\':
			flags |= strEscaped
			n, err := s.escape(i)
			if err != nil {
				return 0, err
			}
			i += n
		case c < 0x20:
			return 0, s.controlInString(i)
		default: // c >= 0x80
			flags |= strNonASCII
			if !s.strict {
				i++
				continue
			}
			if c < 0xE0 {
				// Two-byte sequences are common in European text;
				// check them without a call.
				if c >= 0xC2 && i+1 < len(data) && data[i+1]&0xC0 == 0x80 {
					i += 2
					continue
				}
				return 0, s.badUTF8(i)
			}
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, s.badUTF8(i)
			}
			i += size
		}
	}
}

// escape checks the escape sequence at data[i] (a backslash) and returns
// its length.
func (s *scanner) escape(i int) (int, error) {
	data := s.data
	if i+1 >= len(data) {
		return 0, s.unterminated(s.pos)
	}
	switch data[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
		if _, ok := Hex4(data, i+2); !ok {
			return 0, s.badUnicodeEscape(i)
		}
		// A lone surrogate escape (\ud83d alone) is valid JSON text and the
		// CLI writes such lines (JSON.stringify of a string cut inside an
		// emoji), so an entry holding one is stored as sent: readers parse
		// it, check reports it and repair replaces it.
		return 6, nil
	}
	return 0, s.badEscape(i)
}

// Hex4 decodes the four hex digits at data[i:].
func Hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	data := s.data
	i := s.pos
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
		if i < len(data) && isDigit(data[i]) {
			return s.numberError(i, "cannot have leading zeros")
		}
	case i < len(data) && isDigit(data[i]):
		i = digits(data, i)
	default:
		return s.unexpected(i, "a digit in the number")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return s.unexpected(i, "a digit after the decimal point")
		}
		i = digits(data, i)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return s.unexpected(i, "a digit in the exponent")
		}
		i = digits(data, i)
	}
	s.pos = i
	return nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

func (s *scanner) literal(lit string) error {
	for j := 0; j < len(lit); j++ {
		if s.pos+j >= len(s.data) || s.data[s.pos+j] != lit[j] {
			return s.unexpected(s.pos+j, "the literal "+lit)
		}
	}
	s.pos += len(lit)
	return nil
}

// memberString decodes the string value recorded for s.key.
func (s *scanner) memberString() string {
	raw := s.data[s.valStart+1 : s.valEnd-1]
	if s.valFlags == 0 || (s.valFlags == strNonASCII && s.strict) {
		// Nothing to decode (a strict scan has checked the UTF-8).
		return string(raw)
	}
	return Unquote(raw)
}

// Unquote decodes the body of a JSON string already known to be well
// formed, exactly as encoding/json does: invalid UTF-8 bytes and lone
// surrogate escapes become U+FFFD.
func Unquote(raw []byte) string {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, _ := Hex4(raw, i+2)
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2, ok = Hex4(raw, i+2)
					}
					if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
						r = d
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
				continue
			default: // '"', '\\', '/'
				b = append(b, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, raw[i:i+size]...)
			}
			i += size
		}
	}
	return string(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// IsStringBody reports whether raw, put between double quotes, is one JSON
// string: its escapes are well formed and it has no raw control character
// or unescaped quote. UTF-8 is not checked.
func IsStringBody(raw []byte) bool {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	s := scanner{data: q}
	_, err := s.str()
	return err == nil && s.pos == len(q)
}
