//go:build linux

package socket

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func mustListen(t *testing.T, path string) net.Listener {
	t.Helper()
	ln, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen(%s): %v", path, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// checkServes proves ln accepts connections made to path. Connections
// already queued (probes from refused Listen calls) are served too.
func checkServes(t *testing.T, ln net.Listener, path string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	defer func() {
		d := ln.(interface{ SetDeadline(time.Time) error })
		d.SetDeadline(time.Now())
		<-done
		d.SetDeadline(time.Time{})
	}()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hi" {
		t.Fatalf("read from %s: %q, %v", path, got, err)
	}
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// daemon that was killed would.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if _, err := net.Dial("unix", path); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial stale socket: got %v, want connection refused", err)
	}
}

func TestListenCreatesPrivateFolderAndSocket(t *testing.T) {
	base := shortTempDir(t)
	dir := filepath.Join(base, "a", "run")
	path := filepath.Join(dir, "sessiond.sock")

	ln := mustListen(t, path)

	for _, d := range []string{filepath.Join(base, "a"), dir} {
		if got := perm(t, d); got != 0o700 {
			t.Errorf("%s mode = %o, want 700", d, got)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with mode 600", fi.Mode())
	}
	checkServes(t, ln, path)

	if err := ln.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still there after Close: %v", err)
	}
	if _, err := os.Lstat(path + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lock file still there after a clean Close: %v", err)
	}
	// Closing released the lock: the path is free for the next daemon.
	ln2 := mustListen(t, path)
	checkServes(t, ln2, path)
}

func TestListenTightensLooseFolder(t *testing.T) {
	dir := filepath.Join(shortTempDir(t), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	mustListen(t, filepath.Join(dir, "sessiond.sock"))
	if got := perm(t, dir); got != 0o700 {
		t.Errorf("folder mode = %o, want 700", got)
	}
}

func TestListenRefusesSymlinkedFolder(t *testing.T) {
	base := shortTempDir(t)
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(filepath.Join(link, "sessiond.sock"))
	if err == nil {
		ln.Close()
		t.Fatal("Listen through a symlinked folder succeeded")
	}
	if !strings.Contains(err.Error(), "symlink") {
		t.Errorf("error %q does not say the folder is a symlink", err)
	}
	entries, _ := os.ReadDir(real)
	if len(entries) != 0 {
		t.Errorf("Listen left %d entries in the symlink's target", len(entries))
	}
}

func TestListenRefusesFolderOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a folder to another uid")
	}
	dir := filepath.Join(shortTempDir(t), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(filepath.Join(dir, "sessiond.sock"))
	if err == nil {
		ln.Close()
		t.Fatal("Listen in another user's folder succeeded")
	}
	if !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("error %q does not name the folder's owner", err)
	}
}

func TestListenRefusesNonSocket(t *testing.T) {
	tests := []struct {
		name   string
		create func(path string) error
	}{
		{"regular file", func(path string) error { return os.WriteFile(path, []byte("precious"), 0o600) }},
		{"directory", func(path string) error { return os.Mkdir(path, 0o700) }},
		{"symlink to a socket", func(path string) error {
			target := path + ".target"
			ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: target, Net: "unix"})
			if err != nil {
				return err
			}
			ul.SetUnlinkOnClose(false)
			ul.Close()
			return os.Symlink(target, path)
		}},
		{"named pipe", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(shortTempDir(t), "run", "sessiond.sock")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tt.create(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}

			ln, err := Listen(path)
			if err == nil {
				ln.Close()
				t.Fatal("Listen replaced a non-socket")
			}
			if errors.Is(err, ErrAlreadyRunning) {
				t.Errorf("error %q claims a daemon is running", err)
			}
			if !strings.Contains(err.Error(), "not a socket") || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not say %s is not a socket", err, path)
			}
			after, err := os.Lstat(path)
			if err != nil {
				t.Fatalf("%s is gone: %v", path, err)
			}
			if !os.SameFile(before, after) || before.Mode() != after.Mode() || before.Size() != after.Size() {
				t.Errorf("%s changed: %v -> %v", path, before.Mode(), after.Mode())
			}
		})
	}
	// The file's content survives too.
	path := filepath.Join(shortTempDir(t), "sessiond.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := Listen(path); err == nil {
		ln.Close()
		t.Fatal("Listen replaced a regular file")
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "precious" {
		t.Errorf("file content after Listen: %q, %v", got, err)
	}
}

