package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/internal/socket"
)

// UntrustedSocketError is returned by every call when the socket is served
// by a process of another user (not root): the client refused it before
// sending anything. It is never retried. Match it with errors.As, or
// errors.Is(err, ErrUntrustedSocket).
type UntrustedSocketError = socket.UntrustedError

// ErrUntrustedSocket is wrapped by every UntrustedSocketError.
var ErrUntrustedSocket = socket.ErrUntrusted

// DialError is returned by a call that found no daemon to talk to: the
// socket is missing, refuses connections, may not be opened, or is not a
// socket. It carries gRPC's UNAVAILABLE status (status.Code works on it),
// and unwraps to the system error (errors.Is(err, syscall.ENOENT)).
type DialError struct {
	Socket string
	Err    error
	kind   string // what was at Socket when the dial failed (socketKind)
}

func (e *DialError) Error() string {
	const where = "pass --socket or set SESSIOND_SOCKET if it listens elsewhere"
	kind := e.kind
	if kind == "" {
		kind = socketKind(e.Socket)
	}
	switch {
	case errors.Is(e.Err, syscall.ENOENT) && kind == "missing":
		return fmt.Sprintf("sessiond is not running: no socket at %s. Start it (sessiond, or systemctl --user start sessiond.socket), or %s", e.Socket, where)
	case errors.Is(e.Err, syscall.ECONNREFUSED) && kind == "socket":
		return fmt.Sprintf("sessiond is not running: nothing listens on %s (a socket file left by a daemon that stopped). Start sessiond, or %s", e.Socket, where)
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		return fmt.Sprintf("permission denied connecting to %s: this user may not open it or search its folder (sessiond makes both private to the user it runs as, so it likely runs as another user); %s", e.Socket, where)
	case kind == "file" || kind == "folder" || errors.Is(e.Err, syscall.ENOTDIR):
		return fmt.Sprintf("%s is not a socket (it is a %s, or a part of its path is not a folder); %s", e.Socket, kind, where)
	}
	return fmt.Sprintf("cannot connect to sessiond at %s: %v", e.Socket, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// GRPCStatus makes the error an UNAVAILABLE status for code that asks.
func (e *DialError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Error()) }

// dialTrusted is how a Client connects: see socket.DialTrusted.
func dialTrusted(ctx context.Context, path string) (net.Conn, error) {
	return socket.DialTrusted(ctx, path)
}

// dialer connects through socket.DialTrusted and remembers how the latest
// connection attempt failed, so a call that fails because no connection
// could be made reports that failure instead of gRPC's generic text.
type dialer struct {
	socket  string
	connect func(ctx context.Context, socket string) (net.Conn, error)
	failed  atomic.Pointer[error] // nil once an attempt succeeds
	// connected is set by the first connection made: until then no
	// request can have reached the daemon.
	connected atomic.Bool
}

func (d *dialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	conn, err := d.connect(ctx, d.socket)
	if err != nil {
		var u *socket.UntrustedError
		if !errors.As(err, &u) {
			err = &DialError{Socket: d.socket, Err: err, kind: socketKind(d.socket)}
		}
		d.failed.Store(&err)
		return nil, err
	}
	d.failed.Store(nil)
	d.connected.Store(true)
	return conn, nil
}

// translate replaces an UNAVAILABLE that a failed connection attempt
// caused with that attempt's error.
func (d *dialer) translate(err error) error {
	if err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	if f := d.failed.Load(); f != nil {
		return *f
	}
	return err
}

func (d *dialer) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return ctxErr(ctx, d.translate(invoker(ctx, method, req, reply, cc, opts...)))
}

func (d *dialer) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, ctxErr(ctx, d.translate(err))
	}
	return translatedStream{s, d, ctx}, nil
}

// translatedStream translates the errors of a stream's calls, where a
// failed connection shows up for streams that were opened lazily, and
// the end of the stream's context.
type translatedStream struct {
	grpc.ClientStream
	d   *dialer
	ctx context.Context // the stream's, kept: ClientStream.Context disables retries
}

func (s translatedStream) SendMsg(m any) error {
	return ctxErr(s.ctx, s.d.translate(s.ClientStream.SendMsg(m)))
}

func (s translatedStream) RecvMsg(m any) error {
	return ctxErr(s.ctx, s.d.translate(s.ClientStream.RecvMsg(m)))
}

// socketKind describes what is at a socket path that could not be
// connected to, for messages.
func socketKind(path string) string {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case err != nil:
		return "unreadable"
	case fi.Mode().Type() == fs.ModeSocket:
		return "socket"
	case fi.IsDir():
		return "folder"
	default:
		return "file"
	}
}
