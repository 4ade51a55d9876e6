package files

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// Unmatched counts, by content, the lines without uuid that other
// programs wrote into a transcript and that no mirrored copy has matched
// yet. The zero value is empty and ready.
type Unmatched struct {
	n map[digest]int
}

// digest names a line's JSON value without keeping its bytes.
type digest [sha256.Size]byte

// digestOf is the digest of line's JSON value: the adapters re-encode what
// the CLI wrote, in their language's form of numbers (the CLI writes 5e-7
// and 0.00005, Python 5e-07 and 5e-05, Ruby 5.0e-07) and perhaps another
// key order, so the value is encoded one way first (Go's: keys sorted,
// numbers as float64). A line that is not JSON is taken as it is.
func digestOf(line []byte) digest {
	var v any
	if err := json.Unmarshal(line, &v); err == nil {
		if b, err := json.Marshal(v); err == nil {
			line = b
		}
	}
	return sha256.Sum256(line)
}

// Note counts lines another program wrote, one per element, each without
// its newline; those with a uuid are left to the uuid deduplication.
func (u *Unmatched) Note(lines [][]byte) {
	for _, l := range lines {
		if id, ok := rawjson.TopLevelString(l, "uuid"); ok && id != "" {
			continue
		}
		if u.n == nil {
			u.n = make(map[digest]int)
		}
		u.n[digestOf(l)]++
	}
}

// Take matches line, a mirrored entry without uuid, with one of the lines
// counted, and reports whether there was one.
func (u *Unmatched) Take(line []byte) bool {
	d := digestOf(line)
	n := u.n[d]
	switch {
	case n == 0:
		return false
	case n == 1:
		delete(u.n, d)
	default:
		u.n[d] = n - 1
	}
	return true
}
