package rawjson

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// JavaScript's view of strings: how JSON.stringify writes one, how Node.js
// decodes bytes that are not UTF-8, and the trim and length of a string.

// isJSSpace reports whether r is whitespace for JavaScript's trim() and \s:
// WhiteSpace and LineTerminator. Unlike unicode.IsSpace it includes U+FEFF
// and excludes U+0085.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// JSTrim is String.prototype.trim.
func JSTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// AppendJSMember appends ,"key":<s encoded by AppendJSString>: a member
// after the first of an object being written. key is written as is.
func AppendJSMember(b []byte, key, s string) []byte {
	b = append(append(append(b, `,"`...), key...), `":`...)
	return AppendJSString(b, s)
}

// AppendJSString appends s as JSON.stringify encodes a string: '"' and '\\'
// escaped, \b \f \n \r \t by name, other control characters as \u00xx
// (lowercase hex), everything else as is (U+2028, U+2029, '<', '>', '&' and
// DEL included). Invalid UTF-8, which a JavaScript string cannot hold,
// becomes U+FFFD as a UTF-8 decoder makes it.
func AppendJSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, "\uFFFD"...)
				i += nodeInvalidLen(s[i:])
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// nodeInvalidLen returns how many bytes at the start of s (which does not
// start with valid UTF-8) a WHATWG UTF-8 decoder, as in Node.js's
// Buffer.toString, replaces with one U+FFFD: the maximal prefix of a valid
// sequence, or one byte.
func nodeInvalidLen(s string) int {
	c := s[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c >= 0xE0 && c <= 0xEF:
		n = 3
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		n = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	i := 1
	for i < n && i < len(s) && s[i] >= lo && s[i] <= hi {
		lo, hi = 0x80, 0xBF
		i++
	}
	return i
}

// NodeUTF8 returns data decoded as Node.js decodes a Buffer: every
// ill-formed subsequence replaced by U+FFFD. Valid data is returned as is.
func NodeUTF8(data []byte) []byte {
	if utf8.Valid(data) {
		return data
	}
	out := make([]byte, 0, len(data)+16)
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			out = append(out, data[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, "\uFFFD"...)
			i += nodeInvalidLen(string(data[i:min(len(data), i+4)]))
			continue
		}
		out = append(out, data[i:i+size]...)
		i += size
	}
	return out
}

// JSLength is the length of s in UTF-16 code units, JavaScript's
// String.prototype.length.
func JSLength(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
