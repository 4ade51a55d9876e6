package writer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// replacedHeld lists this process's descriptors of path's replaced files
// ("path (deleted)"), but for those in except (a test program's own).
func replacedHeld(t *testing.T, path string, except ...*os.File) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var held []string
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		if slices.ContainsFunc(except, func(f *os.File) bool { return int(f.Fd()) == fd }) {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && target == path+" (deleted)" {
			held = append(held, e.Name())
		}
	}
	return held
}

// leasesWork skips the test where the temp folder's filesystem takes no
// file leases.
func leasesWork(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "lease-probe")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.OS.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := fsys.Lease(f); err != nil {
		t.Skipf("no file leases here: %v", err)
	}
	fsys.Unlease(f)
}

// heldSession is a session with one compacted entry and one more
// journaled, so that its next flush replaces a non-empty file.
func heldSession(t *testing.T, e *env) (*Manager, layout.Key, []string) {
	t.Helper()
	leasesWork(t, t.TempDir())
	k := newKey()
	m := e.manager()
	mine := []string{chained(k, uuid.NewString(), "", "mine 1"), chained(k, uuid.NewString(), "", "mine 2")}
	mustAppendTo(t, m, k, mine[0])
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, k, mine[1])
	return m, k, mine
}

// hookedHeldSession is heldSession on a HookFS over the real files, for
// a test that acts at one of the compaction's file operations.
func hookedHeldSession(t *testing.T) (*env, *fstest.HookFS, *Manager, layout.Key, []string) {
	t.Helper()
	e := newEnv(t)
	hook := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
	e.fs = hook
	m, k, mine := heldSession(t, e)
	return e, hook, m, k, mine
}

// beforeLeaseOn runs fn once, just before the first lease taken on path
// (after the compaction copied the file, before it renames over it).
func beforeLeaseOn(path string, fn func()) fstest.Hooks {
	var once sync.Once
	return fstest.Hooks{Before: func(c fstest.Call) error {
		if c.Name == "lease" && c.Path == path {
			once.Do(fn)
		}
		return nil
	}}
}

// TestReplacedFileNobodyOpenedIsClosed: with no other program having the
// transcript open, a compaction's lease on the file it replaces stays
// whole, and the compaction closes that file before it returns: no
// descriptor (nor disk space) is held for it.
func TestReplacedFileNobodyOpenedIsClosed(t *testing.T) {
	e := newEnv(t)
	m, k, mine := heldSession(t, e)
	defer closeManager(t, m)
	path := e.lay.TranscriptPath(k)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if held := replacedHeld(t, path); len(held) > 0 {
		t.Fatalf("descriptors %v still hold the replaced transcript after the compaction", held)
	}
	if got := e.canonicalLines(k); !slices.Equal(got, mine) {
		t.Fatalf("the file holds %q, want %q", got, mine)
	}
}

// TestReplacedFileHeldWhileAnotherProgramHasItOpen: an agent has the
// transcript open across a compaction (no lease then): the replaced file
// is held, and the line the agent writes to it after the rename is
// rescued into the transcript.
func TestReplacedFileHeldWhileAnotherProgramHasItOpen(t *testing.T) {
	e := newEnv(t)
	m, k, mine := heldSession(t, e)
	defer closeManager(t, m)
	path := e.lay.TranscriptPath(k)
	old, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if held := replacedHeld(t, path, old); len(held) != 1 {
		t.Fatalf("%d descriptors of the replaced transcript, want the one held for the agent's late lines", len(held))
	}
	late := chained(k, uuid.NewString(), "", "agent, late")
	if _, err := old.WriteString(late + "\n"); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if want, got := append(slices.Clone(mine), late), e.canonicalLines(k); !slices.Equal(got, want) {
		t.Fatalf("the file holds\n%s\nwant the agent's late line rescued:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if held := replacedHeld(t, path); len(held) > 0 {
		t.Fatalf("descriptors %v still hold a replaced transcript after the next compaction", held)
	}
}

// TestReplacedFileOpenedDuringRenameIsHeld: an agent opens the transcript
// while the compaction holds its lease, before the rename: the open waits
// for the rename and reaches the old file, the broken lease makes the
// compaction hold that file, and the line the agent writes is rescued.
func TestReplacedFileOpenedDuringRenameIsHeld(t *testing.T) {
	e, hook, m, k, mine := hookedHeldSession(t)
	defer closeManager(t, m)
	path := e.lay.TranscriptPath(k)
	late := chained(k, uuid.NewString(), "", "agent, during the rename")
	wrote := make(chan error, 1)
	hook.SetHooks(fstest.Hooks{Before: func(c fstest.Call) error {
		if c.Name != "rename" || c.NewPath != path {
			return nil
		}
		hook.SetHooks(fstest.Hooks{})
		go func() {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				// Written after the compaction looked at the file
				// it replaced: only a file held can rescue it.
				time.Sleep(100 * time.Millisecond)
				_, err = f.WriteString(late + "\n")
				f.Close()
			}
			wrote <- err
		}()
		time.Sleep(100 * time.Millisecond) // the agent's open waits on the lease
		return nil
	}})
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	wantRescued(t, e, m, k, mine, late)
}

