package socket

import (
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// FromSystemd returns the listening socket systemd passed by socket
// activation (LISTEN_PID/LISTEN_FDS), or nil, nil when sessiond was not
// socket-activated. It accepts exactly one listening Unix stream socket
// (ListenStream=/path with Accept=no); anything else is an error, since
// serving on an unexpected socket would be worse than not starting.
//
// LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are unset in every case, so
// child processes do not mistake their own fd 3 for a socket.
//
// systemd owns the socket file: closing the listener leaves it in place
// for the next activation.
func FromSystemd() (net.Listener, error) {
	files := activation.Files(true)
	if len(files) == 0 {
		return nil, nil
	}
	// FileListener works on a duplicate, so the originals always go.
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) > 1 {
		return nil, fmt.Errorf("systemd passed %d sockets; sessiond serves exactly one, give its .socket unit a single ListenStream=", len(files))
	}
	// Do not call Fd on the file: that makes the descriptor blocking, and
	// the listener's duplicate shares that flag.
	f := files[0]
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("systemd passed fd 3 (%s), which is not a listening socket: %w", f.Name(), err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok || ul.Addr().Network() != "unix" {
		ln.Close()
		return nil, fmt.Errorf("systemd passed a %s socket (%s); sessiond needs a Unix stream socket (ListenStream=/path/to/socket)",
			ln.Addr().Network(), ln.Addr())
	}
	if err := checkListening(ul); err != nil {
		ul.Close()
		return nil, err
	}
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// checkListening refuses a connected socket, which is what Accept=yes
// units pass and which net.FileListener wraps without complaint.
func checkListening(ul *net.UnixListener) error {
	raw, err := ul.SyscallConn()
	if err != nil {
		return fmt.Errorf("inspect socket from systemd: %w", err)
	}
	var accepting int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		accepting, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	}); err != nil {
		return fmt.Errorf("inspect socket from systemd: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("inspect socket from systemd: SO_ACCEPTCONN: %w", serr)
	}
	if accepting == 0 {
		return fmt.Errorf("systemd passed a connected socket (%s), not a listening one; set Accept=no in sessiond's .socket unit", ul.Addr())
	}
	return nil
}

// Notify sends an sd_notify state such as "READY=1", "STOPPING=1" or
// "STATUS=..." to systemd. It returns false, nil when NOTIFY_SOCKET is unset,
// i.e. when not running under systemd (or not as Type=notify).
//
// NOTIFY_SOCKET stays set so later states can be sent too; the daemon should
// not pass it on to processes it starts.
func Notify(state string) (bool, error) {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		return false, fmt.Errorf("notify systemd of %q via %s: %w", state, os.Getenv("NOTIFY_SOCKET"), err)
	}
	return sent, nil
}
