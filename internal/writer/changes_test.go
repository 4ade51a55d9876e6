package writer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/layout"
)

// changeLog collects what Config.Changed is told.
type changeLog struct {
	mu sync.Mutex
	cs []Change
}

func (l *changeLog) add(c Change) {
	l.mu.Lock()
	l.cs = append(l.cs, c)
	l.mu.Unlock()
}

// last waits a little for a change of k that ok accepts (a delete or a
// restore is told after it returns) and returns the last one told.
func (l *changeLog) last(k layout.Key, ok func(Change) bool) Change {
	var c Change
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		l.mu.Lock()
		for i := len(l.cs) - 1; i >= 0; i-- {
			if l.cs[i].Key == k {
				c = l.cs[i]
				break
			}
		}
		l.mu.Unlock()
		if ok(c) {
			break
		}
	}
	return c
}

func readAll(t *testing.T, m *Manager, k layout.Key, from uint64) (lines []string, lineage, total uint64) {
	t.Helper()
	lineage, total, err := m.ReadLines(bg, k, from, 0, func(es []Entry) error {
		for _, e := range es {
			lines = append(lines, string(e.Data))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadLines(%s, %d): %v", k, from, err)
	}
	return lines, lineage, total
}

// readUnder is ReadLines from from under lineage under.
func readUnder(t *testing.T, m *Manager, k layout.Key, from, under uint64) (lines []string) {
	t.Helper()
	if _, _, err := m.ReadLines(bg, k, from, under, func(es []Entry) error {
		for _, e := range es {
			lines = append(lines, string(e.Data))
		}
		return nil
	}); err != nil {
		t.Fatalf("ReadLines(%s, %d, under %d): %v", k, from, under, err)
	}
	return lines
}

// TestChangedAndReadLines: every acknowledged append tells Config.Changed
// how many entries and bytes the transcript holds and how many were
// added, and the lineage ReadLines serves; ReadLines serves from any index
// with a lineage that stays while nothing moved and changes when a writer
// reopens the file, and from the first entry when asked under a lineage
// that is not the content's; with no writer it reads the file (lineage
// 0); a delete and a restore are told too.
func TestChangedAndReadLines(t *testing.T) {
	e := newEnv(t)
	var log changeLog
	e.cfg.Changed = log.add
	m := e.manager()
	k := newKey()
	a, b, c := string(entry("a")), string(entry("b")), string(entry("c"))
	mustAppendTo(t, m, k, a, b)
	ch := log.last(k, func(c Change) bool { return c.Entries == 2 })
	if ch.Entries != 2 || ch.Added != 2 || ch.Bytes != int64(len(a)+len(b)+2) {
		t.Fatalf("after appending 2 entries: %+v", ch)
	}
	mustAppendTo(t, m, k, c)
	if ch := log.last(k, func(c Change) bool { return c.Entries == 3 }); ch.Entries != 3 || ch.Added != 1 {
		t.Fatalf("after a third entry: %+v", ch)
	}
	lines, l1, total := readAll(t, m, k, 1)
	if total != 3 || len(lines) != 2 || lines[0] != b || lines[1] != c || l1 == 0 {
		t.Fatalf("ReadLines from 1: %q, total %d, lineage %d", lines, total, l1)
	}
	if ch := log.last(k, func(Change) bool { return true }); ch.Lineage != l1 {
		t.Fatalf("a Change told lineage %d, ReadLines serves %d", ch.Lineage, l1)
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if _, l2, _ := readAll(t, m, k, 3); l2 != l1 {
		t.Fatalf("lineage moved from %d to %d with nothing rewritten", l1, l2)
	}
	closeManager(t, m)

	// No writer: straight from the file.
	m = e.manager()
	defer closeManager(t, m)
	lines, l3, total := readAll(t, m, k, 0)
	if l3 != 0 || total != 3 || len(lines) != 3 || lines[0] != a {
		t.Fatalf("ReadLines without a writer: %q, total %d, lineage %d", lines, total, l3)
	}
	if got := readUnder(t, m, k, 2, l1); len(got) != 3 {
		t.Fatalf("ReadLines from 2 under lineage %d, without a writer (no lineage vouches): %d lines, want all 3", l1, len(got))
	}
	if m.IsActive(k) {
		t.Fatal("ReadLines of a session without a writer started one")
	}
	mustAppendTo(t, m, k, string(entry("d")))
	if _, l4, total := readAll(t, m, k, 4); l4 == 0 || l4 == l1 || total != 4 {
		t.Fatalf("a reopened writer serves lineage %d (the old one was %d), total %d", l4, l1, total)
	} else if ch := log.last(k, func(c Change) bool { return c.Entries == 4 }); ch.Lineage != l4 {
		t.Fatalf("the reopened writer's Change told lineage %d, ReadLines serves %d", ch.Lineage, l4)
	} else if got := readUnder(t, m, k, 3, l4); len(got) != 1 {
		t.Fatalf("ReadLines from 3 under the current lineage: %d lines, want 1", len(got))
	} else if got := readUnder(t, m, k, 3, l1); len(got) != 4 || got[0] != a {
		t.Fatalf("ReadLines from 3 under the old lineage: %q, want all 4 lines from the first", got)
	}
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	if ch := log.last(k, func(c Change) bool { return c.Gone }); !ch.Gone {
		t.Fatalf("a delete was told as %+v", ch)
	}
	if _, _, err := m.ReadLines(bg, k, 0, 0, func([]Entry) error { return nil }); err == nil {
		t.Fatal("ReadLines of a deleted session succeeded")
	}
	if err := m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	if ch := log.last(k, func(c Change) bool { return c.Family }); !ch.Family {
		t.Fatalf("a restore was told as %+v", ch)
	}
	if _, err := os.Stat(e.lay.TranscriptPath(k)); err != nil {
		t.Fatal(err)
	}
}

// TestChangeToldBeforeAck: an append's Change has been told by the time
// its caller holds the ack, so a watcher's status read after an ack
// counts the entry. A slow Changed (a watcher under load) makes a Change
// told after the ack arrive late every time.
func TestChangeToldBeforeAck(t *testing.T) {
	e := newEnv(t)
	var log changeLog
	e.cfg.Changed = func(c Change) {
		time.Sleep(20 * time.Millisecond)
		log.add(c)
	}
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	for i := range 5 {
		res, err := m.Append(bg, k, [][]byte{entry(fmt.Sprint("e", i))})
		if err != nil {
			t.Fatal(err)
		}
		log.mu.Lock()
		var told uint64
		for _, c := range log.cs {
			if c.Key == k {
				told = c.Entries
			}
		}
		log.mu.Unlock()
		if told != res.Entries || told != uint64(i+1) {
			t.Fatalf("append %d acknowledged with %d entries; Changed had been told %d", i, res.Entries, told)
		}
	}
}

// TestAppendGate: Config.AppendGate sees every append's key before it is
// queued, and its refusal is the append's error, with nothing stored.
func TestAppendGate(t *testing.T) {
	e := newEnv(t)
	refused := errors.New("leased elsewhere")
	var mu sync.Mutex
	var seen []layout.Key
	blocked := newKey()
	e.cfg.AppendGate = func(_ context.Context, k layout.Key) error {
		mu.Lock()
		seen = append(seen, k)
		mu.Unlock()
		if k == blocked {
			return refused
		}
		return nil
	}
	m := e.manager()
	ok := newKey()
	mustAppendTo(t, m, ok, string(entry("a")))
	if _, err := m.Append(bg, blocked, [][]byte{entry("b")}); !errors.Is(err, refused) {
		t.Fatalf("append the gate refuses: %v", err)
	}
	if !absent(m.Exists(blocked)) {
		t.Fatalf("a refused append created the session")
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != ok || seen[1] != blocked {
		t.Fatalf("the gate saw %v", seen)
	}
	mu.Unlock()
	closeManager(t, m)
}

// TestReadLinesSaysWhatAppendValidated: entries served from the journal
// before their compaction are the lines Append validated (Normalized:
// the mirror does not validate them again); lines read from the file,
// which another program may have written, are not.
func TestReadLinesSaysWhatAppendValidated(t *testing.T) {
	e := newEnv(t)
	e.cfg.IdleCompact = time.Hour // the entries stay in the journal until the Flush
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	mustAppendTo(t, m, k, string(entry("a")), string(entry("b")))
	flags := func() []bool {
		var out []bool
		if _, _, err := m.ReadLines(bg, k, 0, 0, func(es []Entry) error {
			for _, e := range es {
				out = append(out, e.Normalized)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := flags(); len(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("entries in the journal: Normalized %v, want both", got)
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, k, string(entry("c")))
	if got := flags(); len(got) != 3 || got[0] || got[1] || !got[2] {
		t.Fatalf("two lines in the file and one in the journal: Normalized %v, want false, false, true", got)
	}
}