// TestReplacedFilesHeldAreBounded: with maxHeld replaced files held
// already (by other sessions), a compaction whose old file an agent has
// open rescues what the agent wrote to it during the rename and lets it
// go at once instead of holding one more.
func TestReplacedFilesHeldAreBounded(t *testing.T) {
	e, hook, m, k, mine := hookedHeldSession(t)
	defer closeManager(t, m)
	for range cap(m.env.HeldSlots) {
		m.env.HeldSlots <- struct{}{}
	}
	defer func() {
		for range cap(m.env.HeldSlots) {
			<-m.env.HeldSlots
		}
	}()
	path := e.lay.TranscriptPath(k)
	old, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	during := chained(k, uuid.NewString(), "", "agent, during the rename")
	hook.SetHooks(afterRenameOnto(path, func() {
		if _, err := old.WriteString(during + "\n"); err != nil {
			t.Error(err)
		}
	}))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if held := replacedHeld(t, path, old); len(held) > 0 {
		t.Fatalf("descriptors %v hold the replaced transcript with %d held already", held, cap(m.env.HeldSlots))
	}
	wantRescued(t, e, m, k, mine, during)
}

// TestReplacedFileAppendedBeforeTheLease: an agent appends (open, write,
// close) after the compaction copied the file and before its lease: the
// lease stays whole, and the line, read from the replaced file before it
// is closed, is rescued into the transcript.
func TestReplacedFileAppendedBeforeTheLease(t *testing.T) {
	e, hook, m, k, mine := hookedHeldSession(t)
	defer closeManager(t, m)
	path := e.lay.TranscriptPath(k)
	late := chained(k, uuid.NewString(), "", "agent, just before the lease")
	hook.SetHooks(beforeLeaseOn(path, func() { agentAppend(t, path, late) }))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if held := replacedHeld(t, path); len(held) > 0 {
		t.Fatalf("descriptors %v still hold the replaced transcript after the compaction", held)
	}
	wantRescued(t, e, m, k, mine, late)
}

// TestReplacedFileRewrittenBeforeTheLease: a program saves its own
// version over the transcript (open("w"), write, close) after the
// compaction copied it and before its lease: the lease stays whole, but
// the replaced file is no longer what was copied, so nothing of it is
// spliced in as rescued lines; it is kept under <state>/foreign, and
// closed.
func TestReplacedFileRewrittenBeforeTheLease(t *testing.T) {
	e, hook, m, k, mine := hookedHeldSession(t)
	defer closeManager(t, m)
	path := e.lay.TranscriptPath(k)
	version := `{"type":"user","n":"theirs"}` + "\n"
	hook.SetHooks(beforeLeaseOn(path, func() {
		if err := os.WriteFile(path, []byte(version), 0o600); err != nil {
			t.Error(err)
		}
	}))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if held := replacedHeld(t, path); len(held) > 0 {
		t.Fatalf("descriptors %v still hold the replaced transcript after the compaction", held)
	}
	if got := e.canonicalLines(k); !slices.Equal(got, mine) {
		t.Fatalf("the transcript holds\n%s\nwant sessiond's entries and nothing of the version no name leads to", strings.Join(got, "\n"))
	}
	kept, _ := filepath.Glob(filepath.Join(e.lay.StateDir, "foreign", k.ProjectKey, k.SessionID, "*.jsonl"))
	for _, p := range kept {
		if b, err := os.ReadFile(p); err == nil && string(b) == version {
			return
		}
	}
	t.Fatalf("the program's version is not kept under <state>/foreign (%d copies)", len(kept))
}

// wantRescued compacts k again and checks that its transcript holds mine
// and then the agent's line, rescued from the file a compaction replaced.
func wantRescued(t *testing.T, e *env, m *Manager, k layout.Key, mine []string, line string) {
	t.Helper()
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if want, got := append(slices.Clone(mine), line), e.canonicalLines(k); !slices.Equal(got, want) {
		t.Fatalf("the file holds\n%s\nwant the agent's line rescued:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
