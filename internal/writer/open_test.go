package writer

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/transcript"
)

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

// shrinkFS makes every transcript look 1 MiB longer to Stat on an open
// file than it is, as if another program had cut it during the read.
func shrinkFS(inner fsys.FS) *fstest.HookFS {
	return fstest.NewHookFS(inner, fstest.Hooks{Stat: func(c fstest.Call, fi fs.FileInfo) fs.FileInfo {
		if c.Name != "fstat" || !strings.HasSuffix(c.Path, ".jsonl") {
			return fi
		}
		return fstest.Resized(fi, fi.Size()+1<<20)
	}})
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
	e.fs = shrinkFS(fsys.OS)
	m := e.manager()
	defer closeManager(t, m)
	// A writer scans the file as it opens.
	if _, err := m.Append(context.Background(), k, [][]byte{entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	info, err := catalogOf(m).Info(context.Background(), k)
	if err != nil || info.Title != "Shrunk" || info.Entries != 202 {
		t.Fatalf("info %+v, %v; want the title and 202 entries", info, err)
	}
}

// Opening many sessions of one project listed the project's folder at every
// open (a project of 1,000 sessions: 1,000 listings of 1,000 names as its
// agents started). Each folder is now listed once per Manager, and a temp
// file a crash left is still removed when its own session opens, even
// after another session's open listed the folder.
func TestStaleTempsListedOncePerFolder(t *testing.T) {
	c := fstest.NewCrashFS()
	a, b := fixedKey(1, ""), fixedKey(2, "")
	dir := filepath.Dir(crashLayout.TranscriptPath(a))
	stale := filepath.Join(dir, "."+a.SessionID+".compact-12345678.tmp")
	c.WriteFile(stale, []byte("half a compaction"), 0o600)
	m := newCrashManager(t, c, nil)
	defer closeManager(t, m)
	listings := map[string]int{}
	c.CountReads(true)
	c.Trace(func(ev fstest.Event) {
		if ev.Op == fstest.OpReadDir {
			listings[ev.Path]++
		}
	})
	for i := 3; i < 23; i++ {
		if _, err := m.Append(bg, fixedKey(i, ""), [][]byte{[]byte(line(fixedKey(i, ""), uuid.NewString(), "x"))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Append(bg, b, [][]byte{[]byte(line(b, uuid.NewString(), "b"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(stale); err != nil {
		t.Fatalf("another session's open removed a's temp file: %v", err)
	}
	if _, err := m.Append(bg, a, [][]byte{[]byte(line(a, uuid.NewString(), "a"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a's temp file left by a crash is still there after a opened: %v", err)
	}
	if n := listings[dir]; n != 1 {
		t.Fatalf("the project folder %s was listed %d times for 22 opens, want once (listings: %v)", dir, n, listings)
	}
}
