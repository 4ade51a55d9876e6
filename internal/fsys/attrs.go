package fsys

import (
	"errors"
	"io/fs"
	"syscall"
)

// KeepAttrs gives f, a new file about to replace the one fi describes (a
// compaction's, a repair's or a restore's temp file), that file's
// permission bits, and its owner and group as far as this process may set
// them: a rewrite must not turn another user's 0644 transcript into the
// daemon's own 0600 one. Only root may give a file away; anyone else keeps
// the group when it is one of theirs, and otherwise the file stays theirs
// (the mode still follows). Files that cannot carry either (the test
// filesystems) are left as they are.
func KeepAttrs(f File, fi fs.FileInfo) error {
	if c, ok := f.(interface{ Chown(uid, gid int) error }); ok {
		if want, ok := fi.Sys().(*syscall.Stat_t); ok {
			if err := keepOwner(c, f, want); err != nil {
				return err
			}
		}
	}
	// After the owner: chown may clear mode bits.
	if c, ok := f.(interface{ Chmod(fs.FileMode) error }); ok {
		if err := c.Chmod(fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func keepOwner(c interface{ Chown(uid, gid int) error }, f File, want *syscall.Stat_t) error {
	if cur, err := f.Stat(); err == nil {
		if have, ok := cur.Sys().(*syscall.Stat_t); ok && have.Uid == want.Uid && have.Gid == want.Gid {
			return nil
		}
	}
	err := c.Chown(int(want.Uid), int(want.Gid))
	if errors.Is(err, syscall.EPERM) {
		err = c.Chown(-1, int(want.Gid))
	}
	if errors.Is(err, syscall.EPERM) {
		return nil // not ours to give away: the file stays the daemon's
	}
	return err
}
