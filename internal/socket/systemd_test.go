//go:build linux

package socket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFromSystemdNotActivated(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string // "" means unset
	}{
		{"no LISTEN variables", map[string]string{"LISTEN_PID": "", "LISTEN_FDS": "", "LISTEN_FDNAMES": ""}},
		// Inherited from a socket-activated parent: meant for another pid.
		{"LISTEN_PID of another process", map[string]string{
			"LISTEN_PID": fmt.Sprint(os.Getppid()), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "sessiond.socket"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, v := range tt.env {
				t.Setenv(name, v)
				if v == "" {
					os.Unsetenv(name)
				}
			}
			ln, err := FromSystemd()
			if ln != nil || err != nil {
				if ln != nil {
					ln.Close()
				}
				t.Fatalf("FromSystemd() = %v, %v; want nil, nil", ln, err)
			}
			for name := range tt.env {
				if v, ok := os.LookupEnv(name); ok {
					t.Errorf("%s still set to %q", name, v)
				}
			}
		})
	}
}

// TestFromSystemdActivated runs a child with fds placed from 3 on as
// systemd does and checks what FromSystemd makes of them.
func TestFromSystemdActivated(t *testing.T) {
	unixListener := func(t *testing.T, dir, name string) *os.File {
		ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ul.Close() })
		return fileOf(t, ul)
	}
	tests := []struct {
		name  string
		files func(t *testing.T, dir string) []*os.File
		want  string // the child's line: "ok" or a substring of its error
	}{
		{"one unix listener", func(t *testing.T, dir string) []*os.File {
			return []*os.File{unixListener(t, dir, "a.sock")}
		}, "ok"},
		{"two listeners", func(t *testing.T, dir string) []*os.File {
			return []*os.File{unixListener(t, dir, "a.sock"), unixListener(t, dir, "b.sock")}
		}, "error: systemd passed 2 sockets"},
		{"tcp listener", func(t *testing.T, dir string) []*os.File {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return []*os.File{fileOf(t, ln.(*net.TCPListener))}
		}, "error: systemd passed a tcp socket"},
		{"unix datagram socket", func(t *testing.T, dir string) []*os.File {
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "d.sock"), Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return []*os.File{fileOf(t, c)}
		}, "error: systemd passed a unixgram socket"},
		{"connected socket (Accept=yes)", func(t *testing.T, dir string) []*os.File {
			ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "c.sock"), Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ul.Close() })
			c, err := net.DialUnix("unix", nil, ul.Addr().(*net.UnixAddr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return []*os.File{fileOf(t, c)}
		}, "error: systemd passed a connected socket"},
		{"not a socket", func(t *testing.T, dir string) []*os.File {
			f, err := os.Create(filepath.Join(dir, "plain"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return []*os.File{f}
		}, "error: systemd passed fd 3 (sessiond.socket), which is not a listening socket"},
	}
	exe := testExecutable(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tt.files(t, shortTempDir(t))
			got := runHelper(t, exe, "systemd", func(cmd *exec.Cmd) { cmd.ExtraFiles = files },
				fmt.Sprintf("LISTEN_FDS=%d", len(files)), "LISTEN_FDNAMES=sessiond.socket")
			if tt.want == "ok" && got != "ok" || !strings.HasPrefix(got, tt.want) {
				t.Errorf("child said %q, want %q", got, tt.want)
			}
		})
	}
}

// fileOf returns a duplicate of a socket's descriptor for ExtraFiles.
func fileOf(t *testing.T, s interface{ File() (*os.File, error) }) *os.File {
	t.Helper()
	f, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestNotify(t *testing.T) {
	tests := []struct {
		name string
		addr func(dir string) string
	}{
		{"socket file", func(dir string) string { return filepath.Join(dir, "notify") }},
		// systemd itself uses an abstract socket.
		{"abstract socket", func(string) string { return fmt.Sprintf("@sessiond-notify-test-%d", os.Getpid()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr(shortTempDir(t))
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			t.Setenv("NOTIFY_SOCKET", addr)

			for _, state := range []string{"READY=1", "STATUS=serving on /run/sessiond.sock", "STOPPING=1"} {
				sent, err := Notify(state)
				if !sent || err != nil {
					t.Fatalf("Notify(%q) = %v, %v; want true, nil", state, sent, err)
				}
				buf := make([]byte, 256)
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _, err := conn.ReadFromUnix(buf)
				if err != nil {
					t.Fatal(err)
				}
				if got := string(buf[:n]); got != state {
					t.Errorf("systemd got %q, want %q", got, state)
				}
			}
			if got := os.Getenv("NOTIFY_SOCKET"); got != addr {
				t.Errorf("NOTIFY_SOCKET = %q after Notify, want it kept for later states", got)
			}
		})
	}
}

func TestNotifyNotUnderSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	os.Unsetenv("NOTIFY_SOCKET")
	sent, err := Notify("READY=1")
	if sent || err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET = %v, %v; want false, nil", sent, err)
	}
}

func TestNotifyUnreachable(t *testing.T) {
	missing := filepath.Join(shortTempDir(t), "gone")
	t.Setenv("NOTIFY_SOCKET", missing)
	sent, err := Notify("READY=1")
	if sent || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Notify to a missing socket = %v, %v; want false and an error naming it", sent, err)
	}
}
