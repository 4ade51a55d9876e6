package writer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const project = "-tmp-project"

func newKey() layout.Key {
	return layout.Key{ProjectKey: project, SessionID: uuid.NewString()}
}

type env struct {
	t   *testing.T
	lay layout.Layout
	fs  fsys.FS
	cfg Config
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	e := &env{t: t, lay: layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}, fs: fsys.OS}
	e.cfg = Config{Layout: e.lay, Logger: zaptest.NewLogger(t), IdleCompact: time.Hour, IdleRetire: time.Hour}
	return e
}

func (e *env) manager() *Manager {
	e.t.Helper()
	cfg := e.cfg
	cfg.FS = e.fs
	m, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func closeManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func entry(id string, fields ...string) []byte {
	s := `{"type":"user"`
	if id != "" {
		s += `,"uuid":"` + id + `"`
	}
	for i := 0; i+1 < len(fields); i += 2 {
		s += fmt.Sprintf(",%q:%q", fields[i], fields[i+1])
	}
	return []byte(s + "}")
}

// canonicalLines reads the canonical file and checks every line is a whole
// JSON object.
func (e *env) canonicalLines(k layout.Key) []string {
	e.t.Helper()
	b, err := os.ReadFile(e.lay.TranscriptPath(k))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		e.t.Fatalf("canonical file does not end in a newline")
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		if !json.Valid([]byte(l)) {
			e.t.Fatalf("canonical line is not valid JSON: %.100s", l)
		}
		out = append(out, l)
	}
	return out
}

