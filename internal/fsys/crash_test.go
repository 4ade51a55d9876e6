package fsys_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// crashSeeds is how many random crashes each crash point gets on top of
// the synced-only one.
const crashSeeds = 8

// forEachCrash runs setup then op on a fresh CrashFS, crashing at every
// operation op makes, and calls check on the synced-only and the random
// results. done says whether op returned success before the crash.
func forEachCrash(t *testing.T, setup func(c *fstest.CrashFS), op func(c fsys.FS) error, check func(after *fstest.CrashFS, done bool) string) int {
	t.Helper()
	points := 0
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		setup(c)
		c.CrashAt(c.Ops() + i)
		done := op(c) == nil
		if crashed, _ := c.Crashed(); !crashed {
			if !done {
				t.Fatal("the operation failed without a crash")
			}
			return points
		}
		for seed := int64(-1); seed < crashSeeds; seed++ {
			var rng *rand.Rand
			if seed >= 0 {
				rng = rand.New(rand.NewSource(seed))
			}
			points++
			if msg := check(c.CrashClone(rng), done); msg != "" {
				_, ev := c.Crashed()
				t.Fatalf("crash at %v (seed %d): %s", ev, seed, msg)
			}
		}
	}
}

func read(c *fstest.CrashFS, p string) string {
	b, err := c.ReadFile(p)
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

func TestWriteFileAtomicCrash(t *testing.T) {
	setup := func(c *fstest.CrashFS) {
		if err := c.WriteFile("/d/target", []byte("old content\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := forEachCrash(t, setup, func(c fsys.FS) error {
		return fsys.WriteFileAtomic(c, "/d/target", ".target.tmp", 0o600, func(w io.Writer) error {
			for i := 0; i < 3; i++ {
				if _, err := fmt.Fprintf(w, "new part %d\n", i); err != nil {
					return err
				}
			}
			return nil
		})
	}, func(after *fstest.CrashFS, done bool) string {
		got := read(after, "/d/target")
		const newer = "new part 0\nnew part 1\nnew part 2\n"
		if got != newer && (done || got != "old content\n") {
			return fmt.Sprintf("target holds %q (done %v)", got, done)
		}
		return ""
	})
	t.Logf("crash points checked: %d", n)
}

func TestMkdirAllCrash(t *testing.T) {
	n := forEachCrash(t, func(c *fstest.CrashFS) {}, func(c fsys.FS) error {
		return fsys.MkdirAll(c, "/a/b/c", 0o700)
	}, func(after *fstest.CrashFS, done bool) string {
		if fi, err := after.Stat("/a/b/c"); done && (err != nil || !fi.IsDir()) {
			return fmt.Sprintf("MkdirAll returned but /a/b/c is gone: %v", err)
		}
		return ""
	})
	t.Logf("crash points checked: %d", n)
}

// moveTree is the tree the move tests move from /src/s: each file holds
// its own path.
var moveTree = []string{"/src/s/f1", "/src/s/sub/f2"}

func setupMoveTree(c *fstest.CrashFS) {
	for _, p := range moveTree {
		c.WriteFile(p, []byte(p), 0o600)
	}
}

// wholeTree reports whether the whole of moveTree is at root.
func wholeTree(c *fstest.CrashFS, root string) bool {
	for _, p := range moveTree {
		if read(c, strings.Replace(p, "/src/s", root, 1)) != p {
			return false
		}
	}
	return true
}

// Moving a tree never loses it: at every point one whole copy is reachable
// at the source or the target, and after Move returns it is at the target.
func TestMoveCrash(t *testing.T) {
	setup, whole := setupMoveTree, wholeTree
	n := forEachCrash(t, setup, func(c fsys.FS) error {
		return fsys.Move(c, "/src/s", "/trash/x/s")
	}, func(after *fstest.CrashFS, done bool) string {
		atSrc, atDst := whole(after, "/src/s"), whole(after, "/trash/x/s")
		switch {
		case done && !atDst:
			return fmt.Sprintf("Move returned but the target is not whole: %q", after.Walk("/"))
		case done && atSrc:
			return fmt.Sprintf("Move returned but the source is still there: %q", after.Walk("/"))
		case !atSrc && !atDst:
			return fmt.Sprintf("the tree is lost: %q", after.Walk("/"))
		}
		return ""
	})
	t.Logf("crash points checked: %d", n)
}

// crossDevice puts /src on a filesystem of its own: a rename from it to
// anywhere else fails with EXDEV, as a move from one filesystem to another
// does (the trash in the state folder, the transcripts under a bind-mounted
// ~/.claude).
func crossDevice(c fsys.FS) fsys.FS {
	return fstest.NewHookFS(c, fstest.Hooks{Before: func(call fstest.Call) error {
		if call.Name == "rename" && strings.HasPrefix(call.Path, "/src/") != strings.HasPrefix(call.NewPath, "/src/") {
			return &os.LinkError{Op: "rename", Old: call.Path, New: call.NewPath, Err: syscall.EXDEV}
		}
		return nil
	}})
}

// TestMoveAcrossFilesystemsCrash: a move across filesystems (a copy, then
// the source removed) loses nothing at any crash point, and the next Move
// of what is left, as a retried delete or restore does, finishes it: a
// partial copy never sits at the target, where it failed every retry with
// "file exists" (or was taken for a conflict, for a human).
func TestMoveAcrossFilesystemsCrash(t *testing.T) {
	setup, whole := setupMoveTree, wholeTree
	n := forEachCrash(t, setup, func(c fsys.FS) error {
		return fsys.Move(crossDevice(c), "/src/s", "/trash/x/s")
	}, func(after *fstest.CrashFS, done bool) string {
		atSrc, atDst := whole(after, "/src/s"), whole(after, "/trash/x/s")
		switch {
		case done && (!atDst || atSrc):
			return fmt.Sprintf("Move returned but the tree is not (only) at the target: %q", after.Walk("/"))
		case !atSrc && !atDst:
			return fmt.Sprintf("the tree is lost: %q", after.Walk("/"))
		}
		if _, err := after.Lstat("/src/s"); err == nil {
			if _, err := after.Lstat("/trash/x/s"); err != nil {
				// What a retry does: the source alone is there.
				if err := fsys.Move(crossDevice(after), "/src/s", "/trash/x/s"); err != nil {
					return fmt.Sprintf("the retried Move: %v (%q)", err, after.Walk("/"))
				}
				if !whole(after, "/trash/x/s") || slices.Contains(after.Walk("/"), "/src/s/") {
					return fmt.Sprintf("after the retried Move: %q", after.Walk("/"))
				}
			}
		}
		for _, p := range after.Walk("/") {
			if done && (strings.Contains(p, fsys.MovingSuffix) || strings.HasPrefix(p, fsys.MovedAside("/src/s"))) {
				return fmt.Sprintf("a staging copy or the source set aside is left: %q", after.Walk("/"))
			}
			if strings.HasPrefix(p, "/src/s/") && whole(after, "/trash/x/s") && !whole(after, "/src/s") {
				return fmt.Sprintf("a partial source beside the whole target, which a retry takes for a conflict: %q", after.Walk("/"))
			}
		}
		return ""
	})
	t.Logf("crash points checked: %d", n)
}

// TestMoveAcrossFilesystemsFaults: a copy that fails partway (a full disk
// at any write) leaves the source whole and nothing at the target, and
// the next Move finishes it.
func TestMoveAcrossFilesystemsFaults(t *testing.T) {
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		c.WriteFile("/src/s/f1", []byte("one"), 0o600)
		c.WriteFile("/src/s/sub/f2", []byte("two"), 0o600)
		ff := fstest.NewFaultFS(c)
		ff.Inject(fstest.Fault{Op: fstest.OpWrite, Nth: i, Err: syscall.ENOSPC, Short: true})
		err := fsys.Move(crossDevice(ff), "/src/s", "/trash/x/s")
		if len(ff.Fired()) == 0 { // no write left to fail
			if err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				t.Fatal("no write was failed")
			}
			return
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write %d failing: %v", i, err)
		}
		if _, err := c.Lstat("/trash/x/s"); err == nil || read(c, "/src/s/sub/f2") != "two" {
			t.Fatalf("write %d failing: %q", i, c.Walk("/"))
		}
		if err := fsys.Move(crossDevice(c), "/src/s", "/trash/x/s"); err != nil {
			t.Fatalf("write %d failing, then the retry: %v (%q)", i, err, c.Walk("/"))
		}
		if read(c, "/trash/x/s/f1") != "one" || read(c, "/trash/x/s/sub/f2") != "two" {
			t.Fatalf("after the retry: %q", c.Walk("/"))
		}
		for _, p := range c.Walk("/") {
			if strings.HasPrefix(p, "/src/s") || strings.Contains(p, fsys.MovingSuffix) {
				t.Fatalf("after the retry: %q", c.Walk("/"))
			}
		}
	}
}

