package index

import (
	"slices"
	"sync"
	"testing"

	"github.com/sessiond/sessiond/internal/layout"
)

func key(project, id string) layout.Key { return layout.Key{ProjectKey: project, SessionID: id} }

const (
	prompt    = `{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","message":{"role":"user","content":"hello"}}`
	toolReply = `{"type":"user","timestamp":"2025-01-03T00:00:00.000Z","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}}`
	assistant = `{"type":"assistant","timestamp":"2025-01-04T00:00:00.000Z","message":{"role":"assistant","content":"hi"}}`
)

// promptMs is prompt's timestamp.
const promptMs = 1735787045678

func TestEntryAddCountsLines(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lines     []string
		newline   []bool
		entries   uint64
		bytes     uint64
		malformed uint64
		torn      bool
		promptMs  int64
	}{
		{"prompt", []string{prompt}, []bool{true}, 1, uint64(len(prompt)) + 1, 0, false, promptMs},
		{"a tool result is no prompt", []string{toolReply}, []bool{true}, 1, uint64(len(toolReply)) + 1, 0, false, 0},
		{"nor an assistant line", []string{prompt, assistant}, []bool{true, true}, 2, uint64(len(prompt) + len(assistant) + 2), 0, false, promptMs},
		{"malformed", []string{"{not json"}, []bool{true}, 1, 10, 1, false, 0},
		{"torn tail", []string{prompt, assistant}, []bool{true, false}, 2, uint64(len(prompt) + len(assistant) + 1), 0, true, promptMs},
		{"a whole line after a torn one", []string{assistant, prompt}, []bool{false, true}, 2, uint64(len(prompt) + len(assistant) + 1), 0, false, promptMs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e Entry
			for i, l := range tc.lines {
				e.Add([]byte(l), tc.newline[i])
			}
			if e.Entries != tc.entries || e.Bytes != tc.bytes || e.Malformed != tc.malformed || e.TornTail != tc.torn || e.LastPromptMs != tc.promptMs {
				t.Fatalf("entries %d bytes %d malformed %d torn %v prompt %d; want %d %d %d %v %d",
					e.Entries, e.Bytes, e.Malformed, e.TornTail, e.LastPromptMs, tc.entries, tc.bytes, tc.malformed, tc.torn, tc.promptMs)
			}
			if got, want := e.Damaged(), tc.malformed > 0 || tc.torn; got != want {
				t.Fatalf("Damaged %v, want %v", got, want)
			}
		})
	}
}

// TestEntryAddValidMatchesAdd: a line sessiond validated counts as Add
// counts a valid line with its newline.
func TestEntryAddValidMatchesAdd(t *testing.T) {
	var a, b Entry
	for _, l := range []string{prompt, toolReply, assistant} {
		a.Add([]byte(l), true)
		b.AddValid([]byte(l))
	}
	if a.Entries != b.Entries || a.Bytes != b.Bytes || a.LastPromptMs != b.LastPromptMs || b.Damaged() {
		t.Fatalf("Add: %+v\nAddValid: %+v", a, b)
	}
	// AddValid mends a torn tail: the line it adds ends in a newline.
	b.Add([]byte(assistant), false)
	b.AddValid([]byte(assistant))
	if b.TornTail {
		t.Fatal("a valid line after a torn one left the tail torn")
	}
}

func TestStoreMtime(t *testing.T) {
	e := Entry{Entries: 3, ModifiedMs: 2000, Stores: StoreSummaries{"": {Version: 1, MtimeMs: 1000, Entries: 3}}}
	if got := e.StoreMtime(""); got != 2000 {
		t.Fatalf("no line after the summary: %d, want the session's mtime 2000", got)
	}
	e.Entries = 4
	if got := e.StoreMtime(""); got != 1000 {
		t.Fatalf("a line after the summary: %d, want the summary's own 1000", got)
	}
	e = Entry{Entries: 3, ModifiedMs: 500, Stores: StoreSummaries{"": {Version: 1, MtimeMs: 1000, Entries: 3}}}
	if got := e.StoreMtime(""); got != 1000 {
		t.Fatalf("session older than its summary: %d, want 1000", got)
	}
}

