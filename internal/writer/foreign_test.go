package writer

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// TestReplacedFileRewrittenLateIsKeptAside: a program opens the transcript
// before a compaction's rename and saves its own version into it (truncate,
// write) after the compaction looked at the replaced file. That version has
// no name any more; sessiond must neither splice a slice of it into the
// transcript as rescued lines (the bytes past the old end are the middle of
// the program's lines, not lines it appended) nor let it go unseen (a
// version shorter than the old file): it is kept under <state>/foreign, as
// when the rewrite lands before the compaction looks.
func TestReplacedFileRewrittenLateIsKeptAside(t *testing.T) {
	for _, c := range []struct {
		name   string
		longer bool
	}{{"longer than the replaced file", true}, {"shorter than the replaced file", false}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			k := newKey()
			path := e.lay.TranscriptPath(k)
			m := e.manager()
			defer closeManager(t, m)
			mine1 := chained(k, uuid.NewString(), "", "mine 1 "+strings.Repeat("x", 200))
			mine2 := chained(k, uuid.NewString(), "", "mine 2")
			mustAppendTo(t, m, k, mine1)
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			mustAppendTo(t, m, k, mine2)
			// The program loads the transcript before the compaction's
			// rename...
			old, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			oldFI, err := old.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			// ...and saves its version into it afterwards: its own short
			// line, then (longer) one whose middle the old file's end
			// falls in.
			theirs := []string{`{"type":"user","n":"theirs"}`}
			if c.longer {
				theirs = append(theirs, `{"type":"user","n":"theirs too `+strings.Repeat("y", 600)+`"}`)
			}
			version := strings.Join(theirs, "\n") + "\n"
			if cut := oldFI.Size(); c.longer != (int64(len(version)) > cut) || cut <= int64(len(theirs[0])+1) {
				t.Fatalf("the program's version is %d bytes, the replaced file %d: not what the case needs", len(version), cut)
			}
			if err := old.Truncate(0); err != nil {
				t.Fatal(err)
			}
			if _, err := old.WriteAt([]byte(version), 0); err != nil {
				t.Fatal(err)
			}
			// The next compaction looks at the replaced file again.
			mustAppendTo(t, m, k, chained(k, uuid.NewString(), "", "mine 3"))
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			got := e.canonicalLines(k)
			if len(got) != 3 || got[0] != mine1 || got[1] != mine2 {
				t.Fatalf("the transcript holds\n%s\nwant sessiond's 3 entries and nothing of the version no name leads to", strings.Join(got, "\n"))
			}
			kept, _ := filepath.Glob(filepath.Join(e.lay.StateDir, "foreign", k.ProjectKey, k.SessionID, "*.jsonl"))
			var copies []string
			for _, p := range kept {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				copies = append(copies, string(b))
			}
			if !slices.Contains(copies, version) {
				t.Fatalf("the program's version is not kept under <state>/foreign (copies: %q)", copies)
			}
		})
	}
}

// shrinkHookFS runs once, on the first read of target that reaches its
// end after it is armed: the moment a scan of the file is over and
// before anything else reads it.
type shrinkHookFS struct {
	*fstest.HookFS
	mu   sync.Mutex
	once func()
}

func newShrinkHookFS(inner fsys.FS, target string) *shrinkHookFS {
	f := &shrinkHookFS{}
	f.HookFS = fstest.NewHookFS(inner, fstest.Hooks{After: func(c fstest.Call, err error) {
		if c.Name != "readat" || c.Path != target || !errors.Is(err, io.EOF) {
			return
		}
		f.mu.Lock()
		fn := f.once
		f.once = nil
		f.mu.Unlock()
		if fn != nil {
			fn()
		}
	}})
	return f
}

func (f *shrinkHookFS) arm(fn func()) {
	f.mu.Lock()
	f.once = fn
	f.mu.Unlock()
}

// TestOpenWhileAnotherProgramRewritesShorter: another program's truncating
// save of a shorter version lands while a writer opens the session, right
// after its scan of the file and before its checksum of the file's tail.
// The open reads the file again; it must not fail the append that opened
// it with the end of a file that is no longer there ("read ...: EOF",
// which says nothing a client can act on), and the entry follows the
// program's version.
func TestOpenWhileAnotherProgramRewritesShorter(t *testing.T) {
	e := newEnv(t)
	k := newKey()
	path := e.lay.TranscriptPath(k)
	m := e.manager()
	mine1 := chained(k, uuid.NewString(), "", "mine 1 "+strings.Repeat("x", 300))
	mustAppendTo(t, m, k, mine1)
	closeManager(t, m)

	hook := newShrinkHookFS(fsys.OS, path)
	e.fs = hook
	m = e.manager()
	defer closeManager(t, m)
	theirs := `{"type":"user","n":"the other program's shorter version"}`
	fired := false
	hook.arm(func() {
		fired = true
		if err := os.WriteFile(path, []byte(theirs+"\n"), 0o600); err != nil {
			t.Error(err)
		}
	})
	mine2 := chained(k, uuid.NewString(), "", "mine 2")
	if _, err := m.Append(bg, k, [][]byte{[]byte(mine2)}); err != nil {
		t.Fatalf("append while another program rewrote the transcript shorter: %v", err)
	}
	if !fired {
		t.Fatal("the open never read the transcript to its end: the test rewrote nothing")
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if got, want := e.canonicalLines(k), []string{theirs, mine2}; !slices.Equal(got, want) {
		t.Fatalf("the transcript holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
