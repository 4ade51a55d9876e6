package space

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// fakeJournal is a Journal whose reserve and retained segments are flags.
type fakeJournal struct {
	mu       sync.Mutex
	low      bool
	retained bool
}

func (j *fakeJournal) LowSpace() bool { j.mu.Lock(); defer j.mu.Unlock(); return j.low }
func (j *fakeJournal) SetLowSpace(on bool) {
	j.mu.Lock()
	j.low = on
	j.mu.Unlock()
}
func (j *fakeJournal) DropRetained() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	had := j.retained
	j.retained = false
	return had
}
func (j *fakeJournal) Behind() map[layout.Key]uint64       { return nil }
func (j *fakeJournal) StillBehind(layout.Key, uint64) bool { return false }

// countingCompactor succeeds once free space is at least need.
type countingCompactor struct {
	d     *Space
	free  *atomic.Int64
	need  int64
	calls atomic.Int64
}

func (c *countingCompactor) Compact(k layout.Key) error {
	c.calls.Add(1)
	if c.free.Load() < c.need {
		return c.d.CompactFailed(k, "/t", c.need, errdefs.FromIO(syscall.ENOSPC))
	}
	c.d.Compacted(k)
	return nil
}

// TestWatcherCompactsOnceThereIsRoom: a compaction that failed for want of
// space is deferred and reported; the watcher does not retry it while the
// folder's free space is short, compacts it once the space is back, and the
// journal's reserve, given back when the disk filled, returns.
func TestWatcherCompactsOnceThereIsRoom(t *testing.T) {
	root := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	var free atomic.Int64
	free.Store(10)
	rounds := make(chan struct{}, 100)
	d := New(Config{FS: fsys.OS, Layout: layout.Layout{Root: root, StateDir: root + "/state"}, Clock: fake, Logger: zap.NewNop(),
		FreeSpace: func(string) (int64, error) { return free.Load(), nil }, JournalSegmentSize: 1000,
		Checked: func() { rounds <- struct{}{} }})
	j := &fakeJournal{retained: true}
	c := &countingCompactor{d: d, free: &free, need: 500}
	d.Start(j, c)
	defer d.Close()

	k := layout.Key{ProjectKey: "p", SessionID: "s"}
	err := d.CompactFailed(k, "/t", 500, errdefs.FromIO(syscall.ENOSPC))
	var se *errdefs.SpaceError
	if !errors.As(err, &se) || se.Need != 500 || se.Free != 10 {
		t.Fatalf("CompactFailed = %v, want a SpaceError needing 500 with 10 free", err)
	}
	if !d.Waiting(k) || !j.LowSpace() || j.retained {
		t.Fatalf("waiting %v, journal low on space %v, retained kept %v: want deferred, reserve and retained given back", d.Waiting(k), j.LowSpace(), j.retained)
	}
	if s := d.Stats(); len(s.Deferred) != 1 || s.Deferred[0].Line() != "compaction deferred: need 500 bytes in /t, 10 free" {
		t.Fatalf("stats = %+v", s)
	}
	round := func() {
		t.Helper()
		fake.Advance(CheckEvery)
		select {
		case <-rounds:
		case <-time.After(10 * time.Second):
			t.Fatal("no round of the watcher after the clock moved")
		}
	}
	<-rounds // the kick of the release
	for i := 0; i < 5; i++ {
		round()
	}
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("%d compactions tried while the space stayed short, want none", n)
	}
	free.Store(1 << 20)
	round()
	if n := c.calls.Load(); n != 1 || d.Waiting(k) {
		t.Fatalf("%d compactions once there was room (still waiting: %v), want 1 done", n, d.Waiting(k))
	}
	if j.LowSpace() {
		t.Fatal("the journal still gives back its reserve once nothing waits and there is room")
	}
}
