package socket

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUntrusted is wrapped by every UntrustedError, for errors.Is.
var ErrUntrusted = errors.New("untrusted sessiond socket")

// UntrustedError says why a client refused a socket: whoever serves it is
// not the user (nor root), so a request sent there would hand the user's
// transcripts (code, secrets) to someone else. Nothing was sent.
type UntrustedError struct {
	Socket string
	// ServerUID and ServerPID are the serving process as the kernel
	// recorded it; ServerUID is -1 when peer credentials could not be read.
	ServerUID int
	ServerPID int32
	OwnUID    int
	// Folder is the socket's folder, FolderUID its owner (-1 unknown),
	// FolderLink where it points when it is a symlink.
	Folder     string
	FolderUID  int
	FolderLink string
	// Reason is why the serving process could not be named (ServerUID -1).
	Reason string
}

func (e *UntrustedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refusing the socket %s: ", e.Socket)
	if e.ServerUID >= 0 {
		fmt.Fprintf(&b, "it is served by uid %d (pid %d), not by you (uid %d) or root", e.ServerUID, e.ServerPID, e.OwnUID)
	} else {
		fmt.Fprintf(&b, "the kernel cannot name the process serving it (%s), so it cannot be trusted with transcripts", e.Reason)
	}
	b.WriteString("; nothing was sent to it")
	foreign := e.FolderLink != "" || (e.FolderUID >= 0 && e.FolderUID != e.OwnUID && e.FolderUID != 0)
	switch {
	case e.FolderLink != "":
		fmt.Fprintf(&b, ". Its folder %s is a symlink to %s", e.Folder, e.FolderLink)
		if e.FolderUID >= 0 {
			fmt.Fprintf(&b, " (the link belongs to uid %d)", e.FolderUID)
		}
	case foreign:
		fmt.Fprintf(&b, ". Its folder %s belongs to uid %d", e.Folder, e.FolderUID)
	}
	if foreign {
		fmt.Fprintf(&b, ". Another user may have created it to receive your transcripts: remove %s once you have checked who made it, "+
			"or point SESSIOND_SOCKET (or XDG_RUNTIME_DIR) at a folder only you own, and start sessiond there", e.Folder)
	} else {
		b.WriteString(". Stop whatever serves it, or point SESSIOND_SOCKET (or XDG_RUNTIME_DIR) at a folder only you own, and start sessiond there")
	}
	return b.String()
}

func (e *UntrustedError) Unwrap() error { return ErrUntrusted }

// DialTrusted connects to the sessiond socket at path and returns the
// connection only when the process serving it runs as the effective uid of
// this process, or as root. It checks before the caller writes anything,
// so an impostor learns nothing but that someone connected. Where the
// kernel cannot name the serving process, the socket is refused: sessiond
// itself serves nobody there either.
//
// A socket in a folder anyone can create (the /tmp fallback) can be planted
// by another user; the daemon's own checks cannot help a client that talks
// to an impostor, hence this one.
func DialTrusted(ctx context.Context, path string) (net.Conn, error) {
	return dialTrusted(ctx, path, os.Geteuid(), peerOf)
}

func dialTrusted(ctx context.Context, path string, own int, peer func(net.Conn) (Peer, error)) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	p, err := peer(conn)
	if err == nil && (int(p.UID) == own || p.UID == 0) {
		return conn, nil
	}
	conn.Close()
	e := untrusted(path, own)
	if err != nil {
		e.Reason = err.Error()
	} else {
		e.ServerUID, e.ServerPID = int(p.UID), p.PID
	}
	return nil, e
}

// untrusted starts an UntrustedError with what the folder shows.
func untrusted(path string, own int) *UntrustedError {
	e := &UntrustedError{Socket: path, ServerUID: -1, OwnUID: own, Folder: filepath.Dir(path), FolderUID: -1}
	if fi, err := os.Lstat(e.Folder); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.FolderUID = int(st.Uid)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if to, err := os.Readlink(e.Folder); err == nil {
				e.FolderLink = to
			}
		}
	}
	return e
}
