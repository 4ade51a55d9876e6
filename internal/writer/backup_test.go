package writer

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// restoreState replaces the state folder of to with from's, as a backup
// restored with the daemon stopped does.
func restoreState(t *testing.T, from, to *fstest.CrashFS) {
	t.Helper()
	if err := fsys.RemoveAll(to, crashLayout.StateDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range from.Walk(crashLayout.StateDir) {
		if strings.HasSuffix(p, "/") {
			if err := fsys.MkdirAll(to, strings.TrimSuffix(p, "/"), 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := from.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// restoredAfterCompaction leaves c as a backup restore does: first is
// appended to k and the process killed (the entries in the journal only),
// the state folder backed up, the entries and one more without a uuid
// (no-uuid-2) compacted into the transcript, then the backup restored.
func restoredAfterCompaction(t *testing.T, c *fstest.CrashFS, k layout.Key, first []string) {
	t.Helper()
	m := newCrashManager(t, c, nil)
	if _, err := m.Append(bg, k, lineBytes(first...)); err != nil {
		t.Fatal(err)
	}
	abortManager(m) // killed: the entries are in the journal only
	backup := c.KillClone()
	m = newCrashManager(t, c, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(bg, k, lineBytes(`{"type":"user","k":"no-uuid-2"}`)); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m) // compacts all three into the transcript
	restoreState(t, backup, c)
}

// TestRestoredStateFolderStoresNothingTwice: the state folder is backed up
// while entries are only in the journal; sessiond then compacts them and
// takes more; the backup is restored with sessiond stopped. The restored
// log's entries are already in the transcript after the content they
// followed, so they are not appended again, those without a uuid
// included; what came after stays.
func TestRestoredStateFolderStoresNothingTwice(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(1, "")
	first := []string{`{"type":"user","k":"no-uuid-1"}`, `{"type":"user","uuid":"aaaaaaaa-0000-4000-8000-000000000001","k":"with-uuid"}`}
	restoredAfterCompaction(t, c, k, first)
	m := newCrashManager(t, c, nil)
	if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	closeManager(t, m)
	b, _ := c.ReadFile(crashLayout.TranscriptPath(k))
	want := strings.Join(append(first, `{"type":"user","k":"no-uuid-2"}`), "\n") + "\n"
	if string(b) != want {
		t.Fatalf("transcript after the restore:\n%s\nwant:\n%s", b, want)
	}
}

// TestRestoredStateFolderUnreadableTranscript: the same restore, and the
// read that compares the transcript with the restored log's entries fails
// (EIO; EMFILE alike). Taken for "the transcript does not hold them", the
// entries without a uuid were appended a second time. The session's
// recovery fails, reported, and the entries are neither appended again
// nor dropped: once the disk reads again they are found there.
func TestRestoredStateFolderUnreadableTranscript(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(3, "")
	first := []string{`{"type":"user","k":"no-uuid-1"}`, `{"type":"user","uuid":"aaaaaaaa-0000-4000-8000-000000000003","k":"with-uuid"}`}
	restoredAfterCompaction(t, c, k, first)

	var failed atomic.Int32
	h := fstest.NewHookFS(c, fstest.Hooks{Before: func(call fstest.Call) error {
		if call.Name == "readat" && call.Path == crashLayout.TranscriptPath(k) && inStack("holdsLogged") {
			failed.Add(1)
			return syscall.EIO
		}
		return nil
	}})
	m := newCrashManager(t, h, nil)
	rep, err := m.Recover(bg)
	if err != nil {
		t.Fatal(err)
	}
	if failed.Load() == 0 || len(rep.Failed) != 1 || !errors.Is(rep.Failed[0], syscall.EIO) {
		t.Fatalf("Recover with the comparing read failing (%d failed): %v", failed.Load(), rep.Failed)
	}
	closeManager(t, m)
	want := strings.Join(append(first, `{"type":"user","k":"no-uuid-2"}`), "\n") + "\n"
	if b, _ := c.ReadFile(crashLayout.TranscriptPath(k)); string(b) != want {
		t.Fatalf("transcript after the failed recovery:\n%s\nwant:\n%s", b, want)
	}
	if got := recoverAndRead(t, c, k); got != want {
		t.Fatalf("transcript once the disk reads again:\n%s\nwant:\n%s", got, want)
	}
}

// inStack reports whether a function whose name ends in name is on the
// calling goroutine's stack.
func inStack(name string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "."+name) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestForeignAppendAfterBaseStillReplayed: the check above must not take
// another program's lines after the base for the logged entries: when
// they differ, the logged entries follow them as before.
func TestForeignAppendAfterBaseStillReplayed(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(2, "")
	m := newCrashManager(t, c, nil)
	if _, err := m.Append(bg, k, lineBytes(`{"type":"user","k":"logged"}`)); err != nil {
		t.Fatal(err)
	}
	abortManager(m)
	if err := c.WriteFile(crashLayout.TranscriptPath(k), []byte(`{"type":"user","k":"foreign"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := recoverAndRead(t, c, k)
	if want := `{"type":"user","k":"foreign"}` + "\n" + `{"type":"user","k":"logged"}` + "\n"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
}

func lineBytes(lines ...string) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = []byte(l)
	}
	return out
}
