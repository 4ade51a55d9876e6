//go:build linux

package socket

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// otherUID is the uid a root test switches a client to: nobody.
const otherUID = 65534

// testServer is a gRPC server with the health service, guarded the way
// sessiond guards its own, that records the peer of the last call it let in.
type testServer struct {
	mu   sync.Mutex
	last Peer
}

func (s *testServer) lastPeer() Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func startServer(t *testing.T, ln net.Listener, uid uint32, creds credentials.TransportCredentials) *testServer {
	t.Helper()
	ts := &testServer{}
	unary, stream := SameUserInterceptors(uid)
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := PeerFromContext(ctx); ok {
			ts.mu.Lock()
			ts.last = p
			ts.mu.Unlock()
		}
		return handler(ctx, req)
	}
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(unary, record), grpc.ChainStreamInterceptor(stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func dialHealth(t *testing.T, target string, creds credentials.TransportCredentials) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// watch returns the first status the Watch stream yields, or its error.
func watch(ctx context.Context, c healthpb.HealthClient) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	resp, err := w.Recv()
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func TestSameUserServed(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "sessiond.sock")
	ts := startServer(t, mustListen(t, path), uint32(os.Geteuid()), PeerCredentials())

	for _, client := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"insecure client", insecure.NewCredentials()},
		{"PeerCredentials client", PeerCredentials()},
	} {
		t.Run(client.name, func(t *testing.T) {
			c := dialHealth(t, "unix://"+path, client.creds)
			ctx := callContext(t)
			var server peer.Peer
			resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&server))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check status = %v, want SERVING", resp.GetStatus())
			}
			if st, err := watch(ctx, c); err != nil || st != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Watch = %v, %v; want SERVING", st, err)
			}

			want := Peer{PID: int32(os.Getpid()), UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
			if got := ts.lastPeer(); got != want {
				t.Errorf("server saw caller %+v, want %+v", got, want)
			}
			// With PeerCredentials the client learns who serves the socket.
			if _, ok := client.creds.(peerCreds); ok {
				got, ok := PeerFromContext(peer.NewContext(ctx, &server))
				if !ok || got != want {
					t.Errorf("client saw server %+v (known %v), want %+v", got, ok, want)
				}
			}
		})
	}
}

func TestOtherUserRefused(t *testing.T) {
	uid := uint32(os.Geteuid())

	t.Run("interceptors built for another uid", func(t *testing.T) {
		path := filepath.Join(shortTempDir(t), "sessiond.sock")
		startServer(t, mustListen(t, path), uid+1, PeerCredentials())
		c := dialHealth(t, "unix://"+path, insecure.NewCredentials())
		ctx := callContext(t)

		want := fmt.Sprintf("sessiond runs as uid %d and serves only that user; this caller is uid %d", uid+1, uid)
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		checkDenied(t, "Check", err, want)
		_, err = watch(ctx, c)
		checkDenied(t, "Watch", err, want)
	})

	t.Run("client running as another uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run a client as another uid")
		}
		// Everything the other uid touches must be reachable by it, so
		// that only the per-call uid check can refuse it: the binary (the
		// go build folder is private), the folders and the socket.
		base := shortTempDir(t)
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		for dir := filepath.Dir(base); ; dir = filepath.Dir(dir) {
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
				t.Skipf("%s is not searchable by uid %d (%v)", dir, otherUID, err)
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
		exe := filepath.Join(base, "socket.test")
		copyFile(t, testExecutable(t), exe, 0o755)
		dir := filepath.Join(base, "run")
		path := filepath.Join(dir, "sessiond.sock")
		startServer(t, mustListen(t, path), uid, PeerCredentials())
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}

		got := runHelper(t, exe, "health-client", func(cmd *exec.Cmd) {
			cmd.Dir = base
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID, Groups: []uint32{}},
			}
		}, "SOCKET_TEST_PATH="+path)

		want := fmt.Sprintf("uid=%d code=%s msg=sessiond runs as uid %d and serves only that user; this caller is uid %d",
			otherUID, codes.PermissionDenied, uid, otherUID)
		if got != want {
			t.Errorf("client as uid %d got\n  %s\nwant\n  %s", otherUID, got, want)
		}
	})
}

func TestUnknownCallerRefused(t *testing.T) {
	uid := uint32(os.Geteuid())
	tests := []struct {
		name   string
		listen func(t *testing.T) (net.Listener, string)
		creds  credentials.TransportCredentials
		reason string
	}{
		{
			name: "server without PeerCredentials",
			listen: func(t *testing.T) (net.Listener, string) {
				path := filepath.Join(shortTempDir(t), "sessiond.sock")
				return mustListen(t, path), "unix://" + path
			},
			creds:  insecure.NewCredentials(),
			reason: "PeerCredentials not installed",
		},
		{
			name: "PeerCredentials on TCP",
			listen: func(t *testing.T) (net.Listener, string) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				return ln, "passthrough:///" + ln.Addr().String()
			},
			creds:  PeerCredentials(),
			reason: "not a Unix socket",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, target := tt.listen(t)
			startServer(t, ln, uid, tt.creds)
			c := dialHealth(t, target, insecure.NewCredentials())
			ctx := callContext(t)

			_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("Check: %v, want PermissionDenied", err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, fmt.Sprintf("uid %d", uid)) || !strings.Contains(msg, "cannot tell which user") ||
				!strings.Contains(msg, tt.reason) {
				t.Errorf("message %q does not explain the refusal (%s)", msg, tt.reason)
			}
		})
	}
}

func TestPeerFromContextWithoutPeer(t *testing.T) {
	if p, ok := PeerFromContext(context.Background()); ok {
		t.Errorf("PeerFromContext on a bare context = %+v, true", p)
	}
}

func checkDenied(t *testing.T, call string, err error, wantMsg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || st.Message() != wantMsg {
		t.Errorf("%s: code %s, message %q; want PermissionDenied, %q", call, st.Code(), st.Message(), wantMsg)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
