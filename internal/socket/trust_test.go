//go:build linux

package socket

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recordingListener accepts connections on path and counts what they
// send, so a test can tell that a refused client sent nothing at all.
type recordingListener struct {
	ln    net.Listener
	conns atomic.Int64
	bytes atomic.Int64
	done  chan struct{}
}

func listenRecording(t *testing.T, path string) *recordingListener {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingListener{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			n, _ := io.Copy(io.Discard, c) // until the client closes
			r.bytes.Add(n)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-r.done })
	return r
}

// waitConns waits until n connections were accepted and read to their end.
func (r *recordingListener) waitConns(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.conns.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.conns.Load(); got < n {
		t.Fatalf("the listener accepted %d connections, want %d", got, n)
	}
}

// TestDialTrustedOwnUser: a socket served by this process's own user is
// trusted and the connection works.
func TestDialTrustedOwnUser(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	conn, err := DialTrusted(context.Background(), path)
	if err != nil {
		t.Fatalf("own daemon refused: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(conn, buf); err != nil || buf[0] != 'x' {
		t.Fatalf("echo through the trusted connection: %q, %v", buf, err)
	}
}

// TestDialTrustedRefusesOtherUser: a socket served by another uid is
// refused with an error naming the socket, the serving uid and what to do,
// and the server receives no byte. The "other uid" is this process's
// (the test checks against a uid that is not its own), so the test runs
// without root; e2e's TestTrust* do it with a real second user.
func TestDialTrustedRefusesOtherUser(t *testing.T) {
	dir := shortTempDir(t)
	path := filepath.Join(dir, "s.sock")
	rec := listenRecording(t, path)
	me := os.Geteuid()
	pretend := me + 4242 // the client believes it is this uid
	if me == 0 {
		// Root is trusted by everyone; a root test pretends to be a user
		// and the server (root) would be trusted as root. Play the server
		// as another user through the peer function instead.
		pretend = 1234
	}
	peer := peerOf
	if me == 0 {
		peer = func(c net.Conn) (Peer, error) {
			p, err := peerOf(c)
			p.UID = otherUID
			return p, err
		}
	}
	_, err := dialTrusted(context.Background(), path, pretend, peer)
	var u *UntrustedError
	if !errors.As(err, &u) || !errors.Is(err, ErrUntrusted) {
		t.Fatalf("err = %v (%T), want an *UntrustedError wrapping ErrUntrusted", err, err)
	}
	wantUID := me
	if me == 0 {
		wantUID = otherUID
	}
	if u.ServerUID != wantUID || u.OwnUID != pretend || u.Socket != path || u.ServerPID != int32(os.Getpid()) {
		t.Errorf("error fields = %+v, want server uid %d, own %d, socket %s, pid %d", u, wantUID, pretend, path, os.Getpid())
	}
	msg := err.Error()
	for _, want := range []string{"refusing the socket " + path, "served by uid", "nothing was sent", "Stop whatever serves it", "SESSIOND_SOCKET", "XDG_RUNTIME_DIR"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	rec.waitConns(t, 1)
	rec.ln.Close()
	<-rec.done
	if n := rec.bytes.Load(); n != 0 {
		t.Errorf("the untrusted server received %d bytes, want none", n)
	}
}

// TestDialTrustedAcceptsRoot: a daemon run by root is trusted (a system
// unit may run it so); only other ordinary users are refused.
func TestDialTrustedAcceptsRoot(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "s.sock")
	listenRecording(t, path)
	asRoot := func(c net.Conn) (Peer, error) {
		p, err := peerOf(c)
		p.UID = 0
		return p, err
	}
	conn, err := dialTrusted(context.Background(), path, 1234, asRoot)
	if err != nil {
		t.Fatalf("a root daemon was refused: %v", err)
	}
	conn.Close()
}

// TestDialTrustedNoPeerCredentials: where the kernel cannot name the
// serving process, the socket is refused (fail closed), before a byte.
func TestDialTrustedNoPeerCredentials(t *testing.T) {
	dir := shortTempDir(t)
	path := filepath.Join(dir, "s.sock")
	rec := listenRecording(t, path)
	noPeer := func(net.Conn) (Peer, error) { return Peer{}, errors.New("not on this platform") }
	_, err := dialTrusted(context.Background(), path, os.Geteuid(), noPeer)
	var u *UntrustedError
	if !errors.As(err, &u) || u.ServerUID != -1 || !strings.Contains(err.Error(), "cannot name the process serving it (not on this platform)") {
		t.Fatalf("err = %v, want a refusal saying the process cannot be named", err)
	}
	// The folder is our own: nothing to remove, say what to do instead.
	if strings.Contains(err.Error(), "remove ") || !strings.Contains(err.Error(), "Stop whatever serves it") {
		t.Errorf("message %q: for a folder of one's own, no removal advice", err)
	}
	rec.waitConns(t, 1)
	rec.ln.Close()
	<-rec.done
	if n := rec.bytes.Load(); n != 0 {
		t.Errorf("the server received %d bytes", n)
	}
}
