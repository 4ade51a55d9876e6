package writer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

var errInjected = errors.New("injected fault")

// failOn returns hooks that fail each rename (op "rename", path its new
// name) and folder sync (op "syncdir") for which fail holds, with
// errInjected, to stop a compaction at a precise point.
func failOn(fail func(op, path string) bool) fstest.Hooks {
	return fstest.Hooks{Before: func(c fstest.Call) error {
		path := c.Path
		if c.Name == "rename" {
			path = c.NewPath
		}
		if (c.Name == "rename" || c.Name == "syncdir") && fail(c.Name, path) {
			return fmt.Errorf("%s %s: %w", c.Name, path, errInjected)
		}
		return nil
	}}
}

// TestCrashBetweenRenameAndJournalReset: the compaction's rename landed but
// the new journal generation was never created. Recovery must see that the
// entries are already in the canonical file and not append them again,
// also those without a uuid.
func TestCrashBetweenRenameAndJournalReset(t *testing.T) {
	// (A failing start of the journal's next stream, after the rename: see
	// TestFailedNewGenerationAfterForeignLinesReopens.)
	for _, point := range []string{"canonical-syncdir"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			ff := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
			e.fs = ff
			m := e.manager()
			k := newKey()
			ctx := context.Background()
			if _, err := m.Append(ctx, k, [][]byte{entry(""), entry(""), entry(uuid.NewString())}); err != nil {
				t.Fatal(err)
			}
			ff.SetHooks(failOn(func(op, path string) bool {
				return op == "syncdir" && path == filepath.Dir(e.lay.TranscriptPath(k))
			}))
			if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
				t.Fatalf("flush: want the injected fault, got %v", err)
			}
			ff.SetHooks(fstest.Hooks{})
			closeManager(t, m)
			m = e.manager()
			if _, err := m.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			// The session works again and holds each entry once.
			e.appendOneThenClose(m, k, 4)
		})
	}
}

