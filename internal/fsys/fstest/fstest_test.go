package fstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, c fsys.FS, name string, data string, sync bool) fsys.File {
	t.Helper()
	f, err := c.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	must(t, err)
	if data != "" {
		_, err = f.Write([]byte(data))
		must(t, err)
	}
	if sync {
		must(t, f.Sync())
	}
	return f
}

func content(t *testing.T, c *CrashFS, name string) (string, bool) {
	t.Helper()
	b, err := c.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	must(t, err)
	return string(b), true
}

func TestSyncedDataSurvivesUnsyncedDoesNot(t *testing.T) {
	c := NewCrashFS()
	must(t, c.Mkdir("/d", 0o700))
	must(t, c.SyncDir("/"))
	f := create(t, c, "/d/a", "synced", true)
	must(t, c.SyncDir("/d"))
	f.Write([]byte(" and not"))
	g := create(t, c, "/d/b", "file synced, name not", true) // no SyncDir after it
	defer g.Close()

	after := c.CrashClone(nil)
	if got, _ := content(t, after, "/d/a"); got != "synced" {
		t.Fatalf("a after crash: %q, want only the synced part", got)
	}
	if _, ok := content(t, after, "/d/b"); ok {
		t.Fatal("b survived although its folder entry was never synced")
	}
	// The live filesystem still sees everything.
	if got, _ := content(t, c, "/d/a"); got != "synced and not" {
		t.Fatalf("live a: %q", got)
	}
	// A synced name with unsynced data is an empty file (ALICE's
	// zero-length file after a rename without fsync).
	h := create(t, c, "/d/c", "data never synced", false)
	defer h.Close()
	must(t, c.SyncDir("/d"))
	if got, ok := content(t, c.CrashClone(nil), "/d/c"); !ok || got != "" {
		t.Fatalf("c: %q %v, want an empty file", got, ok)
	}
	f.Close()
}

