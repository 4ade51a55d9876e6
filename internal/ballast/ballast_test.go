package ballast

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// TestBallast: made at its size with its blocks taken (not a sparse file),
// only when the disk has twice its size free; released once; made again
// when the space is back; resized when the setting changes; removed with
// size 0; a symbolic link where it belongs is refused, not followed.
func TestBallast(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ballast")
	free := int64(1 << 30)
	freeFn := func(string) (int64, error) { return free, nil }
	const size = 1 << 20

	b := New(fsys.OS, path, size, freeFn)
	free = 2*size - 1
	if ok, err := b.Ensure(); ok || err != nil {
		t.Fatalf("Ensure with less than twice its size free = %v, %v; want not made", ok, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ballast was made without room (%v)", err)
	}
	free = 2 * size
	if ok, err := b.Ensure(); !ok || err != nil {
		t.Fatalf("Ensure = %v, %v", ok, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != size {
		t.Fatalf("ballast: %v, %v; want %d bytes", fi, err, size)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < size {
		t.Errorf("the ballast takes %d bytes on disk, want its %d: a sparse file frees nothing when released", st.Blocks*512, size)
	}
	if p, r := b.State(); !p || r {
		t.Errorf("State = %v, %v; want present, not released", p, r)
	}

	if !b.Release() {
		t.Fatal("Release found no ballast")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("released ballast still there (%v)", err)
	}
	if p, r := b.State(); p || !r {
		t.Errorf("State after Release = %v, %v; want released", p, r)
	}
	if b.Release() {
		t.Error("a second Release released something")
	}
	if ok, err := b.Ensure(); !ok || err != nil {
		t.Fatalf("Ensure after the space came back = %v, %v", ok, err)
	}

	// A new size replaces the file; size 0 removes it.
	b2 := New(fsys.OS, path, size/2, freeFn)
	if ok, err := b2.Ensure(); !ok || err != nil {
		t.Fatalf("Ensure with a new size = %v, %v", ok, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != size/2 {
		t.Fatalf("resized ballast: %v, %v", fi, err)
	}
	if ok, err := New(fsys.OS, path, 0, freeFn).Ensure(); ok || err != nil {
		t.Fatalf("Ensure with size 0 = %v, %v", ok, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("size 0 left the ballast (%v)", err)
	}

	// A link planted at its path.
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := New(fsys.OS, path, size, freeFn).Ensure(); !errors.Is(err, errdefs.ErrUnsafePath) {
		t.Errorf("Ensure over a symbolic link = %v, want ErrUnsafePath", err)
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Error("the link's target was changed")
	}
}

// TestBallastUnreadable: a look at the ballast that fails (EIO) fails
// Ensure, which makes nothing and caches nothing: taken for no ballast, it
// would try to make one over the one in place. The next Ensure finds it.
func TestBallastUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ballast")
	freeFn := func(string) (int64, error) { return 1 << 30, nil }
	const size = 1 << 20
	if ok, err := New(fsys.OS, path, size, freeFn).Ensure(); !ok || err != nil {
		t.Fatalf("Ensure = %v, %v", ok, err)
	}
	ff := fstest.NewFaultFS(fsys.OS)
	ff.Inject(fstest.Fault{Op: fstest.OpStat, Path: func(p string) bool { return p == path }, Err: syscall.EIO})
	b := New(ff, path, size, freeFn)
	if ok, err := b.Ensure(); ok || !errors.Is(err, syscall.EIO) || !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("Ensure with the ballast's lstat failing = %v, %v; want the error", ok, err)
	}
	if ff.OpsOf(fstest.OpOpen) != 0 || ff.OpsOf(fstest.OpRemove) != 0 {
		t.Fatalf("Ensure touched the ballast after a failed look: %d opens, %d removals", ff.OpsOf(fstest.OpOpen), ff.OpsOf(fstest.OpRemove))
	}
	if ok, err := b.Ensure(); !ok || err != nil {
		t.Fatalf("Ensure once the disk answers = %v, %v; want the ballast found", ok, err)
	}
	if ff.OpsOf(fstest.OpOpen) != 0 {
		t.Fatal("the ballast in place was made again")
	}
}
