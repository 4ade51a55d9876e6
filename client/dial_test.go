package client

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/socket"
)

// shortDir is a temp folder short enough for socket paths.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestUntrustedSocketNeverRetried: a socket the trust check refuses makes
// every call fail with the UntrustedSocketError itself (not gRPC's
// UNAVAILABLE), and an append that would otherwise be retried (every
// entry has a uuid) is not: with an hour between attempts, a retry would
// end on the context's deadline instead.
func TestUntrustedSocketNeverRetried(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	refusal := &socket.UntrustedError{Socket: path, ServerUID: 65534, ServerPID: 7, OwnUID: 1000, Folder: filepath.Dir(path), FolderUID: 65534}
	var dials atomic.Int32
	c, err := Dial(path, WithRetry(6, time.Hour), func(o *options) {
		o.dial = func(context.Context, string) (net.Conn, error) { dials.Add(1); return nil, refusal }
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Session{Cwd: "/w", ID: "6f1c5fbb-1f6e-4b8e-9b9e-0a3f3c1f2a10"}
	_, err = c.Append(ctx, s, []byte(`{"type":"user","uuid":"0d5c1f3e-8a8b-4f0e-9a59-1a4c2b3d4e5f"}`))
	var u *UntrustedSocketError
	if !errors.As(err, &u) || u != refusal || !errors.Is(err, ErrUntrustedSocket) {
		t.Fatalf("Append = %v (%T), want the refusal itself", err, err)
	}
	if status.Code(err) == codes.Unavailable {
		t.Error("the refusal reads as UNAVAILABLE, which callers retry")
	}
	// Streams report it too.
	err = c.Read(ctx, s, ReadOptions{}, func(*sessiondv1.Entry) error { return nil })
	if !errors.As(err, &u) {
		t.Fatalf("Read = %v, want the refusal", err)
	}
	if dials.Load() == 0 {
		t.Error("the dial function was never called")
	}
}

// TestDialErrorSaysWhatIsAtThePath: a call that could not connect says
// whether the socket is missing, stale or not a socket at all, keeps the
// system error and reads as UNAVAILABLE.
func TestDialErrorSaysWhatIsAtThePath(t *testing.T) {
	dir := shortDir(t)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
		errno            syscall.Errno
	}{
		{"missing", filepath.Join(dir, "none.sock"), "sessiond is not running: no socket at " + filepath.Join(dir, "none.sock"), syscall.ENOENT},
		{"stale", stale, "sessiond is not running: nothing listens on " + stale, syscall.ECONNREFUSED},
		{"regular file", file, file + " is not a socket (it is a file", syscall.ECONNREFUSED},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := Dial(c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = cl.Status(ctx)
			var de *DialError
			if !errors.As(err, &de) {
				t.Fatalf("Status = %v (%T), want a *DialError", err, err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "SESSIOND_SOCKET") {
				t.Errorf("message %q, want it to contain %q and name SESSIOND_SOCKET", err, c.want)
			}
			if !errors.Is(err, c.errno) {
				t.Errorf("error %v does not unwrap to %v", err, c.errno)
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("code %v, want Unavailable", status.Code(err))
			}
		})
	}
}