func TestTruncateAndAppendFlags(t *testing.T) {
	c := NewCrashFS()
	f := create(t, c, "/f", "0123456789", true)
	must(t, c.SyncDir("/"))
	must(t, f.Truncate(4))
	if after, _ := content(t, c.CrashClone(nil), "/f"); after != "0123456789" {
		t.Fatalf("unsynced truncate survived: %q", after)
	}
	must(t, f.Sync())
	if after, _ := content(t, c.CrashClone(nil), "/f"); after != "0123" {
		t.Fatalf("synced truncate lost: %q", after)
	}
	f.Close()

	a, err := c.OpenFile("/f", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	a.Seek(0, io.SeekStart)
	a.Write([]byte("xy"))
	if got, _ := content(t, c, "/f"); got != "0123xy" {
		t.Fatalf("O_APPEND wrote at %q", got)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("read on a write-only handle: %v", err)
	}
	a.Close()
	if _, err := a.Write([]byte("z")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	tr, err := c.OpenFile("/f", os.O_RDWR|os.O_TRUNC, 0)
	must(t, err)
	tr.Close()
	if got, _ := content(t, c, "/f"); got != "" {
		t.Fatalf("O_TRUNC left %q", got)
	}
	if _, err := c.OpenFile("/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on an existing file: %v", err)
	}
	if _, err := c.OpenFile("/nope", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	r, err := c.OpenFile("/f", os.O_RDONLY, 0)
	must(t, err)
	if _, err := r.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write on a read-only handle: %v", err)
	}
	must(t, r.Sync()) // fsync through a read-only descriptor is allowed
	r.Close()
}

func TestRenameNeedsFolderSync(t *testing.T) {
	c := NewCrashFS()
	create(t, c, "/target", "old", true).Close()
	must(t, c.SyncDir("/"))
	create(t, c, "/tmp", "new", true).Close()
	must(t, c.Rename("/tmp", "/target"))
	if got, _ := content(t, c.CrashClone(nil), "/target"); got != "old" {
		t.Fatalf("rename survived without a folder sync: %q", got)
	}
	must(t, c.SyncDir("/"))
	after := c.CrashClone(nil)
	if got, _ := content(t, after, "/target"); got != "new" {
		t.Fatalf("synced rename lost: %q", got)
	}
	if _, ok := content(t, after, "/tmp"); ok {
		t.Fatal("the temp name survived the synced rename")
	}
	if got := after.Walk("/"); !slices.Equal(got, []string{"/", "/target"}) {
		t.Fatalf("tree %q", got)
	}
}

// A rename between folders is two entry changes: only syncing both makes
// it whole. Syncing the target first (as fsys.Move does) never loses the
// file.
func TestRenameAcrossFolders(t *testing.T) {
	setup := func() *CrashFS {
		c := NewCrashFS()
		must(t, c.Mkdir("/a", 0o700))
		must(t, c.Mkdir("/b", 0o700))
		must(t, c.SyncDir("/"))
		create(t, c, "/a/f", "data", true).Close()
		must(t, c.SyncDir("/a"))
		must(t, c.Rename("/a/f", "/b/f"))
		return c
	}
	exists := func(c *CrashFS, p string) bool { _, ok := content(t, c, p); return ok }

	c := setup()
	must(t, c.SyncDir("/b"))
	after := c.CrashClone(nil)
	if !exists(after, "/a/f") || !exists(after, "/b/f") {
		t.Fatalf("target synced only: want the file in both folders, got %q", after.Walk("/"))
	}
	c = setup()
	must(t, c.SyncDir("/a"))
	after = c.CrashClone(nil)
	if exists(after, "/a/f") || exists(after, "/b/f") {
		t.Fatalf("source synced only: want the file lost, got %q", after.Walk("/"))
	}
	c = setup()
	must(t, c.SyncDir("/b"))
	must(t, c.SyncDir("/a"))
	if got := c.CrashClone(nil).Walk("/"); !slices.Equal(got, []string{"/", "/a/", "/b/", "/b/f"}) {
		t.Fatalf("both synced: %q", got)
	}
}

// A random crash keeps both halves of an unsynced rename between folders,
// or neither.
func TestRandomCrashRenameAcrossFoldersIsAtomic(t *testing.T) {
	c := NewCrashFS()
	c.WriteFile("/a/f", []byte("x"), 0o600)
	c.WriteFile("/b/keep", nil, 0o600)
	must(t, c.Rename("/a/f", "/b/f"))
	c.Crash()
	seen := map[string]bool{}
	for seed := int64(0); seed < 100; seed++ {
		w := c.CrashClone(rand.New(rand.NewSource(seed))).Walk("/")
		a, b := slices.Contains(w, "/a/f"), slices.Contains(w, "/b/f")
		if a == b {
			t.Fatalf("seed %d: the file is in both folders or in none: %q", seed, w)
		}
		seen[fmt.Sprint(a)] = true
	}
	if len(seen) != 2 {
		t.Fatalf("outcomes %v, want both", seen)
	}
}

// Syncing either folder of a folder's rename makes the whole rename
// durable: a folder never has two parents.
func TestFolderRenameIsWhole(t *testing.T) {
	for _, synced := range []string{"/a", "/b"} {
		c := NewCrashFS()
		c.WriteFile("/a/d/f", []byte("x"), 0o600)
		c.WriteFile("/b/keep", nil, 0o600)
		must(t, c.Rename("/a/d", "/b/d"))
		must(t, c.SyncDir(synced))
		if got := c.CrashClone(nil).Walk("/"); !slices.Equal(got, []string{"/", "/a/", "/b/", "/b/d/", "/b/d/f", "/b/keep"}) {
			t.Fatalf("after SyncDir(%s): %q", synced, got)
		}
	}
}

func TestFolderSemantics(t *testing.T) {
	c := NewCrashFS()
	must(t, c.Mkdir("/d", 0o700))
	if err := c.Mkdir("/d", 0o700); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir twice: %v", err)
	}
	if err := c.Mkdir("/x/y", 0o700); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("mkdir without parent: %v", err)
	}
	for _, n := range []string{"c", "a", "b"} {
		create(t, c, "/d/"+n, n, false).Close()
	}
	ents, err := c.ReadDir("/d")
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("ReadDir %q, want sorted", names)
	}
	if err := c.Remove("/d"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove of a full folder: %v", err)
	}
	if err := c.Link("/d/a", "/d/b"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("link over a file: %v", err)
	}
	must(t, c.Link("/d/a", "/d/a2"))
	must(t, c.Remove("/d/a"))
	if got, _ := content(t, c, "/d/a2"); got != "a" {
		t.Fatalf("link lost the file: %q", got)
	}
	fi, err := c.Stat("/d/a2")
	must(t, err)
	if fi.Size() != 1 || fi.Mode().Perm() != 0o600 || fi.IsDir() {
		t.Fatalf("stat: size %d mode %v", fi.Size(), fi.Mode())
	}
	if fi, err := c.Lstat("/d"); err != nil || !fi.IsDir() {
		t.Fatalf("lstat folder: %v %v", fi, err)
	}
	if err := c.Rename("/d", "/d/sub"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("rename into itself: %v", err)
	}
	if err := c.Rename("/d/b", "/d"); err == nil {
		t.Fatal("rename of a file over a folder succeeded")
	}
	var le *os.LinkError
	if err := c.Rename("/missing", "/x"); !errors.As(err, &le) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("rename error %T %v, want *os.LinkError ENOENT", err, err)
	}
	// A renamed folder keeps its content; an open handle keeps its file.
	h, err := c.OpenFile("/d/b", os.O_RDONLY, 0)
	must(t, err)
	must(t, c.Rename("/d", "/e"))
	must(t, c.Remove("/e/b"))
	b, err := io.ReadAll(h)
	must(t, err)
	if string(b) != "b" {
		t.Fatalf("handle of an unlinked file reads %q", b)
	}
	h.Close()
	if got := c.Walk("/"); !slices.Equal(got, []string{"/", "/e/", "/e/a2", "/e/c"}) {
		t.Fatalf("tree %q", got)
	}
}

