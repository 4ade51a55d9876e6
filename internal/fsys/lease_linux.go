package fsys

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Lease takes a write lease with fcntl(F_SETLEASE, F_WRLCK). The kernel
// tells the holder of a lease someone breaks with SIGIO, which the Go
// runtime ignores unless the program asks for it: the holder looks at its
// lease (Unlease) instead.
func (f *osFile) Lease() error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return &os.PathError{Op: "lease", Path: f.Name(), Err: fmt.Errorf("%w (fstatfs: %w)", errors.ErrUnsupported, err)}
	}
	if remoteFS[uint32(sfs.Type)] {
		return &os.PathError{Op: "lease", Path: f.Name(), Err: fmt.Errorf("%w: a lease on a shared filesystem (type %#x) says nothing of other machines' opens", errors.ErrUnsupported, sfs.Type)}
	}
	_, err := fcntl(f.File, unix.F_SETLEASE, unix.F_WRLCK)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EAGAIN):
		return &os.PathError{Op: "lease", Path: f.Name(), Err: fmt.Errorf("%w (%w)", ErrLeaseConflict, err)}
	default:
		// EINVAL (a filesystem without leases, leases disabled), EACCES
		// or EPERM (a file owned by another user), ENOSYS...
		return &os.PathError{Op: "lease", Path: f.Name(), Err: fmt.Errorf("%w (%w)", errors.ErrUnsupported, err)}
	}
}

// Unlease reads the lease back (F_GETLEASE): a lease someone broke is
// being downgraded (F_RDLCK, F_UNLCK) or gone. Then it gives it up.
func (f *osFile) Unlease() (bool, error) {
	kind, err := fcntl(f.File, unix.F_GETLEASE, 0)
	if err != nil {
		return false, &os.PathError{Op: "getlease", Path: f.Name(), Err: err}
	}
	if _, err := fcntl(f.File, unix.F_SETLEASE, unix.F_UNLCK); err != nil && kind == unix.F_WRLCK {
		return false, &os.PathError{Op: "unlease", Path: f.Name(), Err: err}
	}
	return kind == unix.F_WRLCK, nil
}

// remoteFS are the filesystems other machines (or a FUSE server) may open
// files on: a lease taken here is not broken by their opens, so it cannot
// say nobody opened the file.
var remoteFS = map[uint32]bool{
	unix.NFS_SUPER_MAGIC: true, unix.SMB_SUPER_MAGIC: true, unix.SMB2_SUPER_MAGIC: true,
	unix.CIFS_SUPER_MAGIC: true, unix.FUSE_SUPER_MAGIC: true, unix.CEPH_SUPER_MAGIC: true,
	unix.V9FS_MAGIC: true, unix.AFS_FS_MAGIC: true, unix.AFS_SUPER_MAGIC: true,
	unix.CODA_SUPER_MAGIC: true, unix.OCFS2_SUPER_MAGIC: true,
}

func fcntl(f *os.File, cmd, arg int) (int, error) {
	for {
		v, err := unix.FcntlInt(f.Fd(), cmd, arg)
		if err != unix.EINTR {
			return v, err
		}
	}
}