func TestRemoveAllCrash(t *testing.T) {
	setup := func(c *fstest.CrashFS) {
		c.WriteFile("/d/x/f", []byte("f"), 0o600)
		c.WriteFile("/d/x/g/h", []byte("h"), 0o600)
	}
	n := forEachCrash(t, setup, func(c fsys.FS) error {
		return fsys.RemoveAll(c, "/d/x")
	}, func(after *fstest.CrashFS, done bool) string {
		if got := after.Walk("/d"); done && !slices.Equal(got, []string{"/d/"}) {
			return fmt.Sprintf("RemoveAll returned but %q remain", got)
		}
		return ""
	})
	t.Logf("crash points checked: %d", n)
}

// Every failure of WriteFileAtomic leaves the target as it was and no temp
// file behind.
func TestWriteFileAtomicFaults(t *testing.T) {
	for _, errno := range fstest.Errors {
		for i := int64(1); ; i++ {
			c := fstest.NewCrashFS()
			c.WriteFile("/d/target", []byte("old"), 0o600)
			ff := fstest.NewFaultFS(c)
			ff.Inject(fstest.Fault{Nth: i, Err: errno, Short: true})
			err := fsys.WriteFileAtomic(ff, "/d/target", ".t.tmp", 0o600, func(w io.Writer) error {
				_, err := w.Write([]byte("new"))
				return err
			})
			if len(ff.Fired()) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			if err == nil {
				t.Fatalf("%v at op %d: no error", errno, i)
			}
			got := read(c, "/d/target")
			// A failed folder sync comes after the rename: either is fine.
			if got != "old" && !(got == "new" && ff.Fired()[0].Op == fstest.OpSyncDir) {
				t.Fatalf("%v at %v: target %q", errno, ff.Fired()[0], got)
			}
			if w := c.Walk("/d"); slices.Contains(w, "/d/.t.tmp") && ff.Fired()[0].Op != fstest.OpRemove {
				t.Fatalf("%v at %v: temp file left: %q", errno, ff.Fired()[0], w)
			}
		}
	}
}