func TestCrashAtStopsEverything(t *testing.T) {
	c := NewCrashFS()
	f := create(t, c, "/f", "one", true) // open, write, sync: ops 1-3
	must(t, c.SyncDir("/"))              // 4
	c.CrashAt(6)
	if _, err := f.Write([]byte(" two")); err != nil { // 5 runs
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, ErrCrashed) { // 6 does not
		t.Fatalf("op 6: %v", err)
	}
	if crashed, ev := c.Crashed(); !crashed || ev.N != 6 || ev.Op != OpSync {
		t.Fatalf("Crashed: %v %v", crashed, ev)
	}
	for name, err := range map[string]error{
		"mkdir": c.Mkdir("/x", 0o700),
		"read":  func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err }(),
		"stat":  func() error { _, err := c.Stat("/f"); return err }(),
		"seek":  func() error { _, err := f.Seek(0, 0); return err }(),
	} {
		if !errors.Is(err, ErrCrashed) {
			t.Errorf("%s after the crash: %v", name, err)
		}
	}
	if c.Ops() != 6 {
		t.Fatalf("ops counted %d, want 6 (nothing after the crash)", c.Ops())
	}
	after := c.CrashClone(nil)
	if got, _ := content(t, after, "/f"); got != "one" {
		t.Fatalf("after: %q", got)
	}
	// The new filesystem works; the old handle does not reach it.
	g, err := after.OpenFile("/f", os.O_RDWR, 0)
	must(t, err)
	g.Close()
	if _, err := f.Write([]byte("x")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("old handle after crash: %v", err)
	}
	if got, _ := content(t, after, "/f"); got != "one" {
		t.Fatalf("old handle wrote into the new filesystem: %q", got)
	}
}

func TestKillCloneKeepsUnsyncedUntilPowerLoss(t *testing.T) {
	c := NewCrashFS()
	create(t, c, "/f", "synced", true).Close()
	must(t, c.SyncDir("/"))
	f, _ := c.OpenFile("/f", os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("+cached"))
	create(t, c, "/g", "new", true).Close()
	c.Crash()

	k := c.KillClone()
	if got, _ := content(t, k, "/f"); got != "synced+cached" {
		t.Fatalf("after kill: %q, the page cache survives a killed process", got)
	}
	if _, ok := content(t, k, "/g"); !ok {
		t.Fatal("after kill: /g gone")
	}
	if _, err := k.Stat("/f"); err != nil {
		t.Fatalf("the clone is not crashed: %v", err)
	}
	p := k.CrashClone(nil)
	if got, _ := content(t, p, "/f"); got != "synced" {
		t.Fatalf("power loss after kill: %q", got)
	}
	if _, ok := content(t, p, "/g"); ok {
		t.Fatal("power loss after kill: /g's entry was never synced")
	}
	// Syncing in the new process makes what it saw durable.
	h, _ := k.OpenFile("/f", os.O_RDONLY, 0)
	must(t, h.Sync())
	h.Close()
	if got, _ := content(t, k.CrashClone(nil), "/f"); got != "synced+cached" {
		t.Fatalf("synced by the next process: %q", got)
	}
}

