package trash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

var bg = context.Background()

// noWriters are sessions with no writer running and nothing logged: the
// files on disk are the whole session.
type noWriters struct {
	fs     fsys.FS
	layout layout.Layout
	moved  []layout.Key
}

func (noWriters) StopFamily(layout.Key) error    { return nil }
func (noWriters) CompactLogged(layout.Key) error { return nil }
func (noWriters) Logged(layout.Key) bool         { return false }

func (s *noWriters) Exists(k layout.Key) (bool, error) {
	_, err := s.fs.Lstat(s.layout.TranscriptPath(k))
	return err == nil, nil
}

func (noWriters) NotFound(k layout.Key) error {
	return errors.Join(errors.New(k.String()), errdefs.ErrNotFound)
}

func (s *noWriters) Moved(k layout.Key, _ bool) { s.moved = append(s.moved, k) }

// newTestTrash returns a trash in a temp folder, on the clock clk.
func newTestTrash(t *testing.T, clk clock.Clock) (*Trash, layout.Layout) {
	dir := t.TempDir()
	L := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	s := &noWriters{fs: fsys.OS, layout: L}
	return New(Config{Layout: L, FS: fsys.OS, Clock: clk, Logger: zaptest.NewLogger(t), Retention: time.Hour}, s), L
}

// writeSession puts a one-line transcript of k on disk.
func writeSession(t *testing.T, L layout.Layout, k layout.Key) {
	t.Helper()
	p := L.TranscriptPath(k)
	if err := fsys.MkdirAll(fsys.OS, filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.OS.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(`{"type":"user","uuid":"00000000-0000-4000-8000-000000000001"}` + "\n")); err != nil {
		t.Fatal(err)
	}
}

// A purge never takes a copy a restore of its session is working on.
func TestTrashPurgeSkipsBusySession(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	tr, L := newTestTrash(t, clk)
	k := layout.Key{ProjectKey: "-p", SessionID: "00000000-0000-4000-8000-0000000000aa"}
	writeSession(t, L, k)
	if _, err := tr.Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	unlock, err := tr.lockFamily(k, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tr.Purge(bg); n != 0 || err != nil {
		t.Fatalf("purge while the session is being restored: %d, %v; want it left", n, err)
	}
	unlock()
	if n, err := tr.Purge(bg); n != 1 || err != nil {
		t.Fatalf("purge once the restore is done: %d, %v", n, err)
	}
}

// While a delete or restore moves a session's files, and while an
// interrupted one waits to be finished, no writer of the session (its
// subagents' included) may start; other sessions may.
func TestAdmitRefusesBusyFamily(t *testing.T) {
	tr, _ := newTestTrash(t, clock.Real)
	k := layout.Key{ProjectKey: "-p", SessionID: "00000000-0000-4000-8000-0000000000ab"}
	sub := layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID, Subpath: "subagents/agent-a"}
	other := layout.Key{ProjectKey: k.ProjectKey, SessionID: "00000000-0000-4000-8000-0000000000ac"}
	unlock, err := tr.lockFamily(k, "deleted")
	if err != nil {
		t.Fatal(err)
	}
	var busy *BusyError
	if err := tr.Admit(sub); !errors.As(err, &busy) || busy.Why != "deleted" || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a subagent of a session being deleted: %v, want busy (unavailable)", err)
	}
	if _, err := tr.lockFamily(sub, "restored"); !errors.As(err, &busy) {
		t.Fatalf("a second lock of the family: %v, want busy", err)
	}
	if err := tr.Admit(other); err != nil {
		t.Fatalf("another session: %v", err)
	}
	unlock()
	if err := tr.Admit(k); err != nil {
		t.Fatalf("once unlocked: %v", err)
	}
	tr.setPending(&intent{Op: opDelete, ProjectKey: k.ProjectKey, SessionID: k.SessionID})
	if err := tr.Admit(k); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("with an interrupted delete pending: %v, want unavailable", err)
	}
}

