package rawjson

import (
	"bytes"
	"unicode/utf8"
)

// This file holds the JSON machinery the damage checks and repairs need
// beyond scan.go:
// a grammar scanner that says *where* and *how* a text stops being JSON (a
// record cut short ends in the middle of a value; garbage fails earlier),
// iteration over the members of a stored object without decoding it, and
// surgical edits that change one value or drop array elements while every
// other byte of the line stays as the agent wrote it. Lines are never
// decoded into maps and re-encoded: Go would sort the keys, and readers
// depend on key order (see the package doc).

// SyntaxError says where a JSON text stops being valid.
type SyntaxError struct {
	Off int  // byte offset of the problem
	EOF bool // the data ended where more was expected: a prefix of valid JSON, as a cut record is
}

// ParseValue checks the grammar of the JSON value that starts at data[i]
// (which is not whitespace) and returns the offset just after it.
//
// It is deliberately lenient about what repair can fix in place, so that
// damage of that sort does not hide the structure: bytes >= 0x80 are not
// checked for UTF-8 validity, \uXXXX escapes may name lone surrogates, and,
// when allowCtrl is set, raw control bytes inside strings are accepted and
// reported in ctrl. Nesting is limited to MaxDepth, as in Normalize.
// Nesting is tracked with an explicit stack: lines can be tens of MiB.
func ParseValue(data []byte, i int, allowCtrl bool) (end int, ctrl bool, err *SyntaxError) {
	var stackBuf [32]byte
	stack := stackBuf[:0]
	eof := func() (int, bool, *SyntaxError) { return 0, ctrl, &SyntaxError{Off: len(data), EOF: true} }
	bad := func(off int) (int, bool, *SyntaxError) { return 0, ctrl, &SyntaxError{Off: off} }
	for {
		// A value starts at data[i].
		if i >= len(data) {
			return eof()
		}
		switch c := data[i]; c {
		case '"':
			var sawCtrl bool
			i, sawCtrl, err = scanString(data, i, allowCtrl)
			ctrl = ctrl || sawCtrl
			if err != nil {
				return 0, ctrl, err
			}
		case '{', '[':
			if len(stack) >= MaxDepth {
				return bad(i)
			}
			i = SkipWS(data, i+1)
			if i >= len(data) {
				return eof()
			}
			if data[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
				i++
				break
			}
			stack = append(stack, c+2)
			if c == '{' {
				if i, err = scanKey(data, i, allowCtrl, &ctrl); err != nil {
					return 0, ctrl, err
				}
			}
			continue
		case 't', 'f', 'n':
			lit := "null"
			if c == 't' {
				lit = "true"
			} else if c == 'f' {
				lit = "false"
			}
			for j := 0; j < len(lit); j++ {
				if i+j >= len(data) {
					return eof()
				}
				if data[i+j] != lit[j] {
					return bad(i + j)
				}
			}
			i += len(lit)
		default:
			if c != '-' && !isDigit(c) {
				return bad(i)
			}
			if i, err = scanNumber(data, i); err != nil {
				return 0, ctrl, err
			}
		}
		// A value is complete: close what it completes.
		for {
			if len(stack) == 0 {
				return i, ctrl, nil
			}
			i = SkipWS(data, i)
			if i >= len(data) {
				return eof()
			}
			closer := stack[len(stack)-1]
			if data[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return bad(i)
			}
			i = SkipWS(data, i+1)
			if closer == '}' {
				if i, err = scanKey(data, i, allowCtrl, &ctrl); err != nil {
					return 0, ctrl, err
				}
			}
			break
		}
	}
}

// scanKey scans an object key, the colon and the whitespace after it.
func scanKey(data []byte, i int, allowCtrl bool, ctrl *bool) (int, *SyntaxError) {
	if i >= len(data) {
		return 0, &SyntaxError{Off: i, EOF: true}
	}
	if data[i] != '"' {
		return 0, &SyntaxError{Off: i}
	}
	i, sawCtrl, err := scanString(data, i, allowCtrl)
	*ctrl = *ctrl || sawCtrl
	if err != nil {
		return 0, err
	}
	i = SkipWS(data, i)
	if i >= len(data) {
		return 0, &SyntaxError{Off: i, EOF: true}
	}
	if data[i] != ':' {
		return 0, &SyntaxError{Off: i}
	}
	return SkipWS(data, i+1), nil
}

// scanString scans the string that starts at data[i] ('"') and returns the
// offset after its closing quote.
func scanString(data []byte, i int, allowCtrl bool) (end int, ctrl bool, err *SyntaxError) {
	j := i + 1
	for {
		j = SkipPlain(data, j)
		if j >= len(data) {
			return 0, ctrl, &SyntaxError{Off: len(data), EOF: true}
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, ctrl, nil
		case c == '\\':
			if j+1 >= len(data) {
				return 0, ctrl, &SyntaxError{Off: len(data), EOF: true}
			}
			switch data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for k := j + 2; k < j+6; k++ {
					if k >= len(data) {
						return 0, ctrl, &SyntaxError{Off: len(data), EOF: true}
					}
					if !isHex(data[k]) {
						return 0, ctrl, &SyntaxError{Off: j}
					}
				}
				j += 6
			default:
				return 0, ctrl, &SyntaxError{Off: j}
			}
		case c < 0x20:
			if !allowCtrl {
				return 0, ctrl, &SyntaxError{Off: j}
			}
			ctrl = true
			j++
		default: // >= 0x80: checked separately, so that it can be repaired
			j++
		}
	}
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at data[i].
func scanNumber(data []byte, i int) (int, *SyntaxError) {
	need := func(i int) *SyntaxError { // a digit must be at data[i]
		if i >= len(data) {
			return &SyntaxError{Off: i, EOF: true}
		}
		if !isDigit(data[i]) {
			return &SyntaxError{Off: i}
		}
		return nil
	}
	if data[i] == '-' {
		i++
	}
	if err := need(i); err != nil {
		return 0, err
	}
	if data[i] == '0' {
		i++
	} else {
		i = digits(data, i)
	}
	if i < len(data) && data[i] == '.' {
		if err := need(i + 1); err != nil {
			return 0, err
		}
		i = digits(data, i+1)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if err := need(i); err != nil {
			return 0, err
		}
		i = digits(data, i)
	}
	return i, nil
}

