package mirror

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"fmt"
	"hash"
	"unicode/utf8"
)

// isObject reports whether line is a JSON object, which is what becomes a
// row: the reference adapter's entries are objects, and jsonb takes no
// other text, so any other line (a torn tail, another program's garbage)
// is counted by the cursor but has no row.
func isObject(line []byte) bool {
	t := bytes.TrimLeft(line, " \t\r")
	return len(t) > 0 && t[0] == '{' && utf8.Valid(line) && json.Valid(line)
}

var uEscape = []byte(`\u`)

// forJSONB returns a JSON text as PostgreSQL's jsonb takes it. jsonb
// refuses (and with it the whole statement) a \u0000 escape, and a
// UTF-16 surrogate escape that is not half of a pair: JSON allows both,
// and a JavaScript string cut in the middle of an emoji is written with a
// lone surrogate. Each becomes \ufffd; the exact line (sessiond_lines)
// keeps the original. j itself is returned when nothing changes.
func forJSONB(j []byte) []byte {
	if !bytes.Contains(j, uEscape) {
		return j
	}
	var out []byte // made at the first replacement
	done := 0
	for i := 0; i+1 < len(j); i++ {
		if j[i] != '\\' {
			continue
		}
		c, ok := escapedUnit(j, i)
		if !ok {
			// Any other escape goes through whole, so an escaped
			// backslash before "u0000" is not taken for the start of one.
			i++
			continue
		}
		n, bad := 6, false
		switch {
		case c == 0, c >= 0xDC00 && c <= 0xDFFF:
			bad = true
		case c >= 0xD800 && c <= 0xDBFF:
			if lo, ok := escapedUnit(j, i+6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				n = 12
			} else {
				bad = true
			}
		}
		if bad {
			out = append(append(out, j[done:i]...), `\ufffd`...)
			done = i + 6
		}
		i += n - 1
	}
	if out == nil {
		return j
	}
	return append(out, j[done:]...)
}

// escapedUnit decodes the \uXXXX escape at j[i:], if there is one.
func escapedUnit(j []byte, i int) (uint16, bool) {
	if i+6 > len(j) || j[i] != '\\' || j[i+1] != 'u' {
		return 0, false
	}
	var c uint16
	for _, h := range j[i+2 : i+6] {
		switch {
		case h >= '0' && h <= '9':
			c = c<<4 | uint16(h-'0')
		case h >= 'a' && h <= 'f':
			c = c<<4 | uint16(h-'a'+10)
		case h >= 'A' && h <= 'F':
			c = c<<4 | uint16(h-'A'+10)
		default:
			return 0, false
		}
	}
	return c, true
}

// chain is the SHA-256 of a transcript's bytes (each line with its
// newline) from its first line on; its state is kept with the cursor so
// that the mirror goes on from there.
type chain struct{ h hash.Hash }

func newChain() chain { return chain{sha256.New()} }

// resume goes on from a state saved by state.
func resume(state []byte) (chain, error) {
	c := newChain()
	if err := c.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return chain{}, fmt.Errorf("resume the transcript's digest: %w", err)
	}
	return c, nil
}

var newline = []byte{'\n'}

func (c chain) add(line []byte) {
	c.h.Write(line)
	c.h.Write(newline)
}

func (c chain) digest() []byte { return c.h.Sum(nil) }

func (c chain) state() []byte {
	b, err := c.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(err) // sha256's state always marshals
	}
	return b
}