// TestFailedRenameKeepsEntries: a compaction whose rename fails leaves the
// old file; the entries stay journaled and reach the file later.
func TestFailedRenameKeepsEntries(t *testing.T) {
	e := newEnv(t)
	ff := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
	e.fs = ff
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	if _, err := m.Append(ctx, k, [][]byte{entry("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, k, [][]byte{entry(""), entry("")}); err != nil {
		t.Fatal(err)
	}
	ff.SetHooks(failOn(func(op, path string) bool { return op == "rename" && strings.HasSuffix(path, ".jsonl") }))
	if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
		t.Fatalf("flush: want injected fault, got %v", err)
	}
	if n := len(e.canonicalLines(k)); n != 1 {
		t.Fatalf("old file changed: %d lines", n)
	}
	ents, _ := os.ReadDir(filepath.Dir(e.lay.TranscriptPath(k)))
	for _, d := range ents {
		if d.Name() != filepath.Base(e.lay.TranscriptPath(k)) {
			t.Errorf("left behind in the project folder: %s", d.Name())
		}
	}
	ff.SetHooks(fstest.Hooks{})
	// The next request reopens the writer from disk.
	e.appendOneThenClose(m, k, 4)
}

// TestForeignAppendKept: lines another program appends to the canonical
// file are kept, in their place, and sessiond's entries follow them.
func TestForeignAppendKept(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	mine1, foreign, mine2 := uuid.NewString(), uuid.NewString(), uuid.NewString()
	if _, err := m.Append(ctx, k, [][]byte{entry(mine1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, k, [][]byte{entry(mine2), entry(foreign)}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.lay.TranscriptPath(k), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(entry(foreign, "by", "agent"), '\n'))
	f.Write([]byte(`{"torn":`)) // and a torn line, as a killed agent leaves
	f.Close()
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	b, _ := os.ReadFile(e.lay.TranscriptPath(k))
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines (mine, foreign, torn, mine; the duplicate uuid dropped), got %d:\n%s", len(lines), b)
	}
	if !strings.Contains(lines[0], mine1) || !strings.Contains(lines[1], `"by":"agent"`) || lines[2] != `{"torn":` || !strings.Contains(lines[3], mine2) {
		t.Fatalf("unexpected content:\n%s", b)
	}
}

// TestLinearCompactionCost: with the size trigger alone, bytes written by
// compactions stay within a constant factor of the bytes appended.
func TestLinearCompactionCost(t *testing.T) {
	e := newEnv(t)
	e.cfg.MinCompactBytes = 4 << 10
	m := e.manager()
	k := newKey()
	payload := strings.Repeat("x", 200)
	var appended int
	for i := 0; i < 3000; i++ {
		b := entry("", "p", payload)
		appended += len(b) + 1
		if _, err := m.Append(context.Background(), k, [][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	closeManager(t, m)
	ratio := float64(st.CompactedBytes) / float64(appended)
	t.Logf("appended %d bytes, compactions %d wrote %d bytes (%.2fx)", appended, st.Compactions, st.CompactedBytes, ratio)
	if ratio > 2.5 {
		t.Fatalf("compaction wrote %.2fx the appended bytes; the geometric rule bounds it by 2x plus the last file", ratio)
	}
}

// A folder whose creation was not made durable (the sync of its parent
// failed) must not be trusted because it exists: the next MkdirAll syncs it
// again instead of returning at once, or everything written below it would
// be lost with it at a power loss. Exercised here on the journal folder.
func TestFailedFolderSyncIsRedone(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	k := fixedKey(1, "")
	m := newCrashManager(t, ff, nil)
	acked := line(k, "00000000-0000-4000-8000-000000000001", "acked")
	mustAppendTo(t, m, k, acked)
	// The compaction makes the project folder; its sync fails.
	ff.Inject(fstest.Fault{Op: fstest.OpSyncDir, Err: syscall.EIO})
	if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("flush with a failing folder sync: %v", err)
	}
	ff.Clear()
	// The next compaction must sync the folder again before the journal lets
	// the entries go.
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	abortManager(m)
	if got := recoverAndRead(t, c.CrashClone(nil), k); !strings.Contains(got, acked) {
		t.Fatalf("power loss lost an acknowledged entry: %q", got)
	}
}

// Journaled entries that another program also wrote to the canonical file
// (same uuid) are duplicates only once that file is synced: the program may
// never have synced its lines, and dropping the journal's copies, then the
// journal, would let a power loss take them away. So the file is synced
// first, at open and at compaction.
func TestForeignLinesSyncedBeforeJournalDropped(t *testing.T) {
	for _, when := range []string{"at open", "at compaction"} {
		t.Run(when, func(t *testing.T) {
			c := fstest.NewCrashFS()
			k := fixedKey(3, "")
			m := newCrashManager(t, c, nil)
			mustAppendTo(t, m, k, line(k, "00000000-0000-4000-8000-000000000001", "first"))
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			dup := line(k, "00000000-0000-4000-8000-000000000002", "sent both ways")
			mustAppendTo(t, m, k, dup)
			foreign := func(fs fsys.FS) {
				f, err := fs.OpenFile(crashLayout.TranscriptPath(k), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Write([]byte(dup + "\n")) // never synced
				f.Close()
			}
			var last *fstest.CrashFS
			if when == "at open" {
				abortManager(m)
				foreign(c)
				last = c.KillClone()
				m = newCrashManager(t, last, nil)
				if _, err := m.Recover(bg); err != nil {
					t.Fatal(err)
				}
			} else {
				foreign(c)
				if _, err := m.Flush(bg, k); err != nil {
					t.Fatal(err)
				}
				last = c
			}
			closeManager(t, m)
			if got := recoverAndRead(t, last.CrashClone(nil), k); !strings.Contains(got, dup) {
				t.Fatalf("power loss lost an acknowledged entry: %q", got)
			}
		})
	}
}

// Performance bug: every compaction allocated a 1 MiB write buffer and
// every journal open a 256 KiB read window, however small the session:
// garbage that dominated the CPU profile of many small sessions.
func TestSmallCompactionAllocatesLittle(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	mustAppendTo(t, m, k, line(k, "", "warm up"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const rounds = 20
	for i := 0; i < rounds; i++ {
		mustAppendTo(t, m, k, line(k, "", fmt.Sprint(i)))
		if _, err := m.Flush(bg, k); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / rounds; per > 256<<10 {
		t.Fatalf("an append and flush of a tiny session allocates %d KiB", per>>10)
	}
}

// appendOneThenClose appends one more entry to k, closes m, and checks
// that the session held want entries then, and its canonical file as many
// lines.
func (e *env) appendOneThenClose(m *Manager, k layout.Key, want uint64) {
	e.t.Helper()
	res, err := m.Append(context.Background(), k, [][]byte{entry("")})
	if err != nil {
		e.t.Fatal(err)
	}
	if res.Entries != want {
		e.t.Fatalf("the session holds %d entries after one more append, want %d", res.Entries, want)
	}
	closeManager(e.t, m)
	if n := len(e.canonicalLines(k)); uint64(n) != want {
		e.t.Fatalf("%d lines, want %d", n, want)
	}
}

// slowTempFS counts the compaction temp files open at once, and makes
// each one's sync slow so that compactions started together overlap.
type slowTempFS struct {
	*fstest.HookFS
	mu        sync.Mutex
	open, max int
	closed    map[fsys.File]bool
}

func newSlowTempFS(inner fsys.FS) *slowTempFS {
	s := &slowTempFS{closed: map[fsys.File]bool{}}
	temp := func(c fstest.Call) bool { return strings.Contains(filepath.Base(c.Path), ".compact-") }
	s.HookFS = fstest.NewHookFS(inner, fstest.Hooks{
		Before: func(c fstest.Call) error {
			switch {
			case !temp(c):
			case c.Name == "sync":
				time.Sleep(30 * time.Millisecond)
			case c.Name == "close":
				s.mu.Lock()
				if !s.closed[c.File] {
					s.closed[c.File] = true
					s.open--
				}
				s.mu.Unlock()
			}
			return nil
		},
		After: func(c fstest.Call, err error) {
			if err == nil && c.Name == "open" && temp(c) {
				s.mu.Lock()
				s.open++
				s.max = max(s.max, s.open)
				s.mu.Unlock()
			}
		},
	})
	return s
}

// TestCompactionsRunWithinTheirSlots: many sessions compacting at once
// (flushed together here; going idle or retiring together in a daemon)
// hold at most Config.CompactParallel compactions' files open at a time,
// and every one of them still completes.
func TestCompactionsRunWithinTheirSlots(t *testing.T) {
	e := newEnv(t)
	sfs := newSlowTempFS(fsys.OS)
	e.fs = sfs
	e.cfg.CompactParallel = 3
	m := e.manager()
	defer closeManager(t, m)
	keys := make([]layout.Key, 16)
	for i := range keys {
		keys[i] = newKey()
		if _, err := m.Append(bg, keys[i], [][]byte{entry(uuid.NewString())}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Flush(bg, k)
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if errs[i] != nil {
			t.Fatalf("flush %d: %v", i, errs[i])
		}
		if n := len(e.canonicalLines(k)); n != 1 {
			t.Fatalf("session %d holds %d lines after its flush, want 1", i, n)
		}
	}
	sfs.mu.Lock()
	defer sfs.mu.Unlock()
	if sfs.max > 3 {
		t.Fatalf("%d compactions had their temp files open at once; the bound is 3", sfs.max)
	}
	if sfs.max < 2 {
		t.Fatalf("compactions never overlapped (at most %d at once): the slots serialise them", sfs.max)
	}
	t.Logf("at most %d compactions at once", sfs.max)
}

// BenchmarkShutdownManySessions measures what bounding the compactions
// running at once (Config.CompactParallel) costs a SIGTERM: 1000 open
// sessions, each with one entry only in the journal, all compacted as the
// Manager closes. "unbounded" lets all 1000 run together, as before the
// bound, and is the baseline measured in the same run.
func BenchmarkShutdownManySessions(b *testing.B) {
	const sessions = 1000
	for _, c := range []struct {
		name     string
		parallel int
	}{{"parallel=4", 4}, {"default=8", 0}, {"parallel=16", 16}, {"unbounded", sessions}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := b.TempDir()
				lay := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
				m, err := New(Config{Layout: lay, IdleCompact: time.Hour, IdleRetire: time.Hour, CompactParallel: c.parallel})
				if err != nil {
					b.Fatal(err)
				}
				for s := 0; s < sessions; s++ {
					if _, err := m.Append(bg, newKey(), [][]byte{entry(uuid.NewString())}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if err := m.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*sessions), "µs/session")
		})
	}
}

// TestAppendsAreServedWhileTheIdleCompactionWaitsForASlot: a session
// whose idle compaction waits for a slot (all taken by other sessions'
// compactions) still serves its appends at once, and compacts once a
// slot frees.
func TestAppendsAreServedWhileTheIdleCompactionWaitsForASlot(t *testing.T) {
	e := newEnv(t)
	e.cfg.CompactParallel = 1
	e.cfg.IdleCompact = 20 * time.Millisecond
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	if _, err := m.Append(bg, k, [][]byte{entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	m.env.CompactSlots <- struct{}{} // another session's compaction, for as long as the test says
	time.Sleep(200 * time.Millisecond)
	if n := len(e.canonicalLinesIfAny(k)); n != 0 {
		t.Fatalf("the transcript has %d lines while every slot was taken", n)
	}
	// A queued append waits for its answer whatever its context says, so
	// the wait is bounded here.
	appended := make(chan error, 1)
	go func() {
		_, err := m.Append(bg, k, [][]byte{entry(uuid.NewString())})
		appended <- err
	}()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		<-m.env.CompactSlots // let the session go, so the test can end
		t.Fatal("the append waited for the compaction slot")
	}
	<-m.env.CompactSlots
	deadline := time.Now().Add(10 * time.Second)
	for len(e.canonicalLinesIfAny(k)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no idle compaction once the slot was free: %d lines", len(e.canonicalLinesIfAny(k)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseOutOfTimeLeavesWaitingCompactionsToReplay: Close whose time
// runs out while compactions wait for a slot returns then, and the next
// start finds every entry in the journal.
func TestCloseOutOfTimeLeavesWaitingCompactionsToReplay(t *testing.T) {
	e := newEnv(t)
	e.cfg.CompactParallel = 1
	m := e.manager()
	keys := []layout.Key{newKey(), newKey(), newKey()}
	for _, k := range keys {
		if _, err := m.Append(bg, k, [][]byte{entry(uuid.NewString())}); err != nil {
			t.Fatal(err)
		}
	}
	m.env.CompactSlots <- struct{}{} // taken for good: no shutdown compaction can start
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- m.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want its deadline's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once its time ran out: the compactions waiting for a slot kept it")
	}
	for _, k := range keys {
		if n := len(e.canonicalLinesIfAny(k)); n != 0 {
			t.Fatalf("%s holds %d lines, though no compaction could start", k, n)
		}
	}
	m2 := e.manager()
	defer closeManager(t, m2)
	for _, k := range keys {
		if _, err := m2.Flush(bg, k); err != nil {
			t.Fatal(err)
		}
		if n := len(e.canonicalLines(k)); n != 1 {
			t.Fatalf("%s holds %d lines after the next start, want its one entry", k, n)
		}
	}
}

// canonicalLinesIfAny is canonicalLines, with no file as no lines.
func (e *env) canonicalLinesIfAny(k layout.Key) []string {
	e.t.Helper()
	if _, err := os.Stat(e.lay.TranscriptPath(k)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return e.canonicalLines(k)
}