func isHex(c byte) bool {
	return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func SkipWS(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// TrimWS returns the bounds of data without leading and trailing JSON
// whitespace.
func TrimWS(data []byte) (start, end int) {
	start, end = SkipWS(data, 0), len(data)
	for end > start && isSpace(data[end-1]) {
		end--
	}
	return start, end
}

// Span is a half-open byte range [start, end) of a line.
type Span struct{ Start, End int }

// Member is one member of a JSON object: key spans the key with its
// quotes, val spans the value.
type Member struct{ Key, Val Span }

// EachMember calls fn with every member of the object that starts at
// obj[i], which must be valid JSON (as ParseValue with allowCtrl accepts),
// in order, until fn returns false.
func EachMember(obj []byte, i int, fn func(m Member) bool) {
	i = SkipWS(obj, i+1) // past '{'
	for i < len(obj) && obj[i] == '"' {
		var m Member
		m.Key.Start = i
		i, _, _ = scanString(obj, i, true)
		m.Key.End = i
		i = SkipWS(obj, i)
		i = SkipWS(obj, i+1) // past ':'
		m.Val.Start = i
		i, _, _ = ParseValue(obj, i, true)
		m.Val.End = i
		if !fn(m) {
			return
		}
		i = SkipWS(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = SkipWS(obj, i+1)
		}
	}
}

// EachElement calls fn with the span of every element of the array that
// starts at data[i], which must be valid JSON, until fn returns false.
func EachElement(data []byte, i int, fn func(index int, s Span) bool) {
	i = SkipWS(data, i+1) // past '['
	for n := 0; i < len(data) && data[i] != ']'; n++ {
		end, _, _ := ParseValue(data, i, true)
		if !fn(n, Span{i, end}) {
			return
		}
		i = SkipWS(data, end)
		if i < len(data) && data[i] == ',' {
			i = SkipWS(data, i+1)
		}
	}
}

// KeyIs reports whether the key (quotes included) spanned by k in data is
// name.
func KeyIs(data []byte, k Span, name string) bool {
	raw := data[k.Start+1 : k.End-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	return Unquote(raw) == name
}

// LastMember returns the last member of the object at obj[i] named name:
// like JSON.parse, readers take the last of repeated keys.
func LastMember(obj []byte, i int, name string) (m Member, ok bool) {
	EachMember(obj, i, func(x Member) bool {
		if KeyIs(obj, x.Key, name) {
			m, ok = x, true
		}
		return true
	})
	return m, ok
}

// StringAt decodes the JSON string value spanned by s; ok is false when the
// value is not a string.
func StringAt(data []byte, s Span) (string, bool) {
	if s.End-s.Start < 2 || data[s.Start] != '"' {
		return "", false
	}
	raw := data[s.Start+1 : s.End-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), true
	}
	return Unquote(raw), true
}

// ReplaceSpan returns a new line: data with the bytes spanned by s replaced
// by repl.
func ReplaceSpan(data []byte, s Span, repl []byte) []byte {
	out := make([]byte, 0, len(data)-(s.End-s.Start)+len(repl))
	out = append(out, data[:s.Start]...)
	out = append(out, repl...)
	return append(out, data[s.End:]...)
}

// RemoveElements returns a new line: data without the elements of one
// array whose spans are elems and for which drop is true. Separators go with
// the removed elements, so the rest of the array, its whitespace included,
// stays byte for byte: an element is cut up to the start of the next one,
// and a run of removed elements that ends the array is cut from the end of
// the element before it.
func RemoveElements(data []byte, elems []Span, drop []bool) []byte {
	var cuts []Span
	for a := 0; a < len(elems); a++ {
		if !drop[a] {
			continue
		}
		b := a
		for b+1 < len(elems) && drop[b+1] {
			b++
		}
		switch {
		case b+1 < len(elems):
			cuts = append(cuts, Span{elems[a].Start, elems[b+1].Start})
		case a > 0:
			cuts = append(cuts, Span{elems[a-1].End, elems[b].End})
		default:
			cuts = append(cuts, Span{elems[a].Start, elems[b].End})
		}
		a = b
	}
	out := make([]byte, 0, len(data))
	prev := 0
	for _, c := range cuts {
		out = append(out, data[prev:c.Start]...)
		prev = c.End
	}
	return append(out, data[prev:]...)
}

// AppendString appends s as a JSON string the way JSON.stringify writes
// it: only '"', '\\' and control characters are escaped, so what sessiond
// writes looks like what the agent writes.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xF])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

const hexDigit = "0123456789abcdef"
