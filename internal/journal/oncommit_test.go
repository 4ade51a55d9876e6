package journal

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// commits records what Options.OnCommit is told.
type commits struct {
	mu  sync.Mutex
	got []Commit
}

func (c *commits) add(x Commit) {
	c.mu.Lock()
	c.got = append(c.got, x)
	c.mu.Unlock()
}

func (c *commits) list() []Commit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Commit(nil), c.got...)
}

// OnCommit hears of every write that reached the disk, with the entries it
// carried, its bytes and the time of its sync alone; a write that failed
// is not reported.
func TestOnCommitReportsEachDurableWrite(t *testing.T) {
	const slow = 3 * time.Millisecond
	ffs := fstest.NewFaultFS(fsys.OS)
	// Every sync takes at least slow, so a duration that was not measured
	// around the sync (0) or measured around something else shows.
	ffs.Trace(func(e fstest.Event) {
		if e.Op == fstest.OpSync {
			time.Sleep(slow)
		}
	})
	var rec commits
	l, _ := openLog(t, ffs, t.TempDir(), Options{OnCommit: rec.add})
	defer l.Close()
	a, b := l.Stream(key("a")), l.Stream(key("b"))
	for _, s := range []*Stream{a, b} {
		if err := s.Begin(Fingerprint{}, true); err != nil {
			t.Fatal(err)
		}
	}
	// One request of two batches: one write of 3 entries.
	if _, err := a.Append(batchesOf([]string{"a1", "a2"}, []string{"a3"}), nil); err != nil {
		t.Fatal(err)
	}
	got := rec.list()
	if len(got) != 1 {
		t.Fatalf("after one append, OnCommit was told %d times (%+v); want once, before the append returned", len(got), got)
	}
	if got[0].Entries != 3 || got[0].Bytes < 3*len("a1") || got[0].Sync < slow {
		t.Fatalf("commit %+v; want 3 entries, their bytes and a sync of at least %v", got[0], slow)
	}
	// Two streams in one write: the entries add up.
	if err := group(l, map[*Stream][][][]byte{a: batchesOf([]string{"a4"}), b: batchesOf([]string{"b1", "b2"})}); err != nil {
		t.Fatal(err)
	}
	if got = rec.list(); len(got) != 2 || got[1].Entries != 3 {
		t.Fatalf("after a group commit of 1+2 entries: %+v", got)
	}
	// A compaction's marker is a write without entries.
	if err := a.MarkCompacted(Fingerprint{Size: 1}); err != nil {
		t.Fatal(err)
	}
	if got = rec.list(); len(got) != 3 || got[2].Entries != 0 || got[2].Bytes == 0 {
		t.Fatalf("after a marker: %+v", got)
	}
	// A write whose sync fails is not counted.
	ffs.Inject(fstest.Fault{Op: fstest.OpSync, Err: syscall.EIO})
	if _, err := b.Append(batchesOf([]string{"b3"}), nil); err == nil {
		t.Fatal("append with a failing sync succeeded")
	}
	if got = rec.list(); len(got) != 3 {
		t.Fatalf("a failed write was reported: %+v", got[3:])
	}
}
