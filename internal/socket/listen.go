package socket

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/internal/layout"
)

// ErrAlreadyRunning is wrapped by Listen's error when another process already
// serves (or is starting to serve) on the socket path.
var ErrAlreadyRunning = errors.New("sessiond already running")

const maxPathLen = layout.MaxSocketPath

// probeTimeout bounds the dial that tells a live socket from a stale one.
// Connecting to a Unix socket does not wait for the peer to accept, so this
// only matters if the kernel itself stalls.
const probeTimeout = 2 * time.Second

// Listen makes the daemon's socket at path safe to serve on and listens on it:
//
//   - the socket's folder is created with mode 0700 (parents too) if missing;
//     an existing folder must be a real directory (not a symlink) owned by the
//     effective uid, and is tightened to 0700 if group or others have access;
//   - a lock file next to the socket (path + ".lock", removed on Close) is
//     held for the listener's lifetime, so two daemons starting at once cannot both
//     decide the socket is stale and unlink each other's;
//   - an existing file at path that is not a socket is an error and is left
//     alone; a socket that answers is an error wrapping ErrAlreadyRunning; a
//     socket that refuses connections is stale and removed;
//   - the new socket is chmod'ed to 0600.
//
// Closing the listener removes the socket file and releases the lock.
func Listen(path string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("socket path is empty")
	}
	if len(path) > maxPathLen {
		return nil, fmt.Errorf("socket path %s is %d bytes; Unix sockets allow at most %d, pass a shorter --socket",
			path, len(path), maxPathLen)
	}
	if err := preparePrivateDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	lock, err := lockSocket(path)
	if err != nil {
		return nil, err
	}
	if err := clearStale(path); err != nil {
		lock.Close()
		return nil, err
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The default for a listener that created its file, but Close relies on
	// it, so do not leave it to a default.
	ul.SetUnlinkOnClose(true)
	// Changing the process umask instead would race with every other
	// goroutine creating files; until this chmod the 0700 folder keeps
	// everyone else out.
	if err := os.Chmod(path, 0o600); err != nil {
		ul.Close()
		lock.Close()
		return nil, fmt.Errorf("restrict socket %s to its owner: %w", path, err)
	}
	return &listener{UnixListener: ul, lock: lock, lockPath: path + ".lock"}, nil
}

// listener releases the lock once the socket file is gone, so the next
// daemon never sees a half-closed predecessor as stale.
type listener struct {
	*net.UnixListener
	lock      *os.File
	lockPath  string
	closeOnce sync.Once
	closeErr  error
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.UnixListener.Close()
		// Removed while still held: see lockSocket.
		os.Remove(l.lockPath)
		l.lock.Close()
	})
	return l.closeErr
}

// preparePrivateDir creates dir (and missing parents) with mode 0700, or
// checks that the existing dir is one only we control.
func preparePrivateDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return symlinkedDirError(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create socket folder: %w", err)
	}
	// Check and chmod through one descriptor opened without following a
	// symlink, so the folder cannot be swapped between check and chmod.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return symlinkedDirError(dir)
		}
		return fmt.Errorf("open socket folder: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat socket folder: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("socket folder %s: cannot read its owner", dir)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("socket folder %s belongs to uid %d, not to uid %d that sessiond runs as; refusing to put the socket where another user controls it",
			dir, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o700); err != nil {
			return fmt.Errorf("restrict socket folder %s to its owner: %w", dir, err)
		}
	}
	return nil
}

func symlinkedDirError(dir string) error {
	return fmt.Errorf("socket folder %s is a symlink; refusing it because whoever controls the link decides where the socket lives (use the real folder instead)", dir)
}

// afterLock, when set (by tests), runs between taking a lock and checking
// that the locked file is still the one at its name.
var afterLock func(name string)

// lockSocket takes the lock that makes this process the only sessiond using
// path. The holder removes the lock file when it closes, while still
// holding the lock, so a daemon that opened the file just before may lock
// an unlinked file: it then finds another file (or none) at the name and
// tries again, and only the lock on the file the name points to counts.
func lockSocket(path string) (*os.File, error) {
	name := path + ".lock"
	for {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open socket lock: %w", err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				// The holder may still be before its bind; ask for its pid anyway.
				return nil, alreadyRunning(path, probePID(path))
			}
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		if afterLock != nil {
			afterLock(name)
		}
		held, err1 := f.Stat()
		named, err2 := os.Lstat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, nil
		}
		f.Close() // a daemon that stopped removed it meanwhile
	}
}

// clearStale removes a socket at path that nobody answers on. Anything else
// at path is either refused (not a socket) or reported as running.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket (%s); refusing to replace it, remove it yourself or pass --socket",
			path, typeName(fi.Mode()))
	}
	conn, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		pid := int32(0)
		if p, perr := peerOf(conn); perr == nil {
			pid = p.PID
		}
		conn.Close()
		return alreadyRunning(path, pid)
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		// Nobody listens: a daemon died without unlinking its socket.
	case errors.Is(err, syscall.ENOENT):
		return nil
	case errors.Is(err, syscall.EAGAIN):
		// A full accept backlog: alive, just busy.
		return alreadyRunning(path, 0)
	default:
		// Removing a socket we could not probe could cut off a live daemon.
		return fmt.Errorf("cannot tell whether %s is in use, leaving it alone: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// probePID returns the pid of whoever answers on path, or 0.
func probePID(path string) int32 {
	conn, err := net.DialTimeout("unix", path, probeTimeout)
	if err != nil {
		return 0
	}
	defer conn.Close()
	p, err := peerOf(conn)
	if err != nil {
		return 0
	}
	return p.PID
}

type alreadyRunningError struct {
	path string
	pid  int32 // 0 when unknown
}

func alreadyRunning(path string, pid int32) error {
	return &alreadyRunningError{path: path, pid: pid}
}

func (e *alreadyRunningError) Error() string {
	who := ""
	if e.pid > 0 {
		who = fmt.Sprintf(" (pid %d)", e.pid)
	}
	return fmt.Sprintf("another sessiond is already serving on %s%s; stop it first or pass --socket", e.path, who)
}

func (e *alreadyRunningError) Unwrap() error { return ErrAlreadyRunning }

func typeName(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symlink"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	default:
		return "mode " + m.String()
	}
}
