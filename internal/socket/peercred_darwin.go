package socket

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// xucredVersion is XUCRED_VERSION from <sys/ucred.h>; x/sys/unix does not
// export it.
const xucredVersion = 0

func peerOfFD(fd int) (Peer, error) {
	// SOL_LOCAL is 0, the same level number as IPPROTO_IP: on an IP socket
	// LOCAL_PEERCRED would read an unrelated IP option instead of failing.
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return Peer{}, fmt.Errorf("getsockname: %w", err)
	}
	if _, ok := sa.(*unix.SockaddrUnix); !ok {
		return Peer{}, fmt.Errorf("not a Unix socket (%T), so the kernel cannot name the caller", sa)
	}
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Peer{}, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	if cred.Version != xucredVersion || cred.Ngroups < 1 {
		return Peer{}, fmt.Errorf("LOCAL_PEERCRED: unexpected xucred (version %d, %d groups)", cred.Version, cred.Ngroups)
	}
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return Peer{}, fmt.Errorf("LOCAL_PEERPID: %w", err)
	}
	// The first group of an xucred is the effective gid.
	return Peer{PID: int32(pid), UID: cred.Uid, GID: cred.Groups[0]}, nil
}