// Finishing an interrupted move compares the two copies of a file that
// both exist; a failed read is not different content: the move fails with
// the disk's error and is finished on the next try, instead of leaving the
// session "for a human to merge".
func TestSameContentReadErrorIsNoConflict(t *testing.T) {
	c := fstest.NewCrashFS()
	c.WriteFile("/a", []byte("same"), 0o600)
	c.WriteFile("/b", []byte("same"), 0o600)
	ff := fstest.NewFaultFS(c)
	ff.CountReads(true)
	if same, err := sameContent(ff, "/a", "/b"); !same || err != nil {
		t.Fatalf("same files: %v %v", same, err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRead, Path: func(p string) bool { return p == "/b" }, Err: syscall.EIO})
	if same, err := sameContent(ff, "/a", "/b"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("with a failing read: same %v, err %v; want the read error", same, err)
	}
}

// TestLargeIntentIsRecovered: a restore of a session that has thousands
// of subagent transcripts again since its delete merges each of them, and
// writes an intent of megabytes; interrupted before its steps, it is read
// back and finished at the next start, not taken for damage (which left
// the session half restored, for a human). An intent over the bound is
// damage.
func TestLargeIntentIsRecovered(t *testing.T) {
	tr, L := newTestTrash(t, clock.Real)
	k := layout.Key{ProjectKey: "-p", SessionID: "00000000-0000-4000-8000-0000000000ac"}
	const subs = 2000
	write := func() {
		writeSession(t, L, k)
		for i := range subs {
			sub := k
			sub.Subpath = fmt.Sprintf("subagents/agent-%s-%06d", strings.Repeat("a", 120), i)
			writeSession(t, L, sub)
		}
	}
	write()
	if _, err := tr.Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	write()
	// RestoreCopies up to its intent, then a crash.
	entries, err := tr.entries(k)
	if err != nil || len(entries) != 1 {
		t.Fatalf("trash entries: %v %v", entries, err)
	}
	p := &restorePlan{}
	if err := tr.planRestore(p, L.ProjectDir(k.ProjectKey), entries, ""); err != nil {
		t.Fatal(err)
	}
	in := &intent{Op: opRestore, ProjectKey: k.ProjectKey, SessionID: k.SessionID, Moves: p.moves, Merges: p.merges, Entries: entries, All: true}
	if err := tr.writeIntent(in); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(in.path); err != nil || fi.Size() <= 1<<20 {
		t.Fatalf("the intent: %v, %d bytes; want over a MiB", err, fi.Size())
	}
	again := New(Config{Layout: L, FS: fsys.OS, Clock: clock.Real, Logger: zaptest.NewLogger(t), Retention: time.Hour}, &noWriters{fs: fsys.OS, layout: L})
	if failed, err := again.Recover(); err != nil || len(failed) != 0 {
		t.Fatalf("Recover: %v %v", failed, err)
	}
	if _, err := os.Stat(in.path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the intent is still there: %v", err)
	}
	if _, err := os.Stat(entries[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the trash entry is still there: %v", err)
	}
	sub := k
	sub.Subpath = fmt.Sprintf("subagents/agent-%s-%06d", strings.Repeat("a", 120), subs-1)
	if b, err := os.ReadFile(L.TranscriptPath(sub)); err != nil || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("a merged subagent transcript: %q %v; want its one line once", b, err)
	}

	big := filepath.Join(filepath.Dir(in.path), "00000000-0000-4000-8000-0000000000ad.json")
	if err := os.WriteFile(big, make([]byte, maxIntentBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := again.readIntent(big); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("an intent over the bound: %v, want it damaged", err)
	}
}

// TestRedoMoveRemovesTheSourceSetAside: a move across filesystems killed
// while it removed its source leaves the source under its set-aside name
// (its copy whole at the target); the retried step removes what is left
// there and keeps the copy.
func TestRedoMoveRemovesTheSourceSetAside(t *testing.T) {
	tr, L := newTestTrash(t, clock.Real)
	from := filepath.Join(L.ProjectDir("-p"), "00000000-0000-4000-8000-0000000000ae")
	to := filepath.Join(L.StateDir, "trash", "-p", "x", "00000000-0000-4000-8000-0000000000ae")
	for _, p := range []string{filepath.Join(fsys.MovedAside(from), "subagents", "a.jsonl"), filepath.Join(to, "subagents", "a.jsonl"), filepath.Join(to, "subagents", "b.jsonl")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.redoMove(from, to); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(fsys.MovedAside(from)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the source set aside is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(to, "subagents", "b.jsonl")); err != nil {
		t.Fatalf("the copy: %v", err)
	}
}
