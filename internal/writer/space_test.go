package writer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/space"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// spaceEnv is a Manager on the real disk behind a FaultFS, with a fake
// clock and a free space the test sets, counting the compactions tried
// (temp copies opened) and the watcher's rounds.
type spaceEnv struct {
	*env
	ff       *fstest.FaultFS
	fake     *clock.Fake
	free     atomic.Int64
	attempts atomic.Int64
	rounds   atomic.Int64
	m        *Manager
}

func newSpaceEnv(t *testing.T, cfg func(*Config)) *spaceEnv {
	e := &spaceEnv{env: newEnv(t), fake: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))}
	e.free.Store(1 << 40)
	e.ff = fstest.NewFaultFS(fsys.OS)
	e.ff.Trace(func(ev fstest.Event) {
		if ev.Op == fstest.OpOpen && strings.Contains(ev.Path, ".compact-") {
			e.attempts.Add(1)
		}
	})
	e.fs = e.ff
	e.cfg.Clock = e.fake
	e.cfg.FreeSpace = func(string) (int64, error) { return e.free.Load(), nil }
	// The size rule compacts after every append that grows the journal
	// past the transcript: a compaction after each append, if it could.
	e.cfg.MinCompactBytes = 1
	if cfg != nil {
		cfg(&e.cfg)
	}
	hook := func() { e.rounds.Add(1) }
	testHookSpaceChecked.Store(&hook)
	t.Cleanup(func() { testHookSpaceChecked.Store(nil) })
	e.m = e.manager()
	t.Cleanup(func() { closeManager(t, e.m) })
	return e
}

// appendTo appends lines to k and waits for what the writer does after
// the acknowledgement (the size rule's compaction).
func (e *spaceEnv) appendTo(k layout.Key, lines ...string) {
	e.t.Helper()
	mustAppendTo(e.t, e.m, k, lines...)
	if err := e.m.do(bg, k, func(*session.State) error { return nil }); err != nil {
		e.t.Fatal(err)
	}
}

