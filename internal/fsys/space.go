package fsys

import (
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// FreeSpace is how many bytes an unprivileged writer may still put on the
// filesystem holding dir (statfs: available blocks times the block size,
// so the blocks kept for root do not count). It reads no file, so it
// does not go through FS: the writers take it as a function they can be
// given another of in tests (writer.Config.FreeSpace).
func FreeSpace(dir string) (int64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(s.Bavail) * int64(s.Bsize), nil
}

// DiskSize is the size in bytes of the filesystem holding dir, or of the
// one holding its nearest existing parent when dir does not exist yet.
func DiskSize(dir string) (int64, error) {
	for {
		var s unix.Statfs_t
		err := unix.Statfs(dir, &s)
		if err == nil {
			return int64(s.Blocks) * int64(s.Bsize), nil
		}
		parent := filepath.Dir(dir)
		if err != unix.ENOENT || parent == dir {
			return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
		dir = parent
	}
}

// SameDisk reports whether a and b are on one filesystem (the same
// device), or true when either cannot be looked at: the caller then acts
// as if freeing space at one helps the other, which at worst frees space
// in vain.
func SameDisk(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return true
	}
	fb, err := os.Stat(b)
	if err != nil {
		return true
	}
	sa, ok1 := fa.Sys().(*syscall.Stat_t)
	sb, ok2 := fb.Sys().(*syscall.Stat_t)
	return !ok1 || !ok2 || sa.Dev == sb.Dev
}