// TestPutKeepsOwned: an entry computed from the files never replaces the
// one a live writer owns; the writer's release hands it back to the files.
func TestPutKeepsOwned(t *testing.T) {
	ix := New()
	k := key("p", "s")
	ix.Put(Entry{Key: k, Entries: 5, Owned: true})
	ix.Put(Entry{Key: k, Entries: 1})
	if e, _ := ix.Get(k); e.Entries != 5 || !e.Owned {
		t.Fatalf("a file's entry replaced the owned one: %+v", e)
	}
	ix.Put(Entry{Key: k, Entries: 6, Owned: true})
	if e, _ := ix.Get(k); e.Entries != 6 {
		t.Fatalf("the owner's own update was refused: %+v", e)
	}
	ix.Release(Entry{Key: k, Entries: 7, Owned: true})
	if e, _ := ix.Get(k); e.Entries != 7 || e.Owned {
		t.Fatalf("after release: %+v, want 7 entries, not owned", e)
	}
	ix.Put(Entry{Key: k, Entries: 8})
	if e, _ := ix.Get(k); e.Entries != 8 {
		t.Fatalf("once released, the files' entry is taken: %+v", e)
	}
}

// TestGetReturnsCopies: what Get returns and what Put took are the
// caller's; Update changes the stored entry.
func TestGetReturnsCopies(t *testing.T) {
	ix := New()
	k := key("p", "s")
	e := Entry{Key: k, Entries: 1}
	ix.Put(e)
	e.Entries = 99
	got, ok := ix.Get(k)
	if !ok || got.Entries != 1 {
		t.Fatalf("Put kept the caller's entry: %+v %v", got, ok)
	}
	got.Entries = 50
	if again, _ := ix.Get(k); again.Entries != 1 {
		t.Fatalf("Get handed out the stored entry: %+v", again)
	}
	if !ix.Update(k, func(e *Entry) { e.Pending = 3 }) {
		t.Fatal("Update of a present key reported none")
	}
	if again, _ := ix.Get(k); again.Pending != 3 {
		t.Fatalf("Update did not stick: %+v", again)
	}
	if ix.Update(key("p", "other"), func(*Entry) { t.Fatal("ran for an absent key") }) {
		t.Fatal("Update of an absent key reported one")
	}
	ix.Delete(k)
	if _, ok := ix.Get(k); ok {
		t.Fatal("Delete left the entry")
	}
}

func TestKeysSortedByProject(t *testing.T) {
	ix := New()
	for _, k := range []layout.Key{key("b", "2"), key("a", "9"), key("b", "1"), key("a", "1")} {
		ix.Put(Entry{Key: k})
	}
	if got, want := ix.Keys(""), []layout.Key{key("a", "1"), key("a", "9"), key("b", "1"), key("b", "2")}; !slices.Equal(got, want) {
		t.Fatalf("Keys(\"\") = %v, want %v", got, want)
	}
	if got, want := ix.Keys("b"), []layout.Key{key("b", "1"), key("b", "2")}; !slices.Equal(got, want) {
		t.Fatalf("Keys(b) = %v, want %v", got, want)
	}
	if got := ix.Keys("c"); len(got) != 0 {
		t.Fatalf("Keys(c) = %v, want none", got)
	}
}

// TestConcurrentUse runs under -race: the writers publish while listings
// read.
func TestConcurrentUse(t *testing.T) {
	ix := New()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := key("p", string(rune('a'+w)))
				ix.Put(Entry{Key: k, Entries: uint64(i), Owned: w%2 == 0})
				ix.Get(k)
				ix.Update(k, func(e *Entry) { e.Pending++ })
				ix.Keys("p")
				if i%50 == 0 {
					ix.Delete(k)
				}
			}
		}()
	}
	wg.Wait()
}

// TestPutOverAnEntryAllocatesNothing: a writer puts its entry after every
// append; replacing a known key's entry copies it over the old one.
func TestPutOverAnEntryAllocatesNothing(t *testing.T) {
	ix := New()
	e := Entry{Key: key("-p", "s"), Owned: true}
	ix.Put(e)
	if n := testing.AllocsPerRun(100, func() { e.Entries++; ix.Put(e) }); n != 0 {
		t.Fatalf("Put over a known key: %v allocations", n)
	}
	if got, _ := ix.Get(e.Key); got.Entries != e.Entries {
		t.Fatalf("entries %d, want %d", got.Entries, e.Entries)
	}
}
