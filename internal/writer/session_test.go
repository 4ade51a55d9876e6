package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer/session"
)

func TestIdleCompactionAndRetire(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	e.cfg.Clock = clk
	e.cfg.IdleCompact = time.Second
	e.cfg.IdleRetire = 3 * time.Second
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	if _, err := m.Append(context.Background(), k, [][]byte{entry("")}); err != nil {
		t.Fatal(err)
	}
	s := settled(t, m, k)
	if _, err := os.Stat(e.lay.TranscriptPath(k)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("compacted before the writer was idle: %v", err)
	}
	advance(t, clk, time.Second) // idle: a small file is compacted at once
	if n := len(e.canonicalLines(k)); n != 1 || !m.IsActive(k) {
		t.Fatalf("idle compaction: %d lines, active %v; want 1 line and the writer still there", n, m.IsActive(k))
	}
	clk.Advance(2 * time.Second)
	waitExited(t, s)
	if m.IsActive(k) {
		t.Fatal("the idle writer did not retire")
	}
	// A retired session reopens on demand.
	res, err := m.Append(context.Background(), k, [][]byte{entry("")})
	if err != nil || res.Entries != 2 {
		t.Fatalf("append after retire: %+v %v", res, err)
	}
}

// TestStaleEntriesWaitForCompactWithin: once a session's transcript
// exists, an idle pause no longer rewrites it for a few new lines (reads
// are served from the journal); the entries reach the file once the
// oldest has waited CompactWithin (less the writer's jitter, up to a
// quarter of it), whether the session pauses or keeps appending.
func TestStaleEntriesWaitForCompactWithin(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	e.cfg.Clock = clk
	e.cfg.IdleCompact = time.Second
	e.cfg.CompactWithin = 20 * time.Second
	e.cfg.IdleRetire = time.Hour
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	lines := func(want int, when string) {
		t.Helper()
		if n := len(e.canonicalLines(k)); n != want {
			t.Fatalf("%s: %d lines in the transcript, want %d", when, n, want)
		}
	}
	appendSettled(t, m, k)
	advance(t, clk, time.Second) // a new transcript: written once idle
	lines(1, "a new session after an idle second")
	// The session goes on: an append every 2 s, so it idles past
	// IdleCompact between them, for 14 s of the oldest entry's wait
	// (under 15 s, three quarters of CompactWithin).
	for i := 1; i <= 7; i++ {
		appendSettled(t, m, k)
		advance(t, clk, 2*time.Second)
		lines(1, fmt.Sprintf("after %d s of the oldest entry's wait", 2*i))
	}
	// By 20 s of its wait, the entries are in.
	clk.Advance(6 * time.Second)
	waitLines(t, e, k, 8)
	// Nothing pending: no timer brings a rewrite, and a new entry waits
	// its own bound, through idle pauses.
	appendSettled(t, m, k)
	advance(t, clk, 14*time.Second)
	lines(8, "14 s after the last append")
	clk.Advance(6 * time.Second)
	waitLines(t, e, k, 9)
	settled(t, m, k) // the compaction's turn is over, its count too
	if got := m.Stats().Compactions; got != 3 {
		t.Fatalf("%d compactions, want 3 (the new transcript, then one per CompactWithin)", got)
	}
}

// appendSettled appends one entry to k and waits until its writer has
// re-armed its timer (settled), so a fake clock's next Advance counts
// from there.
func appendSettled(t *testing.T, m *Manager, k layout.Key) {
	t.Helper()
	if _, err := m.Append(context.Background(), k, [][]byte{entry("")}); err != nil {
		t.Fatal(err)
	}
	settled(t, m, k)
}

