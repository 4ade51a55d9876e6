// Package index keeps the listing metadata of every main session in memory
// (title, summary, first prompt, counts, damage), so listing thousands of
// sessions reads no transcript. The writers feed it the lines they store;
// files changed behind sessiond's back are noticed by their stat stamp and
// rescanned.
package index

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// Stamp identifies the state of a session's files: when it differs from
// the one recorded, someone else changed them.
type Stamp struct {
	CanonSize, CanonMtime     int64
	JournalSize, JournalMtime int64
}

// Entry is what the index knows of one session.
type Entry struct {
	Key       layout.Key
	Sum       listing.Summary
	Entries   uint64
	Bytes     uint64
	Malformed uint64
	// Pending counts the entries journaled but not yet in the canonical
	// file.
	Pending  uint64
	TornTail bool
	// LastPromptMs is the timestamp of the last real user prompt: an
	// archived session in which someone prompted later is not archived any
	// more (the official rule).
	LastPromptMs int64
	Stamp        Stamp
	ModifiedMs   int64
	// Owned entries are kept current by the session's open writer; their
	// stamp is not checked.
	Owned bool
	// Absent marks an owned entry whose writer has nothing on disk yet (no
	// transcript, nothing journaled: its first append was refused), so
	// that a listing does not show a session no reader can open.
	Absent bool
	// Stores are the session's SessionStore summaries, by folder (the SDK
	// that folded each); nil: none.
	Stores StoreSummaries
}

// StoreSummaries are a session's SessionStore summaries by folder.
type StoreSummaries map[string]StoreSummary

// StoreSummary is a session's SessionStore summary as last stored.
type StoreSummary struct {
	Data    []byte // opaque JSON
	Version uint64 // 0: none
	MtimeMs int64  // when it was stored
	Entries uint64 // the session's line count right after
}

// StoreMtime is the summary's mtime for listSessionSummaries: the
// session's own while no line was added after the summary (then the SDK
// takes it as current), else when it was stored (then the SDK sees it is
// stale and reads the session).
func (e *Entry) StoreMtime(folder string) int64 {
	s := e.Stores[folder]
	if e.Entries == s.Entries && e.ModifiedMs > s.MtimeMs {
		return e.ModifiedMs
	}
	return s.MtimeMs
}

// Damaged reports whether the session has lines the readers will skip.
func (e *Entry) Damaged() bool { return e.Malformed > 0 || e.TornTail }

// AddValid feeds a line already known to be a valid entry (one sessiond
// just validated and stored), skipping the classification.
func (e *Entry) AddValid(line []byte) {
	e.Entries++
	e.Bytes += uint64(len(line)) + 1
	e.TornTail = false
	e.Sum.AddLine(line, true)
	if ts, ok := promptTime(line); ok && ts > e.LastPromptMs {
		e.LastPromptMs = ts
	}
}

// Add feeds one line (without its newline) to the entry.
func (e *Entry) Add(line []byte, hasNewline bool) {
	e.Entries++
	e.Bytes += uint64(len(line))
	if hasNewline {
		e.Bytes++
		e.TornTail = false
	} else {
		e.TornTail = true
	}
	// The summary sees every line: its tail window is counted in bytes.
	e.Sum.AddLine(line, hasNewline)
	if kind, _ := damage.ClassifyLine(line); kind != "" {
		e.Malformed++
		return
	}
	if ts, ok := promptTime(line); ok && ts > e.LastPromptMs {
		e.LastPromptMs = ts
	}
}

// promptTime returns the timestamp of a user line that is a real prompt
// (not a tool result, not meta). line is a valid entry (Normalize's rules):
// it runs for every line appended or replayed, so its top-level members
// are walked once, for "type" and "timestamp" together, the last of a
// repeated key winning as in JSON.parse.
func promptTime(line []byte) (int64, bool) {
	if !bytes.HasPrefix(line, []byte(`{"`)) {
		return 0, false
	}
	var typ, stamp rawjson.Span
	var hasType, hasStamp bool
	rawjson.EachMember(line, 0, func(m rawjson.Member) bool {
		switch {
		case rawjson.KeyIs(line, m.Key, "type"):
			typ, hasType = m.Val, true
		case rawjson.KeyIs(line, m.Key, "timestamp"):
			stamp, hasStamp = m.Val, true
		}
		return true
	})
	if !hasType || !hasStamp {
		return 0, false
	}
	if t, _ := rawjson.StringAt(line, typ); t != "user" || notPrompt(line) {
		return 0, false
	}
	ts, ok := rawjson.StringAt(line, stamp)
	if !ok {
		return 0, false
	}
	return stampMs(ts)
}

// stampMs reads a line's timestamp (RFC 3339) as Unix milliseconds.
func stampMs(ts string) (int64, bool) {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// The texts that make a user line something other than a prompt.
var (
	markToolResult = []byte(`"tool_result"`)
	markMeta       = []byte(`"isMeta":true`)
	markCompact    = []byte(`"isCompactSummary":true`)
)

// notPrompt reports whether line holds one of the marks anywhere. Every
// mark starts with a quote, so one walk from quote to quote finds them all:
// a third of the cost of a search of the whole line per mark, which ran
// for every user line appended.
func notPrompt(line []byte) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(line[i:], '"')
		if j < 0 {
			return false
		}
		i += j
		rest := line[i:]
		if bytes.HasPrefix(rest, markToolResult) || bytes.HasPrefix(rest, markMeta) || bytes.HasPrefix(rest, markCompact) {
			return true
		}
	}
}

// Index is safe for concurrent use.
type Index struct {
	mu      sync.Mutex
	entries map[layout.Key]*Entry
}

// New returns an empty index.
func New() *Index {
	return &Index{entries: make(map[layout.Key]*Entry)}
}

// Put replaces key's entry with a copy of e. An entry computed from the
// files (not owned) never replaces one a live writer owns: the writer has
// seen lines the files may not show yet.
func (ix *Index) Put(e Entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, ok := ix.entries[e.Key]
	switch {
	case ok && old.Owned && !e.Owned:
		// Kept: see above.
	case ok:
		// Over the old copy, which never leaves the lock: a live writer
		// puts its entry after every append.
		*old = e
	default:
		p := new(Entry)
		*p = e
		ix.entries[e.Key] = p
	}
}

// Release stores the final entry of a writer that closes: from now on the
// files are the truth, checked by stamp.
func (ix *Index) Release(e Entry) {
	e.Owned = false
	ix.mu.Lock()
	ix.entries[e.Key] = &e
	ix.mu.Unlock()
}

// Get returns a copy of key's entry.
func (ix *Index) Get(key layout.Key) (Entry, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.entries[key]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Delete forgets key.
func (ix *Index) Delete(key layout.Key) {
	ix.mu.Lock()
	delete(ix.entries, key)
	ix.mu.Unlock()
}

// Update applies fn to key's entry when it exists, under the index's lock;
// it reports whether it did.
func (ix *Index) Update(key layout.Key, fn func(*Entry)) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.entries[key]
	if ok {
		fn(e)
	}
	return ok
}

// Keys lists the indexed keys of one project (or all), sorted.
func (ix *Index) Keys(projectKey string) []layout.Key {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	keys := make([]layout.Key, 0, len(ix.entries))
	for k := range ix.entries {
		if projectKey == "" || k.ProjectKey == projectKey {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Less(keys[j]) })
	return keys
}
