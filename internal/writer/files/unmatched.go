package files

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// MaxUnmatched bounds the lines an Unmatched holds: past it, the oldest
// is dropped as the next is noted. The CLI writes lines it never mirrors
// (and some mirrored ones may never come), so a session the CLI writes
// alone would otherwise hold more at every append; a line dropped is one
// that 4,096 newer lines without uuid followed before its mirrored copy
// arrived, and that copy is then stored a second time.
const MaxUnmatched = 4096

// Unmatched counts, by content, the lines without uuid that other
// programs wrote into a transcript and that no mirrored copy has matched
// yet, oldest first (MaxUnmatched). It is what the writer replays from
// the session's ledger as it opens (the writer records there each line
// noted and each taken, in order, so that the same operations give the
// same lines back after a restart). The zero value is empty and ready.
type Unmatched struct {
	// live: each digest's occurrences not matched nor dropped, by the
	// order they were noted in, oldest first. A take and a drop both
	// remove a digest's oldest occurrence, so those left are its newest.
	live map[Digest][]uint64
	// notes: every occurrence noted, oldest first, since the last
	// trim; some are no longer live.
	notes []occurrence
	next  uint64
	n     int
}

type occurrence struct {
	d   Digest
	seq uint64
}

// Digest names a line's JSON value without keeping its bytes: 16 bytes of
// a SHA-256, as the ledger records it.
type Digest [16]byte

// DigestOf is the digest of line's JSON value: the adapters re-encode what
// the CLI wrote, in their language's form of numbers (the CLI writes 5e-7
// and 0.00005, Python 5e-07 and 5e-05, Ruby 5.0e-07) and perhaps another
// key order, so the value is encoded one way first (Go's: keys sorted,
// numbers as float64). A line that is not JSON is taken as it is.
func DigestOf(line []byte) Digest {
	var v any
	if err := json.Unmarshal(line, &v); err == nil {
		if b, err := json.Marshal(v); err == nil {
			line = b
		}
	}
	sum := sha256.Sum256(line)
	return Digest(sum[:16])
}

// Note counts lines another program wrote, one per element, each without
// its newline, and returns the digests it noted, in order: those with a
// uuid are left to the uuid deduplication.
func (u *Unmatched) Note(lines [][]byte) []Digest {
	var out []Digest
	for _, l := range lines {
		if id, ok := rawjson.TopLevelString(l, "uuid"); ok && id != "" {
			continue
		}
		d := DigestOf(l)
		u.Add(d)
		out = append(out, d)
	}
	return out
}

// Add notes one line by its digest, dropping the oldest line held when
// MaxUnmatched are.
func (u *Unmatched) Add(d Digest) {
	if u.live == nil {
		u.live = make(map[Digest][]uint64)
	}
	u.next++
	u.live[d] = append(u.live[d], u.next)
	u.notes = append(u.notes, occurrence{d, u.next})
	u.n++
	for u.n > MaxUnmatched {
		o := u.notes[0]
		u.notes = u.notes[1:]
		if q := u.live[o.d]; len(q) > 0 && q[0] == o.seq {
			u.remove(o.d)
		}
	}
	if len(u.notes) > 2*u.n+64 {
		u.trim()
	}
}

// Count is how many lines with digest d are unmatched.
func (u *Unmatched) Count(d Digest) int { return len(u.live[d]) }

// Len is how many lines are unmatched.
func (u *Unmatched) Len() int { return u.n }

// Remove takes the oldest line with digest d, matched by a mirrored copy,
// and reports whether there was one.
func (u *Unmatched) Remove(d Digest) bool {
	if len(u.live[d]) == 0 {
		return false
	}
	u.remove(d)
	return true
}

// Take matches line, a mirrored entry without uuid, with one of the lines
// counted, and reports whether there was one.
func (u *Unmatched) Take(line []byte) bool { return u.Remove(DigestOf(line)) }

func (u *Unmatched) remove(d Digest) {
	q := u.live[d]
	if len(q) == 1 {
		delete(u.live, d)
	} else {
		u.live[d] = q[1:]
	}
	u.n--
}

// trim forgets the notes of lines no longer live, which takes leave in
// notes: a session whose every line is matched must not grow it.
func (u *Unmatched) trim() {
	alive := make(map[uint64]bool, u.n)
	for _, q := range u.live {
		for _, s := range q {
			alive[s] = true
		}
	}
	kept := make([]occurrence, 0, u.n)
	for _, o := range u.notes {
		if alive[o.seq] {
			kept = append(kept, o)
		}
	}
	u.notes = kept
}
