package socket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Peer is the process on the other end of a Unix socket connection, as the
// kernel recorded it when the connection was made. Authorize on UID and GID
// only: the process may have exited or exec'ed since, and its PID may have
// been reused, so PID is for logs and messages.
type Peer struct {
	PID      int32
	UID, GID uint32
}

const authType = "peercred"

// PeerCredentials returns gRPC transport credentials that record the peer's
// pid, uid and gid during the handshake (SO_PEERCRED on Linux,
// LOCAL_PEERCRED and LOCAL_PEERPID on macOS); read them with PeerFromContext.
//
// The handshake never fails, even when the credentials cannot be read (for
// example on a TCP connection): a refused handshake reaches the client as a
// bare "connection closed". Refuse per call instead (SameUserInterceptors),
// where the client gets a PermissionDenied that says why.
//
// On the client side the same credentials record the server's identity.
// Unix sockets never leave the machine, so like grpc's local credentials they
// report PrivacyAndIntegrity, which lets per-RPC credentials be sent.
func PeerCredentials() credentials.TransportCredentials { return peerCreds{} }

type peerCreds struct{}

func (peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, newAuthInfo(conn), nil
}

func (peerCreds) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, newAuthInfo(conn), nil
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: authType}
}

func (c peerCreds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is required by the interface and unused by gRPC; there
// is no server name to check on a Unix socket.
func (peerCreds) OverrideServerName(string) error { return nil }

// authInfo carries the peer, or why it is unknown, from the handshake to the
// calls made on the connection.
type authInfo struct {
	credentials.CommonAuthInfo
	peer Peer
	err  error // non-nil when peer is unknown
}

func (authInfo) AuthType() string { return authType }

func newAuthInfo(conn net.Conn) authInfo {
	p, err := peerOf(conn)
	if err != nil {
		return authInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, err: err}
	}
	return authInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, peer: p}
}

// PeerFromContext returns the caller recorded by PeerCredentials for the
// connection a server call arrived on. ok is false when the server does not
// use PeerCredentials or the credentials could not be read.
func PeerFromContext(ctx context.Context) (Peer, bool) {
	p, err := peerFromContext(ctx)
	return p, err == nil
}

func peerFromContext(ctx context.Context) (Peer, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Peer{}, errors.New("no gRPC peer in the call context")
	}
	info, ok := p.AuthInfo.(authInfo)
	if !ok {
		return Peer{}, errors.New("the server does not read peer credentials (socket.PeerCredentials not installed)")
	}
	if info.err != nil {
		return Peer{}, info.err
	}
	return info.peer, nil
}

// SameUserInterceptors return a unary and a stream server interceptor that
// let a call through only when PeerCredentials recorded a caller with the
// given uid. Everything else gets PermissionDenied with a message naming the
// uids, so a user who reached a daemon that is not theirs sees why.
func SameUserInterceptors(uid uint32) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context) error {
		p, err := peerFromContext(ctx)
		if err != nil {
			return status.Errorf(codes.PermissionDenied,
				"sessiond runs as uid %d and serves only that user; it cannot tell which user this caller is: %v", uid, err)
		}
		if p.UID != uid {
			return status.Errorf(codes.PermissionDenied,
				"sessiond runs as uid %d and serves only that user; this caller is uid %d", uid, p.UID)
		}
		return nil
	}
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context()); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// peerOf asks the kernel who is on the other end of conn.
func peerOf(conn net.Conn) (Peer, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return Peer{}, fmt.Errorf("connection %T exposes no socket to read peer credentials from", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("read peer credentials: %w", err)
	}
	var p Peer
	var perr error
	if err := raw.Control(func(fd uintptr) { p, perr = peerOfFD(int(fd)) }); err != nil {
		return Peer{}, fmt.Errorf("read peer credentials: %w", err)
	}
	if perr != nil {
		return Peer{}, perr
	}
	return p, nil
}