// tick moves the fake clock one space.CheckEvery on and waits for the
// watcher's round.
func (e *spaceEnv) tick() {
	e.t.Helper()
	before := e.rounds.Load()
	e.fake.Advance(space.CheckEvery)
	deadline := time.Now().Add(10 * time.Second)
	for e.rounds.Load() == before {
		if time.Now().After(deadline) {
			e.t.Fatal("the watcher did not run a round after the clock moved")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDeferredCompactionWaitsForSpace: a compaction that does not fit
// (ENOSPC writing its temp copy) is deferred with one status line naming
// the folder, what it needs and what is free; while the free space stays
// short, neither the appends that follow nor a hundred rounds of the
// watcher try it again (one statfs a round, no compaction: not a hot
// loop), an explicit Flush tries once and says where space is missing; once the
// space is back, the watcher compacts it without any call, and the
// transcript holds every entry.
func TestDeferredCompactionWaitsForSpace(t *testing.T) {
	e := newSpaceEnv(t, nil)
	m, k := e.m, newKey()
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.free.Store(10)
	e.appendTo(k, string(entry("", "n", "0")))
	if n := e.attempts.Load(); n != 1 {
		t.Fatalf("%d compactions tried after the first append, want the size rule's 1", n)
	}
	d := m.Stats().Disk.Deferred
	if len(d) != 1 || d[0].Key != k {
		t.Fatalf("deferred compactions: %+v, want one of %s", d, k)
	}
	dir := e.lay.ProjectDir(k.ProjectKey)
	if line := d[0].Line(); !strings.HasPrefix(line, "compaction deferred: need ") || !strings.Contains(line, " bytes in "+dir+", 10 free") {
		t.Errorf("status line %q does not say what is needed in %s and what is free", line, dir)
	}
	for i := 1; i <= 20; i++ {
		e.appendTo(k, string(entry("", "n", fmt.Sprint(i))))
	}
	for range 100 {
		e.tick()
	}
	if n := e.attempts.Load(); n != 1 {
		t.Fatalf("%d compactions tried while the disk stayed full, want still 1", n)
	}
	if st := m.Stats().Disk; st.LagSessions != 1 || st.LagBytes == 0 {
		t.Errorf("lag %d sessions, %d bytes; want the deferred session and its entries", st.LagSessions, st.LagBytes)
	}
	_, err := m.Flush(bg, k)
	var se *errdefs.SpaceError
	if !errors.As(err, &se) || se.Dir != dir || se.Need <= 0 {
		t.Fatalf("Flush on the full disk = %v, want a SpaceError naming %s", err, dir)
	}
	if n := e.attempts.Load(); n != 2 {
		t.Fatalf("%d compactions tried after the Flush, want 2", n)
	}

	// Space is back: the watcher compacts it, nobody asks.
	e.ff.Clear()
	e.free.Store(1 << 40)
	for i := 0; len(m.Stats().Disk.Deferred) > 0; i++ {
		if i == 10 {
			t.Fatal("the deferred compaction was not done within 10 rounds of free space")
		}
		e.tick()
	}
	if n := e.attempts.Load(); n != 3 {
		t.Errorf("%d compactions tried in all, want 3 (size rule, Flush, the watcher's)", n)
	}
	if got := e.canonicalLines(k); len(got) != 21 {
		t.Errorf("the transcript holds %d lines after the space came back, want 21", len(got))
	}
	if st := m.Stats().Disk; st.LagSessions != 0 || st.LagBytes != 0 {
		t.Errorf("lag after the catch-up: %d sessions, %d bytes", st.LagSessions, st.LagBytes)
	}
}

// TestBallastReleasedAndRemade: the ballast is made at start; the first
// write that finds the disk full deletes it and the journal gives back its
// spare space; the compaction waiting is tried again at once (it may fit
// now); once nothing waits and the disk has room for the ballast twice
// over, it is made again.
func TestBallastReleasedAndRemade(t *testing.T) {
	const size = 64 << 10
	e := newSpaceEnv(t, func(c *Config) { c.BallastSize = size })
	m, k := e.m, newKey()
	path := e.lay.BallastPath()
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Fatalf("ballast at start: %v, %v; want %d bytes", fi, err, size)
	}
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC})
	e.free.Store(10)
	rounds := e.rounds.Load()
	e.appendTo(k, string(entry("", "n", "0")))
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ballast is still there after the disk filled (%v)", err)
	}
	if st := m.Stats().Disk; !st.BallastReleased || st.BallastPath != path || st.BallastSize != size {
		t.Errorf("status: %+v, want the ballast %s released", st, path)
	}
	if !m.logs.Log().LowSpace() {
		t.Error("the journal still reserves space ahead on a full disk")
	}
	// The release wakes the watcher at once; the free space (10) does
	// not fit the compaction, so it is not tried.
	for deadline := time.Now().Add(10 * time.Second); e.rounds.Load() == rounds; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the release did not wake the watcher")
		}
	}
	if n := e.attempts.Load(); n != 1 {
		t.Errorf("%d compactions tried, want 1", n)
	}
	// The ballast's room is the compactions': an append that would take
	// it is refused, saying so.
	_, err := m.Append(bg, k, [][]byte{entry("", "n", "1")})
	var se *errdefs.SpaceError
	if !errors.As(err, &se) || se.Dir != e.lay.JournalDir() || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "kept for the compactions") {
		t.Errorf("an append into the released ballast's room = %v, want a SpaceError in %s saying the room is kept", err, e.lay.JournalDir())
	}
	// Some space: the compaction fits, and appends that leave the
	// ballast's room, but not the ballast twice over.
	e.free.Store(2*size - 1)
	for i := 0; len(m.Stats().Disk.Deferred) > 0; i++ {
		if i == 10 {
			t.Fatal("the deferred compaction was not done")
		}
		e.tick()
	}
	e.appendTo(k, string(entry("", "n", "2")))
	if got := e.canonicalLines(k); len(got) != 2 {
		t.Errorf("the transcript holds %d lines, want 2 (the first entry and the last; the refused one is not stored)", len(got))
	}
	e.tick()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ballast was made again without room for it twice over (%v)", err)
	}
	e.free.Store(1 << 40)
	e.tick()
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Fatalf("the ballast was not made again once space was back: %v, %v", fi, err)
	}
	if st := m.Stats().Disk; st.BallastReleased {
		t.Error("status still says the ballast is released")
	}
	if m.logs.Log().LowSpace() {
		t.Error("the journal does not reserve space ahead again once space is back")
	}
}

