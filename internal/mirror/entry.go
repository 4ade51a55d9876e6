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

// entryText is the text stored as line's jsonb entry, and false when the
// line is not a JSON object: the reference adapter's entries are objects,
// and jsonb takes nothing else, so such a line (a torn tail, another
// program's garbage) is counted by the cursor but has no row.
func entryText(line []byte) (string, bool) {
	t := bytes.TrimLeft(line, " \t\r")
	if len(t) == 0 || t[0] != '{' || !utf8.Valid(line) || !json.Valid(line) {
		return "", false
	}
	return string(noNul(line)), true
}

var nulEscape = []byte(`\u0000`)

// noNul replaces every \u0000 escape in a JSON text with \ufffd:
// PostgreSQL's jsonb cannot hold U+0000 and refuses the whole statement.
// The exact line (sessiond_lines) keeps it.
func noNul(j []byte) []byte {
	if !bytes.Contains(j, nulEscape) {
		return j
	}
	out := make([]byte, 0, len(j))
	for i := 0; i < len(j); i++ {
		if j[i] != '\\' || i+1 >= len(j) {
			out = append(out, j[i])
			continue
		}
		if j[i+1] == 'u' && bytes.HasPrefix(j[i:], nulEscape) {
			out = append(out, `\ufffd`...)
			i += len(nulEscape) - 1
			continue
		}
		// Any other escape goes through whole, so an escaped backslash
		// before "u0000" is not taken for the start of one.
		out = append(out, j[i], j[i+1])
		i++
	}
	return out
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