// Random crashes keep prefixes of the unsynced writes, torn anywhere, and
// subsets of the unsynced entry changes; over many seeds every kind of
// outcome shows up, and nothing synced is ever lost.
func TestRandomCrashOutcomes(t *testing.T) {
	c := NewCrashFS()
	f := create(t, c, "/f", "AAAA", true)
	must(t, c.SyncDir("/"))
	f.Write([]byte("BBBBBBBB"))
	f.Write([]byte("CCCC"))
	create(t, c, "/n1", "", false).Close()
	create(t, c, "/n2", "", false).Close()
	c.Crash()

	outcomes := map[string]bool{}
	names := map[string]bool{}
	for seed := int64(0); seed < 400; seed++ {
		after := c.CrashClone(rand.New(rand.NewSource(seed)))
		got, _ := content(t, after, "/f")
		if !strings.HasPrefix(got, "AAAA") {
			t.Fatalf("seed %d: synced data lost: %q", seed, got)
		}
		rest := got[4:]
		// Every byte is what was written there or a hole's zero.
		const full = "BBBBBBBBCCCC"
		if len(rest) > len(full) {
			t.Fatalf("seed %d: impossible content %q", seed, got)
		}
		for i := range len(rest) {
			if rest[i] != full[i] && rest[i] != 0 {
				t.Fatalf("seed %d: impossible content %q", seed, got)
			}
		}
		outcomes[classify(rest)] = true
		_, n1 := content(t, after, "/n1")
		_, n2 := content(t, after, "/n2")
		names[string(rune('0'+b2i(n1)))+string(rune('0'+b2i(n2)))] = true
	}
	for _, want := range []string{"none", "all", "torn", "zeros"} {
		if !outcomes[want] {
			t.Errorf("no seed produced a %q outcome (got %v)", want, outcomes)
		}
	}
	if len(names) != 4 {
		t.Errorf("unsynced entries: saw combinations %v, want all four", names)
	}
	// The same seed gives the same crash.
	a := c.CrashClone(rand.New(rand.NewSource(7)))
	b := c.CrashClone(rand.New(rand.NewSource(7)))
	fa, _ := a.ReadFile("/f")
	fb, _ := b.ReadFile("/f")
	if !bytes.Equal(fa, fb) || !slices.Equal(a.Walk("/"), b.Walk("/")) {
		t.Fatal("CrashClone is not deterministic for a seed")
	}
}

func classify(rest string) string {
	switch {
	case rest == "":
		return "none"
	case rest == "BBBBBBBBCCCC":
		return "all"
	case strings.Contains(rest, "\x00"):
		return "zeros"
	case rest != "BBBBBBBB":
		return "torn"
	}
	return "prefix"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestFaultFS(t *testing.T) {
	c := NewCrashFS()
	ff := NewFaultFS(c)
	f := create(t, ff, "/f", "abcd", true)
	if ff.Ops() != 3 || ff.OpsOf(OpWrite) != 1 {
		t.Fatalf("counted %d ops, %d writes", ff.Ops(), ff.OpsOf(OpWrite))
	}

	ff.Inject(Fault{Op: OpWrite, Nth: 2, Err: syscall.ENOSPC, Short: true})
	if _, err := f.Write([]byte("12")); err != nil {
		t.Fatalf("first write: %v", err)
	}
	n, err := f.Write([]byte("345678"))
	if !errors.Is(err, syscall.ENOSPC) || n != 3 {
		t.Fatalf("short write: n=%d err=%v, want 3 bytes and ENOSPC", n, err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != "/f" {
		t.Fatalf("error %T %v, want a *fs.PathError naming the file", err, err)
	}
	if got, _ := content(t, c, "/f"); got != "abcd12345" {
		t.Fatalf("after the short write: %q", got)
	}
	if _, err := f.Write([]byte("9")); err != nil {
		t.Fatalf("a fault fires once unless sticky: %v", err)
	}
	if got := ff.Fired(); len(got) != 1 || got[0].Op != OpWrite {
		t.Fatalf("Fired: %v", got)
	}

	ff.Inject(Fault{Path: func(p string) bool { return strings.HasSuffix(p, ".wal") }, Err: syscall.EROFS, Sticky: true})
	if err := ff.Mkdir("/x.wal", 0o700); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("path fault: %v", err)
	}
	if err := ff.Rename("/f", "/y.wal"); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("sticky path fault on rename's new name: %v", err)
	}
	if err := ff.Mkdir("/ok", 0o700); err != nil {
		t.Fatalf("other paths are fine: %v", err)
	}
	ff.Clear()
	if err := ff.Rename("/f", "/y.wal"); err != nil {
		t.Fatalf("after Clear: %v", err)
	}

	// The Nth operation of any kind, then a dead disk.
	before := ff.Ops()
	ff.Inject(Fault{Nth: 2, Sticky: true})
	if err := ff.Mkdir("/a", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ff.SyncDir("/"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("2nd op: %v, want EIO", err)
	}
	if _, err := ff.OpenFile("/y.wal", os.O_RDONLY, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sticky: %v", err)
	}
	if _, err := ff.Stat("/"); err != nil {
		t.Fatalf("reads are not counted unless asked: %v", err)
	}
	if ff.Ops()-before != 3 {
		t.Fatalf("counted %d ops, want 3", ff.Ops()-before)
	}
	ff.Clear()
	ff.CountReads(true)
	ff.Inject(Fault{Op: OpRead})
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read fault: %v", err)
	}
	f.Close()
}

// A sync that fails and loses the unsynced writes leaves them readable but
// never durable, even after a later successful sync.
func TestFaultLoseUnsynced(t *testing.T) {
	c := NewCrashFS()
	ff := NewFaultFS(c)
	f := create(t, ff, "/j", "head", true)
	must(t, ff.SyncDir("/"))
	f.Write([]byte("+lost"))
	ff.Inject(Fault{Op: OpSync, LoseUnsynced: true})
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v", err)
	}
	f.Write([]byte("+later"))
	must(t, f.Sync())
	if got, _ := content(t, c, "/j"); got != "head+lost+later" {
		t.Fatalf("visible: %q", got)
	}
	if got, _ := content(t, c.CrashClone(nil), "/j"); got != "head\x00\x00\x00\x00\x00+later" {
		t.Fatalf("durable: %q, want the lost bytes as a hole", got)
	}
	f.Close()
}