// TestReplayOnAFullDiskWaitsForSpace: a session whose replay does not fit
// on a full disk is no recovery failure: its compaction is deferred (shown
// as such), its entries served from the journal, and it catches up once there
// is room, with nothing ever reported as failed.
func TestReplayOnAFullDiskWaitsForSpace(t *testing.T) {
	e := newSpaceEnv(t, func(c *Config) { c.MinCompactBytes = 1 << 30 })
	k := newKey()
	mustAppendTo(t, e.m, k, string(entry("", "n", "0")))
	crash(t, e.m)

	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.free.Store(10)
	m := e.manager()
	defer closeManager(t, m)
	rep, err := m.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed) != 0 {
		t.Fatalf("recovery failed %v on a full disk, want the compaction deferred", rep.Failed)
	}
	st := m.Stats()
	if len(st.RecoveryErrors) != 0 || len(st.Disk.Deferred) != 1 || st.Disk.Deferred[0].Key != k {
		t.Fatalf("recovery errors %q, deferred %+v; want none, and the session's compaction deferred", st.RecoveryErrors, st.Disk.Deferred)
	}
	e.ff.Clear()
	e.free.Store(1 << 40)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	st = m.Stats()
	if len(st.RecoveryErrors) != 0 || st.PastRecoveryFailures != 0 || len(st.Disk.Deferred) != 0 {
		t.Errorf("after the session was compacted: recovery errors %q, past %d, deferred %d; want none", st.RecoveryErrors, st.PastRecoveryFailures, len(st.Disk.Deferred))
	}
	if got := e.canonicalLines(k); len(got) != 1 {
		t.Errorf("the transcript holds %d lines, want 1", len(got))
	}
}

// TestRetainedSegmentsYieldToACompaction: the journal's retained segments
// (kept so repair can put back what another program's rewrite drops) are
// the first room given back when the disk is full, to a compaction as to
// an append: a flush that finds the disk full while they hold room has
// the journal remove them and tries once more at once, instead of failing and
// waiting for space sessiond could free itself (its transcripts would lag
// until an append happened to hit the full disk in the journal, which the
// ballast's rule keeps appends from doing). With nothing retained, the
// compaction is not tried again: it waits for space.
func TestRetainedSegmentsYieldToACompaction(t *testing.T) {
	e := newSpaceEnv(t, func(c *Config) { c.MinCompactBytes = 1 << 30; c.JournalSegmentSize = 4096 })
	m, k := e.m, newKey()
	for i := range 12 {
		e.appendTo(k, string(entry("", "n", fmt.Sprint(i), "pad", strings.Repeat("p", 1000))))
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	e.appendTo(k, string(entry("", "n", "next"))) // a commit lets the compacted segments go
	if n := m.Stats().RetainedSegments; n == 0 {
		t.Fatal("nothing retained after the compaction")
	}
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC})
	before := e.attempts.Load()
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatalf("flush on a disk full but for the journal's retained segments: %v", err)
	}
	if n := e.attempts.Load() - before; n != 2 {
		t.Errorf("%d compactions tried, want 2: the one that found the disk full, then one once the retained segments were gone", n)
	}
	st := m.Stats()
	if st.RetainedSegments != 0 || len(st.Disk.Deferred) != 0 {
		t.Fatalf("after the flush: %d segments retained, deferred %+v; want none of either", st.RetainedSegments, st.Disk.Deferred)
	}

	e.appendTo(k, string(entry("", "n", "last")))
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.free.Store(10)
	before = e.attempts.Load()
	if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("flush on a full disk with nothing retained: %v, want no space", err)
	}
	if n := e.attempts.Load() - before; n != 1 {
		t.Errorf("%d compactions tried with nothing retained to give back, want 1", n)
	}
}

