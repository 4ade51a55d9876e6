package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/client"
)

// recordingListener keeps a copy of every byte each accepted connection
// reads (client to server) and writes (server to client).
type recordingListener struct {
	net.Listener
	mu       sync.Mutex
	in, out  bytes.Buffer
	accepted int
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.accepted++
	l.mu.Unlock()
	return &recordingConn{Conn: c, l: l}, nil
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.in.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.mu.Lock()
	c.l.out.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// pings counts the PING frames (not their acknowledgements) in an HTTP/2
// byte stream, and all frames.
func pings(t *testing.T, stream []byte) (pings, frames int) {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(stream))
	fr.SetMaxReadFrameSize(1 << 24)
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return pings, frames
		}
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		frames++
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pings++
		}
	}
}

// With gRPC's default dynamic windows each side pings the other to estimate
// the bandwidth-delay product about every other message, which costs a
// frame, a wake-up and a write each time (BENCHMARKS.md). sessiond's server
// options and the client's dial options both fix the windows, so a run of
// small calls carries no PING in either direction.
func TestTransportSendsNoBandwidthPings(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln}
	g := grpc.NewServer(TransportOptions(4 << 20)...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- g.Serve(rl) }()

	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(c.Conn())
	for i := 0; i < 200; i++ {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	c.Close()
	g.Stop()
	<-done

	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.accepted != 1 {
		t.Fatalf("%d connections accepted, want 1", rl.accepted)
	}
	in := rl.in.Bytes()
	if !bytes.HasPrefix(in, []byte(http2.ClientPreface)) {
		t.Fatalf("client stream does not start with the HTTP/2 preface: %q", in[:min(len(in), 24)])
	}
	cp, cf := pings(t, in[len(http2.ClientPreface):])
	sp, sf := pings(t, rl.out.Bytes())
	// 200 calls are at least 400 frames each way (headers and data);
	// fewer means the recording missed some.
	if cf < 400 || sf < 400 {
		t.Fatalf("recorded %d client and %d server frames, want at least 400 each", cf, sf)
	}
	if cp != 0 || sp != 0 {
		t.Errorf("PING frames over 200 calls: %d from the client, %d from the server; want none", cp, sp)
	}
}
