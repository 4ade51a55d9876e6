package transcript

import (
	"bytes"
	"unicode/utf8"
)

// This file holds the JSON machinery check and repair need beyond scan.go:
// a grammar scanner that says *where* and *how* a text stops being JSON (a
// record cut short ends in the middle of a value; garbage fails earlier),
// iteration over the members of a stored object without decoding it, and
// surgical edits that change one value or drop array elements while every
// other byte of the line stays as the agent wrote it. Lines are never
// decoded into maps and re-encoded: Go would sort the keys, and readers
// depend on key order (see doc.go).

// syntaxError says where a JSON text stops being valid.
type syntaxError struct {
	off int  // byte offset of the problem
	eof bool // the data ended where more was expected: a prefix of valid JSON, as a cut record is
}

// parseValue checks the grammar of the JSON value that starts at data[i]
// (which is not whitespace) and returns the offset just after it.
//
// It is deliberately lenient about what repair can fix in place, so that
// damage of that sort does not hide the structure: bytes >= 0x80 are not
// checked for UTF-8 validity, \uXXXX escapes may name lone surrogates, and,
// when allowCtrl is set, raw control bytes inside strings are accepted and
// reported in ctrl. Nesting is limited to maxDepth, as in Normalize.
// Nesting is tracked with an explicit stack: lines can be tens of MiB.
func parseValue(data []byte, i int, allowCtrl bool) (end int, ctrl bool, err *syntaxError) {
	var stackBuf [32]byte
	stack := stackBuf[:0]
	eof := func() (int, bool, *syntaxError) { return 0, ctrl, &syntaxError{off: len(data), eof: true} }
	bad := func(off int) (int, bool, *syntaxError) { return 0, ctrl, &syntaxError{off: off} }
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
			if len(stack) >= maxDepth {
				return bad(i)
			}
			i = skipWS(data, i+1)
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
			i = skipWS(data, i)
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
			i = skipWS(data, i+1)
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
func scanKey(data []byte, i int, allowCtrl bool, ctrl *bool) (int, *syntaxError) {
	if i >= len(data) {
		return 0, &syntaxError{off: i, eof: true}
	}
	if data[i] != '"' {
		return 0, &syntaxError{off: i}
	}
	i, sawCtrl, err := scanString(data, i, allowCtrl)
	*ctrl = *ctrl || sawCtrl
	if err != nil {
		return 0, err
	}
	i = skipWS(data, i)
	if i >= len(data) {
		return 0, &syntaxError{off: i, eof: true}
	}
	if data[i] != ':' {
		return 0, &syntaxError{off: i}
	}
	return skipWS(data, i+1), nil
}

// scanString scans the string that starts at data[i] ('"') and returns the
// offset after its closing quote.
func scanString(data []byte, i int, allowCtrl bool) (end int, ctrl bool, err *syntaxError) {
	j := i + 1
	for {
		j = skipPlain(data, j)
		if j >= len(data) {
			return 0, ctrl, &syntaxError{off: len(data), eof: true}
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, ctrl, nil
		case c == '\\':
			if j+1 >= len(data) {
				return 0, ctrl, &syntaxError{off: len(data), eof: true}
			}
			switch data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for k := j + 2; k < j+6; k++ {
					if k >= len(data) {
						return 0, ctrl, &syntaxError{off: len(data), eof: true}
					}
					if !isHex(data[k]) {
						return 0, ctrl, &syntaxError{off: j}
					}
				}
				j += 6
			default:
				return 0, ctrl, &syntaxError{off: j}
			}
		case c < 0x20:
			if !allowCtrl {
				return 0, ctrl, &syntaxError{off: j}
			}
			ctrl = true
			j++
		default: // >= 0x80: checked separately, so that it can be repaired
			j++
		}
	}
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at data[i].
func scanNumber(data []byte, i int) (int, *syntaxError) {
	need := func(i int) *syntaxError { // a digit must be at data[i]
		if i >= len(data) {
			return &syntaxError{off: i, eof: true}
		}
		if !isDigit(data[i]) {
			return &syntaxError{off: i}
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

func skipWS(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// trimWS returns the bounds of data without leading and trailing JSON
// whitespace.
func trimWS(data []byte) (start, end int) {
	start, end = skipWS(data, 0), len(data)
	for end > start && isSpace(data[end-1]) {
		end--
	}
	return start, end
}

// byteSpan is a half-open byte range [start, end) of a line.
type byteSpan struct{ start, end int }

// objMember is one member of a JSON object: key spans the key with its
// quotes, val spans the value.
type objMember struct{ key, val byteSpan }

// eachMember calls fn with every member of the object that starts at
// obj[i], which must be valid JSON (as parseValue with allowCtrl accepts),
// in order, until fn returns false.
func eachMember(obj []byte, i int, fn func(m objMember) bool) {
	i = skipWS(obj, i+1) // past '{'
	for i < len(obj) && obj[i] == '"' {
		var m objMember
		m.key.start = i
		i, _, _ = scanString(obj, i, true)
		m.key.end = i
		i = skipWS(obj, i)
		i = skipWS(obj, i+1) // past ':'
		m.val.start = i
		i, _, _ = parseValue(obj, i, true)
		m.val.end = i
		if !fn(m) {
			return
		}
		i = skipWS(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
}

// eachElement calls fn with the span of every element of the array that
// starts at data[i], which must be valid JSON, until fn returns false.
func eachElement(data []byte, i int, fn func(index int, s byteSpan) bool) {
	i = skipWS(data, i+1) // past '['
	for n := 0; i < len(data) && data[i] != ']'; n++ {
		end, _, _ := parseValue(data, i, true)
		if !fn(n, byteSpan{i, end}) {
			return
		}
		i = skipWS(data, end)
		if i < len(data) && data[i] == ',' {
			i = skipWS(data, i+1)
		}
	}
}

// keyIs reports whether the key (quotes included) spanned by k in data is
// name.
func keyIs(data []byte, k byteSpan, name string) bool {
	raw := data[k.start+1 : k.end-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	return unquote(raw) == name
}

// lastMember returns the last member of the object at obj[i] named name:
// like JSON.parse, readers take the last of repeated keys.
func lastMember(obj []byte, i int, name string) (m objMember, ok bool) {
	eachMember(obj, i, func(x objMember) bool {
		if keyIs(obj, x.key, name) {
			m, ok = x, true
		}
		return true
	})
	return m, ok
}

// stringAt decodes the JSON string value spanned by s; ok is false when the
// value is not a string.
func stringAt(data []byte, s byteSpan) (string, bool) {
	if s.end-s.start < 2 || data[s.start] != '"' {
		return "", false
	}
	raw := data[s.start+1 : s.end-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), true
	}
	return unquote(raw), true
}

// replaceSpan returns a new line: data with the bytes spanned by s replaced
// by repl.
func replaceSpan(data []byte, s byteSpan, repl []byte) []byte {
	out := make([]byte, 0, len(data)-(s.end-s.start)+len(repl))
	out = append(out, data[:s.start]...)
	out = append(out, repl...)
	return append(out, data[s.end:]...)
}

// removeElements returns a new line: data without the elements of one
// array whose spans are elems and for which drop is true. Separators go with
// the removed elements, so the rest of the array, its whitespace included,
// stays byte for byte: an element is cut up to the start of the next one,
// and a run of removed elements that ends the array is cut from the end of
// the element before it.
func removeElements(data []byte, elems []byteSpan, drop []bool) []byte {
	var cuts []byteSpan
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
			cuts = append(cuts, byteSpan{elems[a].start, elems[b+1].start})
		case a > 0:
			cuts = append(cuts, byteSpan{elems[a-1].end, elems[b].end})
		default:
			cuts = append(cuts, byteSpan{elems[a].start, elems[b].end})
		}
		a = b
	}
	out := make([]byte, 0, len(data))
	prev := 0
	for _, c := range cuts {
		out = append(out, data[prev:c.start]...)
		prev = c.end
	}
	return append(out, data[prev:]...)
}

// appendString appends s as a JSON string the way JSON.stringify writes
// it: only '"', '\\' and control characters are escaped, so what sessiond
// writes looks like what the agent writes.
func appendString(b []byte, s string) []byte {
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
