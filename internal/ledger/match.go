package ledger

import (
	"bytes"
	"io"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// matcher finds which entries of a ledger a transcript holds, line by line:
// by uuid, or by content digest for entries without one (the n-th line with
// a digest holds the n-th entry with it).
type matcher struct {
	led *Ledger
	// byUUID: uuid -> ledger indexes. A uuid is acknowledged twice when a
	// client sent it again after a rewrite had dropped it: one line holds
	// both.
	byUUID map[string][]int
	byHash map[uint64][]int // digest -> ledger indexes not matched yet
	at     []int            // ledger index -> line that holds it, -1 if none
}

func newMatcher(led *Ledger) *matcher {
	m := &matcher{led: led, byUUID: make(map[string][]int, len(led.IDs)), at: make([]int, len(led.IDs))}
	for i, id := range led.IDs {
		m.at[i] = -1
		if id.uuid != "" {
			m.byUUID[id.uuid] = append(m.byUUID[id.uuid], i)
			continue
		}
		if m.byHash == nil {
			m.byHash = map[uint64][]int{}
		}
		m.byHash[id.hash] = append(m.byHash[id.hash], i)
	}
	return m
}

// line matches line n (0-based) of the transcript.
func (m *matcher) line(n int, line []byte) {
	if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
		for _, i := range m.byUUID[id] {
			if m.at[i] < 0 {
				m.at[i] = n
			}
		}
		return
	}
	if m.byHash == nil {
		return
	}
	h := contentID(line)
	if q := m.byHash[h]; len(q) > 0 {
		m.at[q[0]] = n
		m.byHash[h] = q[1:]
	}
}

// missing lists the ledger's entries no line matched, in acknowledged
// order, a uuid once.
func (m *matcher) missing() []ID {
	var out []ID
	seen := map[string]bool{}
	for i, n := range m.at {
		id := m.led.IDs[i]
		if n >= 0 || id.uuid != "" && seen[id.uuid] {
			continue
		}
		if id.uuid != "" {
			seen[id.uuid] = true
		}
		out = append(out, id)
	}
	return out
}

// lineSplitter feeds a matcher the lines of a stream written through it
// (a tee of what a check reads).
type lineSplitter struct {
	m    *matcher
	n    int
	part []byte
}

func (s *lineSplitter) Write(p []byte) (int, error) {
	k := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.part = append(s.part, p...)
			break
		}
		line := p[:i]
		if len(s.part) > 0 {
			s.part = append(s.part, line...)
			line = s.part
		}
		s.m.line(s.n, line)
		s.n++
		s.part = s.part[:0]
		p = p[i+1:]
	}
	return k, nil
}

// close matches a last line without newline.
func (s *lineSplitter) close() {
	if len(s.part) > 0 {
		s.m.line(s.n, s.part)
		s.n++
		s.part = nil
	}
}

// Check compares what a check of a transcript reads with its ledger, read
// before the transcript: what was compacted since is in the file or still
// pending, and both are read. A nil Check (no ledger, or an empty one)
// compares nothing.
type Check struct {
	s     *Store
	key   layout.Key
	split *lineSplitter
}

// NewCheck starts the comparison of key's transcript with its ledger; nil
// when it has no entries to compare.
func (s *Store) NewCheck(key layout.Key) (*Check, error) {
	led, err := s.Read(key)
	if err != nil || led == nil || len(led.IDs) == 0 {
		return nil, err
	}
	return &Check{s: s, key: key, split: &lineSplitter{m: newMatcher(led)}}, nil
}

// Tee returns r, feeding the comparison what is read through it.
func (c *Check) Tee(r io.Reader) io.Reader {
	if c == nil {
		return r
	}
	return io.TeeReader(r, c.split)
}

// Report ends the comparison once the whole transcript was read through
// Tee: it records what it found (Status, log, note) and puts the finding,
// if any, first in rep, saying which of the entries j still holds.
func (c *Check) Report(rep *damage.Report, j Journal) error {
	if c == nil {
		return nil
	}
	c.split.close()
	missing := c.split.m.missing()
	c.s.setMissing(c.key, c.s.log.With(zapSession(c.key)), missing, "check")
	if len(missing) == 0 {
		return nil
	}
	found, since, err := retained(j, missing, false)
	if err != nil {
		return err
	}
	rep.Problems = append([]damage.Problem{problem(missing, len(found), since)}, rep.Problems...)
	return nil
}