// Regression: MkdirAll trusted a folder that existed, although its entry
// may never have been made durable (the sync of its parent failed, its
// creator was killed first, or another program made it without syncing).
// Files synced below such a folder were lost with it at a power loss.
func TestMkdirAllSyncsExistingFolders(t *testing.T) {
	c := fstest.NewCrashFS()
	if err := c.Mkdir("/a", 0o700); err != nil { // never synced into "/"
		t.Fatal(err)
	}
	if err := fsys.MkdirAll(c, "/a/b", 0o700); err != nil {
		t.Fatal(err)
	}
	if w := c.CrashClone(nil).Walk("/"); !slices.Equal(w, []string{"/", "/a/", "/a/b/"}) {
		t.Fatalf("after a power loss: %q, want /a/b durable", w)
	}
}

// Remembering makes the syncs of existing folders happen once per
// process, and forgets folders that RemoveAll or Move take away.
func TestRememberingSyncsOnce(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	r := fsys.Remembering(ff)
	if fsys.Remembering(r) != r {
		t.Fatal("Remembering wrapped twice")
	}
	if err := fsys.MkdirAll(r, "/a/b/c", 0o700); err != nil {
		t.Fatal(err)
	}
	before := ff.OpsOf(fstest.OpSyncDir)
	if err := fsys.MkdirAll(r, "/a/b/c", 0o700); err != nil {
		t.Fatal(err)
	}
	if n := ff.OpsOf(fstest.OpSyncDir) - before; n != 0 {
		t.Fatalf("a second MkdirAll of a known folder synced %d folders", n)
	}
	if err := fsys.RemoveAll(r, "/a/b"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll(r, "/a/b/c", 0o700); err != nil {
		t.Fatalf("MkdirAll after RemoveAll: %v", err)
	}
	if w := c.CrashClone(nil).Walk("/a"); !slices.Equal(w, []string{"/a/", "/a/b/", "/a/b/c/"}) {
		t.Fatalf("after a power loss: %q", w)
	}
	// Without the memo every call syncs the whole path.
	before = ff.OpsOf(fstest.OpSyncDir)
	if err := fsys.MkdirAll(ff, "/a/b/c", 0o700); err != nil {
		t.Fatal(err)
	}
	if n := ff.OpsOf(fstest.OpSyncDir) - before; n != 3 {
		t.Fatalf("MkdirAll without the memo synced %d folders, want 3 (/, /a, /a/b)", n)
	}
}