// TestRetainedSegmentsYieldToAnAppend: while the released ballast's room
// is kept for the compactions, an append that would take it is refused;
// but room the journal's retained segments hold is given back first (they
// came back as the deferred compactions let segments go), as it is to
// the journal's own writes, instead of refusing appends while sessiond keeps
// history that is already in the transcripts.
func TestRetainedSegmentsYieldToAnAppend(t *testing.T) {
	const size = 64 << 10
	var retainedGone atomic.Bool
	e := newSpaceEnv(t, func(c *Config) {
		c.BallastSize, c.MinCompactBytes, c.JournalSegmentSize = size, 1<<30, 4096
	})
	// The free space the test sets, and the retained segments' room once
	// they are gone.
	e.cfg.FreeSpace = func(string) (int64, error) {
		f := e.free.Load()
		if retainedGone.Load() {
			f += size
		}
		return f, nil
	}
	closeManager(t, e.m)
	e.m = e.manager()
	m, k := e.m, newKey()
	e.appendTo(k, string(entry("", "n", "0")))
	// The disk fills: the ballast goes, the compaction waits.
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.free.Store(10)
	if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	e.ff.Clear()
	if !m.Stats().Disk.BallastReleased {
		t.Fatal("the ballast was not released")
	}
	// Some room: the compaction is done, appends that leave the
	// ballast's room go on, and the compactions let segments go, which
	// the journal retains.
	e.free.Store(2*size - 1)
	for i := 0; len(m.Stats().Disk.Deferred) > 0; i++ {
		if i == 10 {
			t.Fatal("the deferred compaction was not done")
		}
		e.tick()
	}
	for i := range 12 {
		e.appendTo(k, string(entry("", "n", fmt.Sprint(i+1), "pad", strings.Repeat("p", 1000))))
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	e.appendTo(k, string(entry("", "n", "13")))
	if m.Stats().RetainedSegments == 0 {
		t.Fatal("nothing retained")
	}
	// Less room than the ballast's beyond what the append needs, unless
	// the retained segments give theirs back.
	e.free.Store(size)
	e.ff.Trace(func(ev fstest.Event) {
		if ev.Op == fstest.OpRemove && strings.HasSuffix(ev.Path, ".wal-retained") {
			retainedGone.Store(true)
		}
	})
	if _, err := m.Append(bg, k, [][]byte{entry("", "n", "14")}); err != nil {
		t.Fatalf("append refused while the journal's retained segments held room: %v", err)
	}
	if n := m.Stats().RetainedSegments; n != 0 {
		t.Errorf("%d segments still retained", n)
	}
}

// TestLaggingTranscriptsGetTheReleasedRoom: an append that finds the disk
// full releases the reserves while nothing is deferred yet, only
// transcripts whose entries are still in the journal. The watcher compacts
// them at once: the one that fits is done, the one that does not is
// deferred, and the ballast is not made again meanwhile, though the free
// space has room for it (what the release freed). Once that compaction is
// done, the ballast comes back.
func TestLaggingTranscriptsGetTheReleasedRoom(t *testing.T) {
	const size = 64 << 10
	e := newSpaceEnv(t, func(c *Config) { c.BallastSize, c.MinCompactBytes = size, 1<<30 })
	m := e.m
	big, small, full := newKey(), newKey(), newKey()
	for i := range 3 {
		e.appendTo(big, string(entry("", "n", fmt.Sprint(i))))
		e.appendTo(small, string(entry("", "n", fmt.Sprint(i))))
	}
	if st := m.Stats().Disk; st.LagSessions != 2 {
		t.Fatalf("lag %d sessions before the disk fills, want 2", st.LagSessions)
	}
	path := e.lay.BallastPath()
	// big's compaction does not fit; the next write of the journal finds the
	// disk full. The free space read after that is the room the release
	// freed: the ballast's twice over.
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, "."+big.SessionID+".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.HasPrefix(p, e.lay.JournalDir()) }, Err: syscall.ENOSPC})
	e.free.Store(4 * size)
	if _, err := m.Append(bg, full, [][]byte{entry("", "n", "0")}); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("append on a full disk: %v, want a space error", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ballast is still there after the disk filled (%v)", err)
	}
	var st DiskStats
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st = m.Stats().Disk
		// The journal stops counting small as lagging at its compaction's
		// marker, just before the rename: wait for the file too.
		if _, err := os.Stat(e.lay.TranscriptPath(small)); len(st.Deferred) == 1 && st.LagSessions == 1 && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lagging transcripts were not compacted (or deferred) after the release: %+v", st)
		}
	}
	if st.Deferred[0].Key != big {
		t.Fatalf("deferred: %+v, want %s's compaction", st.Deferred, big)
	}
	if got := e.canonicalLines(small); len(got) != 3 {
		t.Errorf("the transcript that fits holds %d lines, want 3", len(got))
	}
	for range 3 {
		e.tick()
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ballast was made again while a compaction waited for the room (%v)", err)
	}
	if !m.logs.Log().LowSpace() {
		t.Error("the journal reserves space ahead again while a compaction waits")
	}
	e.ff.Clear()
	for i := 0; ; i++ {
		if fi, err := os.Stat(path); err == nil && fi.Size() == size {
			break
		}
		if i == 10 {
			t.Fatalf("the ballast was not made again once the compaction was done: %+v", m.Stats().Disk)
		}
		e.tick()
	}
	if got := e.canonicalLines(big); len(got) != 3 {
		t.Errorf("the deferred transcript holds %d lines, want 3", len(got))
	}
}

