package writer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

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

// Errors of a failing disk reach callers with their kind, and the right
// one: a fork whose temp file cannot be written or whose source cannot be
// read (without a kind the server answers Unknown), a flush of a session
// whose file cannot be looked at (not "not found"), a restore that cannot
// look for an existing session (not "already exists").
func TestDiskErrorsKeepTheirKind(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	mustAppendTo(t, m, kSrc, line(kSrc, "00000000-0000-4000-8000-000000000001", "s1"))
	if _, err := m.Flush(bg, kSrc); err != nil {
		t.Fatal(err)
	}
	isTmp := func(p string) bool { return strings.HasSuffix(p, ".tmp") }
	ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: isTmp, Err: syscall.ENOSPC})
	if _, err := m.Repairs().Fork(bg, kSrc, "", "", kFork.SessionID); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Errorf("fork onto a full disk: %v, want no space", err)
	}
	ff.Clear()
	ff.CountReads(true)
	canon := func(p string) bool { return p == crashLayout.TranscriptPath(kSrc) }
	ff.Inject(fstest.Fault{Op: fstest.OpRead, Path: canon, Err: syscall.EIO})
	if _, err := m.Repairs().Fork(bg, kSrc, "", "", "6a4c8e2a-0000-4000-8000-000000000009"); !errors.Is(err, errdefs.ErrIO) {
		t.Errorf("fork of an unreadable source: %v, want i/o error", err)
	}
	ff.Clear()
	// A session with no live writer, whose file cannot be looked at.
	k := fixedKey(9, "")
	c.WriteFile(crashLayout.TranscriptPath(k), []byte(line(k, "", "x")+"\n"), 0o600)
	ff.Inject(fstest.Fault{Op: fstest.OpStat, Err: syscall.EIO, Sticky: true})
	if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrIO) {
		t.Errorf("flush with a failing lstat: %v, want i/o error", err)
	}
	if err := m.Trash().Restore(bg, kDel); errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("restore with a failing lstat: %v, must not claim the session exists", err)
	}
	ff.Clear()
}