// waitLines waits (10 s at most) until k's transcript has want lines.
func waitLines(t *testing.T, e *env, k layout.Key, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.canonicalLinesIfAny(k)) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the transcript has %d lines, want %d", len(e.canonicalLinesIfAny(k)), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled returns k's live writer once it has handled everything sent so
// far: it answers a request only after re-arming its idle timer, so the
// next Advance of a fake clock counts from there.
func settled(t *testing.T, m *Manager, k layout.Key) *session.Writer {
	t.Helper()
	if err := m.do(context.Background(), k, func(*session.State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s := m.reg.lookup(k)
	if s == nil {
		t.Fatalf("no writer of %s", k)
	}
	return s
}

// advance moves clk on by d and waits (10 s at most) until the timer that
// fired is armed again: whatever the writer did when it fired is done.
func advance(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	clk.Advance(d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitArmed(ctx, 1); err != nil {
		t.Fatalf("no timer armed again after the clock moved on %v: %v", d, err)
	}
}

// waitExited waits (10 s at most) for s's goroutine to end.
func waitExited(t *testing.T, s *session.Writer) {
	t.Helper()
	select {
	case <-s.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not exit")
	}
}

// TestRetireCompactsWhatIdleLeft: the compaction rules leave a small tail
// of a large file in the journal (rewriting the file for it would cost too
// much), but a writer that retires moves it into the file: official
// readers must not see a stale transcript for as long as nobody writes to
// the session again.
func TestRetireCompactsWhatIdleLeft(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	e.cfg.Clock = clk
	e.cfg.IdleCompact = time.Second
	e.cfg.CompactWithin = 2 * time.Second
	e.cfg.IdleRetire = 10 * time.Second
	e.cfg.IdleFloor = 4 << 10
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	big := [][]byte{}
	for i := 0; i < 64; i++ {
		big = append(big, entry(uuid.NewString(), "p", strings.Repeat("x", 1000)))
	}
	if _, err := m.Append(ctx, k, big); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	// 1 entry against a 64 KiB file: under 1/16 of it, so neither an
	// idle pause nor its wait past CompactWithin compacts it.
	if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	s := settled(t, m, k)
	advance(t, clk, time.Second)
	clk.Advance(5 * time.Second)
	if n := len(e.canonicalLines(k)); n != 64 || !m.IsActive(k) {
		t.Fatalf("before retiring: %d lines, active %v; want the tail still journaled", n, m.IsActive(k))
	}
	clk.Advance(4 * time.Second)
	waitExited(t, s)
	if n := len(e.canonicalLines(k)); n != 65 {
		t.Fatalf("after retiring: %d lines, want 65", n)
	}
	if m.logs.Exists(k) {
		t.Fatalf("entries of %s left in the journal after retiring with nothing pending", k)
	}
}

// TestRetiringFlushRetiresAtOnce: recovery's replay flushes each session
// with retire set, so that the writers it opens do not hold their files
// until the idle retirement. The caller's own reference to the writer used
// to be released only after it queued the flush, so a writer that ran the
// flush first saw itself still referenced and stayed (CI caught
// TestCheckJournalsServesBeforeReplay with one writer left). The flush
// must find the writer gone every time.
func TestRetiringFlushRetiresAtOnce(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	// The caller is slow to go on after queueing (as a loaded machine
	// makes it): the writer runs the flush first.
	slow := func() { time.Sleep(20 * time.Millisecond) }
	testHookQueued.Store(&slow)
	defer testHookQueued.Store(nil)
	for i := range 20 {
		if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString(), "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.flush(ctx, k, session.RetireIfDone, "replay"); err != nil {
			t.Fatal(err)
		}
		if m.IsActive(k) {
			t.Fatalf("round %d: the writer is still active after a retiring flush", i)
		}
	}
}

// TestFailingStaleCompactionWaitsForTheTimer: a compaction the bound asks
// for that fails (here the temp file cannot be created) is tried again at
// the timer's pace, not after every append that follows: a session whose
// compaction cannot happen must not pay a rewrite attempt per append.
func TestFailingStaleCompactionWaitsForTheTimer(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	var failing atomic.Bool
	var tries atomic.Int32
	e.fs = fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(c fstest.Call) error {
		if c.Name == "open" && strings.Contains(filepath.Base(c.Path), ".compact-") && failing.Load() {
			tries.Add(1)
			return fmt.Errorf("injected: %w", syscall.EIO)
		}
		return nil
	}})
	e.cfg.Clock = clk
	e.cfg.IdleCompact = time.Second
	e.cfg.CompactWithin = 20 * time.Second
	e.cfg.IdleRetire = time.Hour
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	appendSettled(t, m, k)
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	appendSettled(t, m, k)
	advance(t, clk, 20*time.Second) // past the bound: the timer's try fails
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d compaction tries once the bound passed, want 1", n)
	}
	for range 20 {
		appendSettled(t, m, k)
	}
	if n := tries.Load(); n != 1 {
		t.Fatalf("%d compaction tries after 20 more appends at the same moment, want still 1", n)
	}
	advance(t, clk, time.Second) // IdleCompact later: the next try
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d compaction tries a second later, want 2", n)
	}
	failing.Store(false)
	advance(t, clk, time.Second)
	if n := len(e.canonicalLines(k)); n != 22 {
		t.Fatalf("once the fault is gone: %d lines, want 22", n)
	}
}

// TestCompactionAfterAnAppendOutlastingIdleRetire: the compaction the
// bound asks for right after an append's answer may take longer than
// IdleRetire (a slow disk); the writer may then retire there, and must
// stop serving once it has. A writer that went on after retiring there
// panicked at its next idle tick ("no move from retiring to retiring";
// CI found it).
func TestCompactionAfterAnAppendOutlastingIdleRetire(t *testing.T) {
	for round := range 5 {
		e := newEnv(t)
		e.fs = fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(c fstest.Call) error {
			if c.Name == "sync" && strings.Contains(filepath.Base(c.Path), ".compact-") {
				time.Sleep(60 * time.Millisecond)
			}
			return nil
		}})
		e.cfg.IdleCompact = 2 * time.Millisecond
		e.cfg.CompactWithin = 2 * time.Millisecond
		e.cfg.IdleRetire = 40 * time.Millisecond
		// A file over IdleFloor: a small tail is not worth a rewrite when
		// the timer finds it past the bound; a large append makes it so,
		// in that append's turn.
		e.cfg.IdleFloor = 1 << 10
		m := e.manager()
		ctx := context.Background()
		k := newKey()
		big := entry(uuid.NewString(), "p", strings.Repeat("x", 32<<10))
		if _, err := m.Append(ctx, k, [][]byte{big}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Flush(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Append(ctx, k, [][]byte{entry("")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // past the bound, the tail too small to compact
		if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString(), "p", strings.Repeat("y", 8<<10))}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the append's compaction, a retirement, idle ticks
		if _, err := m.Flush(ctx, k); err != nil {
			t.Fatal(err)
		}
		if n := len(e.canonicalLines(k)); n != 3 {
			t.Fatalf("round %d: %d lines, want 3", round, n)
		}
		closeManager(t, m)
	}
}