// A random crash can also keep any subset of a write's 512-byte sectors:
// holes in the middle of one write, not only at its ends.
func TestRandomCrashSectorHoles(t *testing.T) {
	c := NewCrashFS()
	f := create(t, c, "/f", "", true)
	must(t, c.SyncDir("/"))
	data := bytes.Repeat([]byte("x"), 4*512)
	f.Write(data)
	c.Crash()
	for seed := int64(0); seed < 200; seed++ {
		got, _ := c.CrashClone(rand.New(rand.NewSource(seed))).ReadFile("/f")
		if len(got) != len(data) {
			continue
		}
		// Data, then a hole of whole sectors, then data again.
		s := string(got)
		if first := strings.IndexByte(s, 0); first > 0 && first%512 == 0 && strings.Contains(s[first:], "x") {
			return
		}
	}
	t.Fatal("no seed left a hole of sectors inside a write")
}

// TestCrashFSLease: a lease is refused while another handle is open on
// the file, stays whole across a rename over its name and is broken by an
// open of the file.
func TestCrashFSLease(t *testing.T) {
	c := NewCrashFS()
	if err := c.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	open := func(name string, flag int) fsys.File {
		f, err := c.OpenFile(name, flag, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	w := open("/d/a", os.O_WRONLY|os.O_CREATE)
	f := open("/d/a", os.O_RDONLY)
	if err := fsys.Lease(f); !errors.Is(err, fsys.ErrLeaseConflict) {
		t.Fatalf("lease while another handle is open: %v", err)
	}
	w.Close()
	if err := fsys.Lease(f); err != nil {
		t.Fatal(err)
	}
	open("/d/b", os.O_WRONLY|os.O_CREATE).Close()
	if err := c.Rename("/d/b", "/d/a"); err != nil {
		t.Fatal(err)
	}
	open("/d/a", os.O_RDONLY).Close() // the new file: not the leased one
	if whole, err := fsys.Unlease(f); err != nil || !whole {
		t.Fatalf("lease nobody broke: whole %v, %v", whole, err)
	}
	f.Close()

	f = open("/d/a", os.O_RDONLY)
	if err := fsys.Lease(f); err != nil {
		t.Fatal(err)
	}
	open("/d/a", os.O_WRONLY|os.O_APPEND).Close()
	if whole, err := fsys.Unlease(f); err != nil || whole {
		t.Fatalf("lease an open broke: whole %v, %v", whole, err)
	}
	f.Close()
}
