package fstest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
)

// TestHookFSSeesEveryOperation: Before and After see each operation of
// the filesystem and of its files once, in order, named, with its paths,
// its kind and (for a file's) the file; After gets the operation's error.
func TestHookFSSeesEveryOperation(t *testing.T) {
	c := NewCrashFS()
	var mu sync.Mutex
	var before, after []string
	var files []fsys.File
	var gotErr error
	h := NewHookFS(c, Hooks{
		Before: func(cl Call) error {
			mu.Lock()
			defer mu.Unlock()
			before = append(before, cl.Name+" "+cl.Path+" "+cl.NewPath+" "+cl.Op.String())
			if cl.File != nil {
				files = append(files, cl.File)
			}
			return nil
		},
		After: func(cl Call, err error) {
			mu.Lock()
			defer mu.Unlock()
			after = append(after, cl.Name)
			if cl.Name == "remove" {
				gotErr = err
			}
		},
	})
	must(t, h.Mkdir("/d", 0o700))
	f, err := h.OpenFile("/d/a", os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	_, err = f.Write([]byte("abc"))
	must(t, err)
	must(t, f.Sync())
	_, err = f.Seek(0, io.SeekStart)
	must(t, err)
	_, err = f.Read(make([]byte, 1))
	must(t, err)
	_, err = f.ReadAt(make([]byte, 1), 1)
	must(t, err)
	must(t, f.Truncate(2))
	_, err = f.Stat()
	must(t, err)
	must(t, f.Close())
	must(t, h.Rename("/d/a", "/d/b"))
	must(t, h.Link("/d/b", "/d/c"))
	_, err = h.Stat("/d/b")
	must(t, err)
	_, err = h.Lstat("/d/c")
	must(t, err)
	_, err = h.ReadDir("/d")
	must(t, err)
	must(t, h.SyncDir("/d"))
	removeErr := h.Remove("/d/none")
	want := []string{
		"mkdir /d  mkdir", "open /d/a  open", "write /d/a  write", "sync /d/a  sync", "seek /d/a  op(0)",
		"read /d/a  read", "readat /d/a  read", "truncate /d/a  truncate", "fstat /d/a  stat", "close /d/a  op(0)",
		"rename /d/a /d/b rename", "link /d/b /d/c link", "stat /d/b  stat", "lstat /d/c  stat",
		"readdir /d  readdir", "syncdir /d  syncdir", "remove /d/none  remove",
	}
	if !slices.Equal(before, want) {
		t.Errorf("Before saw\n%q\nwant\n%q", before, want)
	}
	if len(after) != len(want) {
		t.Errorf("After saw %q, want one call per operation", after)
	}
	for _, g := range files {
		if g != files[0] {
			t.Error("a file's operations name different files")
		}
	}
	if removeErr == nil || gotErr != removeErr {
		t.Errorf("After got %v, the remove returned %v", gotErr, removeErr)
	}
}

// TestHookFSBeforeFails: an error from Before is the operation's, and the
// operation does not run (nor After); SetHooks changes what later
// operations meet.
func TestHookFSBeforeFails(t *testing.T) {
	c := NewCrashFS()
	must(t, c.WriteFile("/a", []byte("x"), 0o600))
	injected := errors.New("injected")
	afters := 0
	h := NewHookFS(c, Hooks{
		Before: func(cl Call) error {
			if cl.Name == "rename" && cl.NewPath == "/b" {
				return injected
			}
			return nil
		},
		After: func(Call, error) { afters++ },
	})
	if err := h.Rename("/a", "/b"); err != injected {
		t.Fatalf("rename: %v, want the hook's error as it is", err)
	}
	if _, err := c.Stat("/b"); !errors.Is(err, fs.ErrNotExist) || afters != 0 {
		t.Fatalf("the failed rename ran (%v), or After saw it (%d)", err, afters)
	}
	h.SetHooks(Hooks{})
	must(t, h.Rename("/a", "/b"))
	if _, err := c.Stat("/b"); err != nil {
		t.Fatal(err)
	}
}

// TestHookFSStatOverride: the Stat hook changes what stat, lstat and a
// file's Stat report, and Resized keeps everything but the size.
func TestHookFSStatOverride(t *testing.T) {
	c := NewCrashFS()
	must(t, c.WriteFile("/a", []byte("12345"), 0o640))
	h := NewHookFS(c, Hooks{Stat: func(cl Call, fi fs.FileInfo) fs.FileInfo {
		if cl.Name == "fstat" {
			return Resized(fi, fi.Size()+100)
		}
		return fi
	}})
	if fi, err := h.Stat("/a"); err != nil || fi.Size() != 5 {
		t.Fatalf("stat: %v %v, want the real size", fi, err)
	}
	f, err := h.OpenFile("/a", os.O_RDONLY, 0)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() != 105 || fi.Name() != "a" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("fstat: size %d, name %q, mode %v; want 105, a, 0640", fi.Size(), fi.Name(), fi.Mode())
	}
}

// TestHookFSKeepsAttrs: a file of the real filesystem keeps its Chmod
// through a HookFS (fsys.KeepAttrs needs it); a file that has none gets
// none.
func TestHookFSKeepsAttrs(t *testing.T) {
	dir := t.TempDir()
	h := NewHookFS(fsys.OS, Hooks{})
	f, err := h.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	defer f.Close()
	fi, err := os.Stat(dir)
	must(t, err)
	must(t, fsys.KeepAttrs(f, fi))
	if got, err := os.Stat(filepath.Join(dir, "a")); err != nil || got.Mode().Perm() != fi.Mode().Perm() {
		t.Fatalf("mode %v (%v), want %v", got.Mode(), err, fi.Mode().Perm())
	}
	g, err := NewHookFS(NewCrashFS(), Hooks{}).OpenFile("/b", os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	defer g.Close()
	if _, ok := g.(interface{ Chmod(fs.FileMode) error }); ok {
		t.Fatal("a CrashFS file gained a Chmod")
	}
}