// TestReadOfADeferredSessionTellsNoChange: a session whose compaction
// waits for space keeps its entries in the journal with no writer; each
// ReadLines opens a writer that retires at once. The retirement tells
// Config.Changed nothing (the transcript holds what it held): told, the
// mirror, which reads on every Change, would turn again and again for as
// long as the disk stayed full.
func TestReadOfADeferredSessionTellsNoChange(t *testing.T) {
	var log changeLog
	e := newSpaceEnv(t, func(c *Config) { c.Changed = log.add })
	m, k := e.m, newKey()
	e.ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: func(p string) bool { return strings.Contains(p, ".compact-") }, Err: syscall.ENOSPC, Sticky: true})
	e.free.Store(10)
	e.appendTo(k, string(entry("", "n", "0")))
	if d := m.Stats().Disk.Deferred; len(d) != 1 {
		t.Fatalf("deferred: %+v, want the session's compaction", d)
	}
	// Retire the writer (a flush retires what it opened; this one was
	// open already): close the Manager and open a new one.
	closeManager(t, m)
	e.m = e.manager()
	m = e.m
	log.mu.Lock()
	log.cs = nil
	log.mu.Unlock()
	for range 3 {
		if lines, _, total := readAll(t, m, k, 0); len(lines) != 1 || total != 1 {
			t.Fatalf("ReadLines: %d lines, total %d; want the one entry", len(lines), total)
		}
		if m.IsActive(k) {
			t.Fatal("the writer ReadLines opened did not retire")
		}
	}
	log.mu.Lock()
	n := len(log.cs)
	log.mu.Unlock()
	if n != 0 {
		t.Fatalf("3 reads of a session waiting for space told %d Changes, want none", n)
	}
}