func TestAppendValidatesAndCompacts(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	res, err := m.Append(ctx, k, [][]byte{[]byte(`{ "type" : "user", "uuid":"` + uuid.NewString() + `", "z":1, "a":"<&>" }`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Results[0].Outcome != Stored || res.Results[0].Index != 0 || res.Entries != 1 {
		t.Fatalf("unexpected result %+v", res)
	}
	bad := [][]byte{
		[]byte(`[1,2]`), []byte(`{"a":`), []byte("{\"a\":\"\x00\"}"), []byte("{\"a\":\"\xff\"}"), []byte(`"str"`),
	}
	for _, b := range bad {
		if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), b}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("append %q: want invalid argument, got %v", b, err)
		}
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	lines := e.canonicalLines(k)
	if len(lines) != 1 {
		t.Fatalf("a rejected batch wrote something: %d lines", len(lines))
	}
	if !strings.HasPrefix(lines[0], `{"type":"user","uuid":"`) || !strings.HasSuffix(lines[0], `,"z":1,"a":"<&>"}`) {
		t.Fatalf("key order or bytes not kept: %s", lines[0])
	}
	closeManager(t, m)
	fi, err := os.Stat(e.lay.TranscriptPath(k))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("canonical file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestDuplicatesByUUID(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	a, b := uuid.NewString(), uuid.NewString()
	res, err := m.Append(ctx, k, [][]byte{entry(a), entry(a), entry(""), entry("")})
	if err != nil {
		t.Fatal(err)
	}
	want := []Outcome{Stored, Duplicate, Stored, Stored}
	for i, r := range res.Results {
		if r.Outcome != want[i] {
			t.Errorf("entry %d: outcome %v want %v", i, r.Outcome, want[i])
		}
	}
	res, err = m.Append(ctx, k, [][]byte{entry(b), entry(a)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Results[0].Outcome != Stored || res.Results[1].Outcome != Duplicate || res.Entries != 4 {
		t.Fatalf("second batch: %+v", res)
	}
	// Still a duplicate after compaction and after a restart.
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	m = e.manager()
	res, err = m.Append(ctx, k, [][]byte{entry(b)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Results[0].Outcome != Duplicate || res.Entries != 4 {
		t.Fatalf("after restart: %+v", res)
	}
	closeManager(t, m)
}

// TestConcurrentOneSession: 200 goroutines append 50 entries each to one
// session; every entry is present exactly once and each caller's own order
// is kept.
func TestConcurrentOneSession(t *testing.T) {
	e := newEnv(t)
	e.cfg.MinCompactBytes = 64 << 10 // compact often, racing with appends
	m := e.manager()
	k := newKey()
	const callers, each = 200, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var id string
				if i%5 != 4 { // some entries carry no uuid
					id = uuid.NewString()
				}
				if _, err := m.Append(context.Background(), k, [][]byte{entry(id, "caller", fmt.Sprint(c), "seq", fmt.Sprint(i))}); err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	closeManager(t, m)
	checkCallers(t, e.canonicalLines(k), callers, each)
}

func checkCallers(t *testing.T, lines []string, callers, each int) {
	t.Helper()
	if len(lines) != callers*each {
		t.Fatalf("%d lines, want %d", len(lines), callers*each)
	}
	next := make(map[string]int)
	for _, l := range lines {
		var v struct{ Caller, Seq string }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(next[v.Caller]) != v.Seq {
			t.Fatalf("caller %s: got seq %s, want %d (order broken or entry lost/duplicated)", v.Caller, v.Seq, next[v.Caller])
		}
		next[v.Caller]++
	}
	for c := 0; c < callers; c++ {
		if next[fmt.Sprint(c)] != each {
			t.Fatalf("caller %d has %d entries, want %d", c, next[fmt.Sprint(c)], each)
		}
	}
}

// TestConcurrentManySessions: parallel appends to 100 sessions.
func TestConcurrentManySessions(t *testing.T) {
	e := newEnv(t)
	e.cfg.QueueDepth = 4 // exercise back-pressure
	m := e.manager()
	const sessions, callers, each = 100, 4, 10
	keys := make([]layout.Key, sessions)
	for i := range keys {
		keys[i] = newKey()
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for s := range keys {
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func(k layout.Key, c int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if _, err := m.Append(context.Background(), k, [][]byte{entry(uuid.NewString(), "caller", fmt.Sprint(c), "seq", fmt.Sprint(i))}); err != nil {
						failed.Store(err)
						return
					}
				}
			}(keys[s], c)
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	for _, k := range keys {
		checkCallers(t, e.canonicalLines(k), callers, each)
	}
}

// TestJournalReplayAfterAbort: entries acknowledged but never compacted
// (the process died) are replayed at the next start, exactly once.
func TestJournalReplayAfterAbort(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), entry("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), entry("", "n", "2")}); err != nil {
		t.Fatal(err)
	}
	crash(t, m)
	if n := len(e.canonicalLines(k)); n != 2 {
		t.Fatalf("canonical has %d lines before recovery, want 2", n)
	}
	m = e.manager()
	rep, err := m.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 1 || rep.Entries != 2 {
		t.Fatalf("recover report %+v", rep)
	}
	if n := len(e.canonicalLines(k)); n != 4 {
		t.Fatalf("after recovery %d lines, want 4", n)
	}
	// A second recovery finds nothing to do and duplicates nothing.
	closeManager(t, m)
	m = e.manager()
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	if n := len(e.canonicalLines(k)); n != 4 {
		t.Fatalf("after second recovery %d lines, want 4", n)
	}
}

// faultFS fails one chosen operation kind after it has run a number of
// times, to stop a compaction at a precise point.
type faultFS struct {
	fsys.FS
	mu     sync.Mutex
	failOn func(op, path string) bool
}

var errInjected = errors.New("injected fault")

func (f *faultFS) check(op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn != nil && f.failOn(op, path) {
		return fmt.Errorf("%s %s: %w", op, path, errInjected)
	}
	return nil
}

func (f *faultFS) Rename(o, n string) error {
	if err := f.check("rename", n); err != nil {
		return err
	}
	return f.FS.Rename(o, n)
}

func (f *faultFS) SyncDir(name string) error {
	if err := f.check("syncdir", name); err != nil {
		return err
	}
	return f.FS.SyncDir(name)
}

// TestCrashBetweenRenameAndJournalReset: the compaction's rename landed but
// the new journal generation was never created. Recovery must see that the
// entries are already in the canonical file and not append them again,
// also those without a uuid.
func TestCrashBetweenRenameAndJournalReset(t *testing.T) {
	for _, point := range []string{"canonical-syncdir", "journal-rename"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			ff := &faultFS{FS: fsys.OS}
			e.fs = ff
			m := e.manager()
			k := newKey()
			ctx := context.Background()
			if _, err := m.Append(ctx, k, [][]byte{entry(""), entry(""), entry(uuid.NewString())}); err != nil {
				t.Fatal(err)
			}
			ff.mu.Lock()
			ff.failOn = func(op, path string) bool {
				switch point {
				case "canonical-syncdir":
					return op == "syncdir" && path == filepath.Dir(e.lay.TranscriptPath(k))
				default:
					return op == "rename" && strings.HasSuffix(path, ".wal")
				}
			}
			ff.mu.Unlock()
			if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
				t.Fatalf("flush: want the injected fault, got %v", err)
			}
			ff.mu.Lock()
			ff.failOn = nil
			ff.mu.Unlock()
			closeManager(t, m)
			m = e.manager()
			if _, err := m.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			// The session works again and holds each entry once.
			res, err := m.Append(ctx, k, [][]byte{entry("")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != 4 {
				t.Fatalf("session holds %d entries after recovery and one append, want 4", res.Entries)
			}
			closeManager(t, m)
			if n := len(e.canonicalLines(k)); n != 4 {
				t.Fatalf("%d lines, want 4", n)
			}
		})
	}
}

// TestFailedRenameKeepsEntries: a compaction whose rename fails leaves the
// old file; the entries stay journaled and reach the file later.
func TestFailedRenameKeepsEntries(t *testing.T) {
	e := newEnv(t)
	ff := &faultFS{FS: fsys.OS}
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
	ff.mu.Lock()
	ff.failOn = func(op, path string) bool { return op == "rename" && strings.HasSuffix(path, ".jsonl") }
	ff.mu.Unlock()
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
	ff.mu.Lock()
	ff.failOn = nil
	ff.mu.Unlock()
	// The next request reopens the writer from disk.
	res, err := m.Append(ctx, k, [][]byte{entry("")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 4 {
		t.Fatalf("entries %d, want 4", res.Entries)
	}
	closeManager(t, m)
	if n := len(e.canonicalLines(k)); n != 4 {
		t.Fatalf("%d lines, want 4", n)
	}
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

func TestReadAndFollow(t *testing.T) {
	e := newEnv(t)
	e.cfg.MinCompactBytes = 1 // compact on every append, moving entries under the follower
	e.cfg.CompactRatio = 0.01
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	collect := func(es []Entry) error {
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%s", e.Index, e.Data))
		}
		return nil
	}
	if err := m.Read(ctx, k, ReadOptions{From: 3}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], `3:{"type":"user","n":"3"}`) {
		t.Fatalf("read from 3: %v", got)
	}
	got = nil
	if err := m.Read(ctx, k, ReadOptions{Tail: 1}, collect); err != nil || len(got) != 1 || !strings.HasPrefix(got[0], "4:") {
		t.Fatalf("tail 1: %v %v", got, err)
	}
	if err := m.Read(ctx, newKey(), ReadOptions{}, collect); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown session: want not found, got %v", err)
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan Entry, 100)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(fctx, k, ReadOptions{From: 4, Follow: true}, func(es []Entry) error {
			for _, e := range es {
				// Data is only valid during the call.
				e.Data = bytes.Clone(e.Data)
				followed <- e
			}
			return nil
		})
	}()
	want := uint64(4)
	next := func() Entry {
		select {
		case e := <-followed:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("follower got nothing")
		}
		return Entry{}
	}
	if e := next(); e.Index != want {
		t.Fatalf("first followed index %d", e.Index)
	}
	for i := 5; i < 25; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		e := next()
		if e.Index != uint64(i) || !bytes.Contains(e.Data, []byte(fmt.Sprintf(`"n":"%d"`, i))) {
			t.Fatalf("followed %d: %s", e.Index, e.Data)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
}

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

// settled returns k's live writer once it has handled everything sent so
// far: it answers a request only after re-arming its idle timer, so the
// next Advance of a fake clock counts from there.
func settled(t *testing.T, m *Manager, k layout.Key) *session {
	t.Helper()
	if err := m.do(context.Background(), k, func(*state) error { return nil }); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[k]
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
func waitExited(t *testing.T, s *session) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not exit")
	}
}

// TestRetireCompactsWhatIdleLeft: the idle rule leaves a small tail of a
// large file in the journal (rewriting the file for it would cost too
// much), but a writer that retires moves it into the file: official
// readers must not see a stale transcript for as long as nobody writes to
// the session again.
func TestRetireCompactsWhatIdleLeft(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Now())
	e.cfg.Clock = clk
	e.cfg.IdleCompact = time.Second
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
	// 1 entry against a 64 KiB file: under 1/16 of it, so idle does not
	// compact it.
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
	if _, err := os.Stat(e.lay.JournalPath(k)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("journal left after retiring with nothing pending: %v", err)
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

func TestSymlinkAtSessionPathRefused(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, nil, 0o600)
	os.MkdirAll(filepath.Dir(e.lay.TranscriptPath(k)), 0o700)
	if err := os.Symlink(target, e.lay.TranscriptPath(k)); err != nil {
		t.Fatal(err)
	}
	_, err := m.Append(context.Background(), k, [][]byte{entry("")})
	// Append checks the key's paths (layout.CheckOnDisk) before the writer
	// opens anything; the writer's own O_NOFOLLOW opens are the second line.
	if !errors.Is(err, errdefs.ErrUnsafePath) || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("want a refusal naming the link, got %v", err)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Fatal("wrote through the symlink")
	}
}

func TestFixturesRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../../../shared/fixtures/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no fixtures found at ../../../shared/fixtures")
	}
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	for _, f := range files {
		if strings.Contains(f, "TRUNCATED") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		k := newKey()
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		var batch [][]byte
		for sc.Scan() {
			batch = append(batch, append([]byte(nil), sc.Bytes()...))
		}
		if _, err := m.Append(ctx, k, batch); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		var got bytes.Buffer
		if err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
			for _, e := range es {
				got.Write(e.Data)
				got.WriteByte('\n')
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), b) {
			t.Fatalf("%s: read back differs from the original", filepath.Base(f))
		}
		if _, err := m.Flush(ctx, k); err != nil {
			t.Fatal(err)
		}
		c, _ := os.ReadFile(e.lay.TranscriptPath(k))
		if !bytes.Equal(c, b) {
			t.Fatalf("%s: canonical file differs from the original", filepath.Base(f))
		}
	}
}