func TestListenRemovesStaleSocket(t *testing.T) {
	dir := filepath.Join(shortTempDir(t), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sessiond.sock")
	staleSocket(t, path)

	// Binding over a file that is still there would fail, so serving
	// proves the stale one was removed.
	ln := mustListen(t, path)

	if got := perm(t, path); got != 0o600 {
		t.Errorf("socket mode = %o, want 600", got)
	}
	checkServes(t, ln, path)
}

func TestListenRefusesLiveSocket(t *testing.T) {
	tests := []struct {
		name  string
		serve func(t *testing.T, path string) net.Listener
	}{
		{"another sessiond", mustListen},
		{"a foreign listener", func(t *testing.T, path string) net.Listener {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return ln
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(shortTempDir(t), "run", "sessiond.sock")
			live := tt.serve(t, path)

			ln, err := Listen(path)
			if err == nil {
				ln.Close()
				t.Fatal("second Listen succeeded")
			}
			if !errors.Is(err, ErrAlreadyRunning) {
				t.Errorf("error %q does not wrap ErrAlreadyRunning", err)
			}
			// Both listeners are in this process, so SO_PEERCRED names it.
			want := fmt.Sprintf("another sessiond is already serving on %s (pid %d); stop it first or pass --socket", path, os.Getpid())
			if err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
			// The refused attempt must not disturb the running daemon: it
			// finds the probe connection, closed without a byte sent, in
			// its queue, and then serves as before.
			acceptProbe(t, live)
			checkServes(t, live, path)
		})
	}
}

// TestListenConcurrentStarts starts several daemons at once over a stale
// socket: without the lock two of them could each find it stale, and the
// second would unlink the first one's fresh socket.
func TestListenConcurrentStarts(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "sessiond.sock")
	staleSocket(t, path)

	const n = 8
	lns := make([]net.Listener, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { lns[i], errs[i] = Listen(path) })
	}
	wg.Wait()

	var winner net.Listener
	for i := range n {
		switch {
		case errs[i] == nil:
			t.Cleanup(func() { lns[i].Close() })
			if winner != nil {
				t.Error("two concurrent Listen calls both succeeded")
			}
			winner = lns[i]
		case !errors.Is(errs[i], ErrAlreadyRunning):
			t.Errorf("Listen: %v, want ErrAlreadyRunning", errs[i])
		}
	}
	if winner == nil {
		t.Fatal("no Listen call succeeded")
	}
	checkServes(t, winner, path)
}

func TestListenRefusesTooLongPath(t *testing.T) {
	path := filepath.Join(shortTempDir(t), strings.Repeat("x", 120)+".sock")
	ln, err := Listen(path)
	if err == nil {
		ln.Close()
		t.Fatal("Listen accepted a path longer than sun_path")
	}
	if !strings.Contains(err.Error(), "--socket") {
		t.Errorf("error %q does not suggest a shorter --socket", err)
	}
}

func TestListenCloseTwice(t *testing.T) {
	ln := mustListen(t, filepath.Join(shortTempDir(t), "sessiond.sock"))
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// acceptProbe accepts the connection Listen made to find out whether ln is
// alive and checks that the probe sent nothing.
func acceptProbe(t *testing.T, ln net.Listener) {
	t.Helper()
	ul := ln.(interface{ SetDeadline(time.Time) error })
	ul.SetDeadline(time.Now().Add(5 * time.Second))
	defer ul.SetDeadline(time.Time{})
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept the probe connection: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
		t.Errorf("probe connection sent %q, %v; want nothing", got, err)
	}
}

// TestLockOfRemovedFileDoesNotCount: a daemon that locked the lock file
// just as a stopping daemon removed it holds nothing: lockSocket notices
// the name now points elsewhere and takes the lock on that file, so two
// daemons never both hold it.
func TestLockOfRemovedFileDoesNotCount(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "s.sock")
	calls := 0
	afterLock = func(name string) {
		calls++
		if calls == 1 {
			// The holder stopping: it removes the file this process
			// just locked; another daemon creates the name anew.
			os.Remove(name)
			if f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
				f.Close()
			}
		}
	}
	defer func() { afterLock = nil }()
	f, err := lockSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	held, _ := f.Stat()
	named, err := os.Lstat(path + ".lock")
	if err != nil || !os.SameFile(held, named) {
		t.Fatalf("lockSocket returned a lock on a file no longer at %s.lock (%v)", path, err)
	}
	if calls != 2 {
		t.Errorf("lockSocket locked %d times, want 2 (the removed file, then the named one)", calls)
	}
	if _, err := lockSocket(path); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second lockSocket while the named file is held: %v, want ErrAlreadyRunning", err)
	}
}
