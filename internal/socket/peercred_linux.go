package socket

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func peerOfFD(fd int) (Peer, error) {
	// SO_PEERCRED on a socket that is not AF_UNIX does not fail: it reports
	// the overflow uid (usually 65534), which would pass for a real user.
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return Peer{}, fmt.Errorf("read socket domain: %w", err)
	}
	if domain != unix.AF_UNIX {
		return Peer{}, fmt.Errorf("not a Unix socket (address family %d), so the kernel cannot name the caller", domain)
	}
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