// crash stops every writer at once, without the shutdown compaction, as a
// killed process would leave things (the journals are already synced).
func crash(t *testing.T, m *Manager) {
	t.Helper()
	m.mu.Lock()
	for _, s := range m.sessions {
		s.abort()
	}
	m.mu.Unlock()
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	m.Close(expired)
}

// TestFollowSurvivesWriterFailure: a writer that fails and reopens does not
// strand a follower, and does not wait for it to exit.
func TestFollowSurvivesWriterFailure(t *testing.T) {
	e := newEnv(t)
	ff := &faultFS{FS: fsys.OS}
	e.fs = ff
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "0")}); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 10)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(ctx, k, ReadOptions{Follow: true}, func(es []Entry) error {
			for _, e := range es {
				got <- e.Index
			}
			return nil
		})
	}()
	expect := func(i uint64) {
		t.Helper()
		select {
		case n := <-got:
			if n != i {
				t.Fatalf("followed index %d, want %d", n, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("follower did not get entry %d", i)
		}
	}
	expect(0)
	ff.mu.Lock()
	ff.failOn = func(op, path string) bool { return op == "rename" && strings.HasSuffix(path, ".jsonl") }
	ff.mu.Unlock()
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "1")}); err != nil {
		t.Fatal(err)
	}
	expect(1)
	if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
		t.Fatalf("flush: %v", err)
	}
	ff.mu.Lock()
	ff.failOn = nil
	ff.mu.Unlock()
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "2")}); err != nil {
		t.Fatal(err)
	}
	expect(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestInfoCountsPending: the listing entry says how many entries wait in
// the journal, and compaction brings that to zero.
func TestInfoCountsPending(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	if _, err := m.Append(ctx, k, [][]byte{entry(""), entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	in, err := m.Info(ctx, k)
	if err != nil || in.Pending != 2 || in.Entries != 2 {
		t.Fatalf("before flush: %+v %v", in, err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	in, err = m.Info(ctx, k)
	if err != nil || in.Pending != 0 || in.Entries != 2 {
		t.Fatalf("after flush: %+v %v", in, err)
	}
}

// TestListingReadsNoTranscriptTwice: once indexed, listing sessions no
// writer holds opens none of their transcripts; a file changed behind
// sessiond's back is read again.
func TestListingReadsNoTranscriptTwice(t *testing.T) {
	e := newEnv(t)
	ff := fstest.NewFaultFS(fsys.OS)
	e.fs = ff
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	var keys []layout.Key
	for i := 0; i < 5; i++ {
		k := newKey()
		keys = append(keys, k)
		path := e.lay.TranscriptPath(k)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, append(entry(uuid.NewString(), "n", fmt.Sprint(i)), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	opened := map[string]int{}
	ff.Trace(func(ev fstest.Event) {
		if ev.Op == fstest.OpOpen && strings.HasSuffix(ev.Path, ".jsonl") {
			mu.Lock()
			opened[ev.Path]++
			mu.Unlock()
		}
	})
	list := func() {
		t.Helper()
		infos, total, err := m.List(ctx, ListOptions{ProjectKey: project})
		if err != nil || total != 5 || len(infos) != 5 {
			t.Fatalf("list: %d %d %v", total, len(infos), err)
		}
	}
	list()
	mu.Lock()
	first := len(opened)
	opened = map[string]int{}
	mu.Unlock()
	if first != 5 {
		t.Fatalf("first listing opened %d transcripts, want the 5 to index", first)
	}
	list()
	mu.Lock()
	if len(opened) != 0 {
		t.Fatalf("second listing opened %v; the index should have served it", opened)
	}
	mu.Unlock()
	// A foreign append changes the stamp: that one file is read again.
	f, _ := os.OpenFile(e.lay.TranscriptPath(keys[2]), os.O_APPEND|os.O_WRONLY, 0)
	f.Write(append(entry(""), '\n'))
	f.Close()
	list()
	mu.Lock()
	defer mu.Unlock()
	if len(opened) != 1 || opened[e.lay.TranscriptPath(keys[2])] == 0 {
		t.Fatalf("after a foreign append the listing opened %v, want only the changed file", opened)
	}
	if in, _ := m.Info(ctx, keys[2]); in.Entries != 2 {
		t.Fatalf("the rescanned entry counts %d entries, want 2", in.Entries)
	}
}

// TestReadBatchesAndBigLines: a read crossing many batches, with lines from
// a few bytes to several MiB, from the canonical file and from the journal,
// comes back whole and in order; no batch goes over sendBytes unless it is
// one big line on its own, and big lines are never batched with others.
func TestReadBatchesAndBigLines(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	sizes := []int{10, 3 << 20, 200, bigLine, bigLine - 1, 5000}
	var want [][]byte
	appendAll := func(rounds int) {
		for r := 0; r < rounds; r++ {
			for i, n := range sizes {
				b := entry("", "i", fmt.Sprint(len(want)), "pad", strings.Repeat("y", n+i))
				want = append(want, b)
				if _, err := m.Append(ctx, k, [][]byte{b}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	appendAll(3)
	if _, err := m.Flush(ctx, k); err != nil { // these now come from the canonical file
		t.Fatal(err)
	}
	appendAll(2) // and these from the journal
	for i := 0; i < 3000; i++ {
		b := entry("", "i", fmt.Sprint(len(want)), "pad", strings.Repeat("z", 700))
		want = append(want, b)
		if _, err := m.Append(ctx, k, [][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]byte
	batches := 0
	err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
		batches++
		total := 0
		for _, e := range es {
			if e.Index != uint64(len(got)) {
				return fmt.Errorf("entry %d served as %d", len(got), e.Index)
			}
			got = append(got, bytes.Clone(e.Data))
			total += len(e.Data)
		}
		if len(es) > 1 && total > sendBytes {
			return fmt.Errorf("a batch of %d entries holds %d bytes, over %d", len(es), total, sendBytes)
		}
		for _, e := range es {
			if len(es) > 1 && len(e.Data) >= bigLine {
				return fmt.Errorf("a %d-byte line batched with %d others", len(e.Data), len(es)-1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("entry %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
		}
	}
	if batches < 10 {
		t.Fatalf("%d batches for %d entries: the batch limit did not apply", batches, len(want))
	}
}

// TestCheckJournalsServesBeforeReplay: after CheckJournals alone (what
// sessiond does before it serves) every acknowledged entry is read back
// from the journals and listed, with the canonical files not yet written;
// Replay then moves them there, counting ReplayPending down. A damaged
// journal is reported by CheckJournals and left out of the replay.
func TestCheckJournalsServesBeforeReplay(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	keys := []layout.Key{newKey(), newKey(), newKey(), newKey()}
	want := map[layout.Key][]string{}
	for i, k := range keys {
		for b := 0; b <= i; b++ {
			lines := [][]byte{entry(uuid.NewString(), "n", fmt.Sprint(b)), entry(uuid.NewString())}
			if _, err := m.Append(ctx, k, lines); err != nil {
				t.Fatal(err)
			}
			for _, l := range lines {
				want[k] = append(want[k], string(l))
			}
		}
	}
	crash(t, m)
	// Damage the last journal in its middle: corruption, not a torn tail.
	bad := keys[3]
	jp := e.lay.JournalPath(bad)
	data, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x55
	if err := os.WriteFile(jp, data, 0o600); err != nil {
		t.Fatal(err)
	}

	m = e.manager()
	defer closeManager(t, m)
	rep, todo, err := m.CheckJournals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 3 || len(todo) != 3 || len(rep.Failed) != 1 || !errdefs.Is(rep.Failed[0], errdefs.ErrCorrupt) {
		t.Fatalf("check: %+v, %d to replay", rep, len(todo))
	}
	if st := m.Stats(); st.ReplayPending != 3 || len(st.RecoveryErrors) != 1 || st.RecoveredSessions != 0 {
		t.Fatalf("stats after the check: %+v", st)
	}
	for _, k := range keys[:3] {
		if _, err := os.Stat(e.lay.TranscriptPath(k)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: transcript written before the replay (%v)", k, err)
		}
		var got []string
		err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
			for _, x := range es {
				got = append(got, string(x.Data))
			}
			return nil
		})
		if err != nil || strings.Join(got, "\n") != strings.Join(want[k], "\n") {
			t.Fatalf("%s read before the replay: %d entries (%v), want %d", k, len(got), err, len(want[k]))
		}
		info, err := m.Info(ctx, k)
		if err != nil || info.Entries != uint64(len(want[k])) {
			t.Fatalf("%s listed before the replay: %+v, %v", k, info, err)
		}
	}
	// An agent writes to a session before its turn in the replay: the new
	// entry follows the journaled ones.
	late := entry(uuid.NewString(), "n", "late")
	if _, err := m.Append(ctx, keys[1], [][]byte{late}); err != nil {
		t.Fatal(err)
	}
	want[keys[1]] = append(want[keys[1]], string(late))
	r := m.Replay(ctx, todo)
	if r.Sessions != 3 || len(r.Failed) != 0 {
		t.Fatalf("replay: %+v", r)
	}
	// The writers the reads and the append opened retired with their
	// turn: nobody else was using them.
	if st := m.Stats(); st.ReplayPending != 0 || st.RecoveredSessions != 3 || st.ActiveSessions != 0 {
		t.Fatalf("stats after the replay: %+v", st)
	}
	for _, k := range keys[:3] {
		if got := e.canonicalLines(k); strings.Join(got, "\n") != strings.Join(want[k], "\n") {
			t.Fatalf("%s after the replay: %d lines, want %d", k, len(got), len(want[k]))
		}
	}
}

// shrinkFS makes every transcript look 1 MiB longer to Stat on an open
// file than it is, as if another program had cut it during the read.
type shrinkFS struct{ fsys.FS }

func (s shrinkFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".jsonl") {
		return f, err
	}
	return shrinkFile{f}, nil
}

type shrinkFile struct{ fsys.File }

type grownInfo struct{ fs.FileInfo }

func (g grownInfo) Size() int64 { return g.FileInfo.Size() + 1<<20 }

func (f shrinkFile) Stat() (fs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return grownInfo{fi}, nil
}

// TestScanCanonicalShrunkFile: a writer that scans a transcript which
// turns out shorter than its size said (cut meanwhile) scans it again, so
// the listing summary, told the larger size, still finds the title in the
// tail window.
func TestScanCanonicalShrunkFile(t *testing.T) {
	e := newEnv(t)
	k := newKey()
	var b bytes.Buffer
	for i := 0; i < 200; i++ {
		b.Write(entry(uuid.NewString(), "p", strings.Repeat("x", 1000)))
		b.WriteByte('\n')
	}
	b.Write(transcript.CustomTitleLine(k.SessionID, "Shrunk"))
	b.WriteByte('\n')
	path := e.lay.TranscriptPath(k)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	e.fs = shrinkFS{fsys.OS}
	m := e.manager()
	defer closeManager(t, m)
	// A writer scans the file as it opens.
	if _, err := m.Append(context.Background(), k, [][]byte{entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	info, err := m.Info(context.Background(), k)
	if err != nil || info.Title != "Shrunk" || info.Entries != 202 {
		t.Fatalf("info %+v, %v; want the title and 202 entries", info, err)
	}
}

// blockRemoveFS holds the first Remove of path until release is closed.
type blockRemoveFS struct {
	fsys.FS
	path    string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (b *blockRemoveFS) Remove(name string) error {
	if name == b.path {
		held := false
		b.once.Do(func() { held = true })
		if held {
			close(b.entered)
			<-b.release
		}
	}
	return b.FS.Remove(name)
}

// TestNewWriterWaitsForTheRetiringOne: a writer retiring after the replay
// removes its empty journal once it is out of the sessions map. An append
// arriving in that instant starts a new writer, which must not open that
// journal before the old writer is done with it: entries written into a
// file that is then unlinked would be acknowledged and lost at the next
// crash.
func TestNewWriterWaitsForTheRetiringOne(t *testing.T) {
	e := newEnv(t)
	k := newKey()
	bfs := &blockRemoveFS{FS: fsys.OS, path: e.lay.JournalPath(k), entered: make(chan struct{}), release: make(chan struct{})}
	e.fs = bfs
	m := e.manager()
	ctx := context.Background()
	first, late := entry(uuid.NewString()), entry(uuid.NewString())
	if _, err := m.Append(ctx, k, [][]byte{first}); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() {
		_, err := m.flush(ctx, k, retireIfDone) // as the replay does
		flushed <- err
	}()
	<-bfs.entered // retired, and removing its empty journal
	appended := make(chan error, 1)
	go func() {
		_, err := m.Append(ctx, k, [][]byte{late})
		appended <- err
	}()
	// Without the wait the append is acknowledged at once, into the
	// journal about to be removed; with it, it waits for the release.
	select {
	case <-appended:
		appended <- nil
	case <-time.After(300 * time.Millisecond):
	}
	close(bfs.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	crash(t, m)

	m = e.manager()
	defer closeManager(t, m)
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
		for _, x := range es {
			got = append(got, string(x.Data))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{string(first), string(late)}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after the crash: %q, want %q", got, want)
	}
}
