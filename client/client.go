// Package client is the Go client of sessiond: what agents import to store
// their transcripts through the daemon instead of writing files, and what
// sessionctl uses. It dials the daemon's Unix socket and retries appends
// the daemon could not take (it is restarting or draining) without ever
// storing an entry twice.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
)

// DefaultSocket is where sessiond listens unless told otherwise:
// $SESSIOND_SOCKET, else $XDG_RUNTIME_DIR/sessiond/sessiond.sock, else
// /tmp/sessiond-<uid>/sessiond.sock.
func DefaultSocket() string { return layout.DefaultSocket(os.Getenv) }

// Session names one transcript. Set Cwd (the agent's working directory) or
// ProjectKey; reads may leave both empty when the id is unambiguous.
type Session struct {
	Cwd        string
	ProjectKey string
	ID         string
	Subpath    string // "" for the main transcript, e.g. "subagents/agent-abc"
}

func (s Session) ref() *sessiondv1.SessionRef {
	r := &sessiondv1.SessionRef{SessionId: s.ID, Subpath: s.Subpath}
	switch {
	case s.Cwd != "":
		r.Project = &sessiondv1.SessionRef_Cwd{Cwd: s.Cwd}
	case s.ProjectKey != "":
		r.Project = &sessiondv1.SessionRef_ProjectKey{ProjectKey: s.ProjectKey}
	}
	return r
}

// Client talks to one sessiond.
type Client struct {
	conn    *grpc.ClientConn
	api     sessiondv1.SessiondClient
	opts    options
	dialer  *dialer
	streams streamPool
}

type options struct {
	dial     func(ctx context.Context, socket string) (net.Conn, error) // tests replace it
	attempts int
	backoff  time.Duration
	unary    bool
}

// maxMessage is the largest message sent or received: the daemon's
// default --max-message-bytes.
const maxMessage = 64 << 20

// Option configures a Client.
type Option func(*options)

// WithRetry sets how many times an append the daemon could not take is
// tried in all (default 6) and the first backoff (default 200ms, then
// quadrupled up to 5s).
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.attempts, o.backoff = attempts, backoff }
}

// WithUnaryAppend makes Append use one unary call per append instead of
// the pooled AppendStream streams (to compare the two, or for a proxy
// that does not pass bidirectional streams).
func WithUnaryAppend() Option { return func(o *options) { o.unary = true } }

// clientWindow is the client's HTTP/2 receive window, per stream and per
// connection.
const clientWindow = 1 << 20

// Dial connects to the daemon at socket (DefaultSocket() when empty). The
// connection is made lazily; a daemon that is not running shows up as an
// UNAVAILABLE error on the first call.
func Dial(socket string, opts ...Option) (*Client, error) {
	o := options{dial: dialTrusted, attempts: 6, backoff: 200 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	if socket == "" {
		socket = DefaultSocket()
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, fmt.Errorf("socket path %q: %w", socket, err)
	}
	d := &dialer{socket: abs, connect: o.dial}
	conn, err := grpc.NewClient("unix://"+abs,
		// Every connection goes through the trust check: a socket served
		// by another user is refused before gRPC writes a byte to it.
		grpc.WithContextDialer(d.dial),
		grpc.WithChainUnaryInterceptor(d.unary),
		grpc.WithChainStreamInterceptor(d.stream),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		// Fixed windows: no bandwidth-estimation ping on every call (see
		// internal/daemon.TransportOptions). These are what the daemon may
		// send ahead of the caller reading it, so they are small: reading
		// a 200 MB transcript must cost about its longest line, not the
		// window (a window of 8 MiB added 8 MiB to sessionctl show).
		grpc.WithStaticStreamWindowSize(clientWindow),
		grpc.WithStaticConnWindowSize(clientWindow),
	)
	if err != nil {
		return nil, fmt.Errorf("dial sessiond at %s: %w", abs, err)
	}
	return &Client{conn: conn, api: sessiondv1.NewSessiondClient(conn), opts: o, dialer: d}, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.streams.closeAll()
	return c.conn.Close()
}

// Conn exposes the connection (for the health service, for instance).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Append stores entries (raw JSON objects) atomically in s. When the daemon
// cannot take the call (UNAVAILABLE: restarting, draining) the append is
// retried with backoff, but only when a retry cannot duplicate anything:
// every entry carries a uuid (the daemon drops uuids it already holds), or
// the daemon said it did not process the call. An error after which the
// entries may have been stored matches ErrOutcomeUnknown; AppendBatch
// makes such a batch safe to send again.
func (c *Client) Append(ctx context.Context, s Session, entries ...[]byte) (*sessiondv1.AppendResponse, error) {
	idempotent := true
	for _, e := range entries {
		if id, ok := rawjson.TopLevelString(e, "uuid"); !ok || id == "" {
			idempotent = false
			break
		}
	}
	return c.append(ctx, &sessiondv1.AppendRequest{Session: s.ref(), Entries: entries}, idempotent)
}

// AppendBatch stores entries atomically in s as the batch named batchID
// (1-128 printable ASCII bytes without spaces; a UUID is best). sessiond
// remembers the ids of the batches a transcript stored for at least 10
// minutes, across restarts: the same batch sent again with the same id
// stores nothing and is answered with DuplicateBatch set. So every
// UNAVAILABLE failure is retried (see WithRetry), even one whose request
// may have reached the daemon, and after an error that matches
// ErrOutcomeUnknown the caller may send the batch again with the same id.
// Two different batches must never share an id: the second would be
// taken for the first and not stored.
func (c *Client) AppendBatch(ctx context.Context, s Session, batchID string, entries ...[]byte) (*sessiondv1.AppendResponse, error) {
	return c.append(ctx, &sessiondv1.AppendRequest{Session: s.ref(), Entries: entries, BatchId: batchID}, true)
}

// append sends req, retried as Append says; idempotent says that sending
// it twice cannot store anything twice.
func (c *Client) append(ctx context.Context, req *sessiondv1.AppendRequest, idempotent bool) (*sessiondv1.AppendResponse, error) {
	backoff := c.opts.backoff
	unknown := false // an earlier attempt may have stored the batch
	for attempt := 1; ; attempt++ {
		resp, maybeStored, err := c.appendOnce(ctx, req)
		if err == nil {
			return resp, nil
		}
		unknown = unknown || maybeStored
		if attempt >= c.opts.attempts || status.Code(err) != codes.Unavailable || !(idempotent || notProcessed(err)) {
			return nil, withOutcome(err, unknown)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, withOutcome(&contextError{ctx: ctx.Err(), last: err}, unknown)
		}
		backoff *= 4
		if backoff > 5*time.Second {
			backoff = 5 * time.Second
		}
	}
}

// NotProcessed reports whether err is sessiond's answer that it did not
// look at the request (it is draining): retrying cannot duplicate anything.
func NotProcessed(err error) bool { return notProcessed(err) }

func notProcessed(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == sessiondv1.ErrorDomain && info.GetReason() == sessiondv1.ReasonNotProcessed {
			return true
		}
	}
	return false
}

// Flush compacts s's journal into its canonical file.
func (c *Client) Flush(ctx context.Context, s Session) (*sessiondv1.FlushedSession, error) {
	var out *sessiondv1.FlushedSession
	err := c.flush(ctx, &sessiondv1.FlushRequest{Session: s.ref()}, func(f *sessiondv1.FlushedSession) error {
		out = f
		return nil
	})
	if err == nil && out == nil {
		err = errors.New("sessiond answered the flush without the session")
	}
	return out, err
}

// FlushAll compacts every session with journaled entries, calling fn for
// each one compacted as the daemon reports it.
func (c *Client) FlushAll(ctx context.Context, fn func(*sessiondv1.FlushedSession) error) error {
	return c.flush(ctx, &sessiondv1.FlushRequest{All: true}, fn)
}

func (c *Client) flush(ctx context.Context, req *sessiondv1.FlushRequest, fn func(*sessiondv1.FlushedSession) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Flush(ctx, req)
	if err != nil {
		return err
	}
	return Receive(stream, func(resp *sessiondv1.FlushResponse) error {
		for _, f := range resp.GetSessions() {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	})
}

// Receive calls fn for each message of a server stream until the daemon
// ends it (nil), fails it (its error), or fn returns an error (returned as
// it is; the caller cancels the call's context to end the stream).
func Receive[T any](stream grpc.ServerStreamingClient[T], fn func(*T) error) error {
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(resp); err != nil {
			return err
		}
	}
}

// ReadOptions choose where a read starts.
type ReadOptions struct {
	From uint64 // first index
	Tail uint32 // when > 0, the last Tail entries instead
}

// Read calls fn for each of s's entries, in order, up to the end.
func (c *Client) Read(ctx context.Context, s Session, opt ReadOptions, fn func(*sessiondv1.Entry) error) error {
	stream, err := c.api.Read(ctx, &sessiondv1.ReadRequest{Session: s.ref(), FromIndex: opt.From, Tail: opt.Tail})
	if err != nil {
		return err
	}
	return drain(stream, fn)
}

// Follow calls fn for each of s's entries and then for every new one as it
// is stored, until ctx ends (then it returns nil) or the daemon ends the
// stream (shutting down: an UNAVAILABLE error).
func (c *Client) Follow(ctx context.Context, s Session, opt ReadOptions, fn func(*sessiondv1.Entry) error) error {
	stream, err := c.api.Follow(ctx, &sessiondv1.ReadRequest{Session: s.ref(), FromIndex: opt.From, Tail: opt.Tail})
	if err == nil {
		err = drain(stream, fn)
	}
	if ctx.Err() != nil && status.Code(err) == codes.Canceled {
		return nil
	}
	if err == nil && ctx.Err() == nil {
		return status.Error(codes.Unavailable, "sessiond ended the follow stream (shutting down)")
	}
	return err
}

func drain(stream grpc.ServerStreamingClient[sessiondv1.ReadResponse], fn func(*sessiondv1.Entry) error) error {
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range resp.GetEntries() {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// List lists the sessions of the project of cwd (or projectKey), or of
// every project when both are empty, newest first.
func (c *Client) List(ctx context.Context, cwd, projectKey string) ([]*sessiondv1.SessionInfo, error) {
	infos, _, err := c.ListSessions(ctx, ListOptions{Cwd: cwd, ProjectKey: projectKey})
	return infos, err
}

// Info describes one session.
func (c *Client) Info(ctx context.Context, s Session) (*sessiondv1.SessionInfo, error) {
	return c.api.GetSession(ctx, &sessiondv1.GetSessionRequest{Session: s.ref()})
}

// Status describes the daemon.
func (c *Client) Status(ctx context.Context) (*sessiondv1.StatusResponse, error) {
	return c.api.Status(ctx, &sessiondv1.StatusRequest{})
}

// ListOptions page and filter a listing.
type ListOptions struct {
	Cwd, ProjectKey string // the project; both empty for all projects
	Limit, Offset   uint32
	Continue        bool // only the session "continue" would resume
	ExcludeArchived bool
	// Fleet lists from sessiond's PostgreSQL mirror (every machine's
	// sessions) instead of the local disk.
	Fleet bool
}

// ListSessions lists sessions with paging; it returns the page and the
// total before paging. The daemon sends the sessions in pages of its own,
// gathered here: EachSession takes them one at a time instead.
func (c *Client) ListSessions(ctx context.Context, opt ListOptions) ([]*sessiondv1.SessionInfo, uint32, error) {
	var out []*sessiondv1.SessionInfo
	total, err := c.EachSession(ctx, opt, func(in *sessiondv1.SessionInfo) error {
		out = append(out, in)
		return nil
	})
	return out, total, err
}

// EachSession calls fn for each session the listing opt names, newest
// first, as the daemon's pages arrive, and returns the total before
// paging.
func (c *Client) EachSession(ctx context.Context, opt ListOptions, fn func(*sessiondv1.SessionInfo) error) (uint32, error) {
	req := &sessiondv1.ListSessionsRequest{Limit: opt.Limit, Offset: opt.Offset, Continue: opt.Continue, ExcludeArchived: opt.ExcludeArchived, Fleet: opt.Fleet}
	switch {
	case opt.Cwd != "":
		req.Project = &sessiondv1.ListSessionsRequest_Cwd{Cwd: opt.Cwd}
	case opt.ProjectKey != "":
		req.Project = &sessiondv1.ListSessionsRequest_ProjectKey{ProjectKey: opt.ProjectKey}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.ListSessions(ctx, req)
	if err != nil {
		return 0, err
	}
	var total uint32
	err = Receive(stream, func(resp *sessiondv1.ListSessionsResponse) error {
		total = resp.GetTotal()
		for _, in := range resp.GetSessions() {
			if err := fn(in); err != nil {
				return err
			}
		}
		return nil
	})
	return total, err
}

// Check reports the damage in s: fn gets each message of the daemon's
// answer as it arrives (the first names the transcript with its counts
// and verdict; while More is set, more of its problems follow).
func (c *Client) Check(ctx context.Context, s Session, fn func(*sessiondv1.CheckResponse) error) error {
	return c.check(ctx, &sessiondv1.CheckRequest{Session: s.ref()}, fn)
}

// CheckAll checks every transcript of the project of s (s.Cwd or
// s.ProjectKey), or of all projects when both are empty: fn gets each
// message as Check's does, transcript after transcript, each as soon as
// the daemon has checked it.
func (c *Client) CheckAll(ctx context.Context, s Session, fn func(*sessiondv1.CheckResponse) error) error {
	return c.check(ctx, &sessiondv1.CheckRequest{Session: s.ref(), All: true}, fn)
}

func (c *Client) check(ctx context.Context, req *sessiondv1.CheckRequest, fn func(*sessiondv1.CheckResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Check(ctx, req)
	if err != nil {
		return err
	}
	return Receive(stream, fn)
}

// Repair repairs s (or only plans it with dryRun): fn gets each message of
// the daemon's answer as it arrives, the outcome first (Changed,
// BackupPath, the counts), then pages of actions and problems. An error
// after the first message leaves the repair done: only the details were
// lost.
func (c *Client) Repair(ctx context.Context, s Session, dryRun bool, fn func(*sessiondv1.RepairResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.Repair(ctx, &sessiondv1.RepairRequest{Session: s.ref(), DryRun: dryRun})
	if err != nil {
		return err
	}
	return Receive(stream, fn)
}

// Fork copies s into a new session (up to upTo when set).
func (c *Client) Fork(ctx context.Context, s Session, upTo, title, newID string) (*sessiondv1.ForkResponse, error) {
	return c.api.Fork(ctx, &sessiondv1.ForkRequest{Session: s.ref(), UpToUuid: upTo, Title: title, NewSessionId: newID})
}

// Pull brings session s, known only to the fleet's PostgreSQL mirror (or
// behind it here), down to this machine.
func (c *Client) Pull(ctx context.Context, s Session) (*sessiondv1.PullResponse, error) {
	return c.api.Pull(ctx, &sessiondv1.PullRequest{Session: s.ref()})
}

// Rename sets s's custom title.
func (c *Client) Rename(ctx context.Context, s Session, title string) (*sessiondv1.MetadataResponse, error) {
	return c.api.Rename(ctx, &sessiondv1.RenameRequest{Session: s.ref(), Title: title})
}

// Tag sets (or with "" clears) s's tag.
func (c *Client) Tag(ctx context.Context, s Session, tag string) (*sessiondv1.MetadataResponse, error) {
	return c.api.Tag(ctx, &sessiondv1.TagRequest{Session: s.ref(), Tag: tag})
}

// SetArchived archives or unarchives s.
func (c *Client) SetArchived(ctx context.Context, s Session, archived bool) (*sessiondv1.MetadataResponse, error) {
	return c.api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: s.ref(), Archived: archived})
}

// Delete moves s to the trash, or removes it for good with purge.
func (c *Client) Delete(ctx context.Context, s Session, purge bool) (*sessiondv1.DeleteResponse, error) {
	return c.api.Delete(ctx, &sessiondv1.DeleteRequest{Session: s.ref(), Purge: purge})
}

// Restore brings s back from the trash: its newest copy, merged into s if
// s exists again.
func (c *Client) Restore(ctx context.Context, s Session) (*sessiondv1.RestoreResponse, error) {
	return c.api.Restore(ctx, &sessiondv1.RestoreRequest{Session: s.ref()})
}

// RestoreAll brings every trashed copy of s back, oldest first, merged
// into s if s exists again.
func (c *Client) RestoreAll(ctx context.Context, s Session) (*sessiondv1.RestoreResponse, error) {
	return c.api.Restore(ctx, &sessiondv1.RestoreRequest{Session: s.ref(), All: true})
}

// ListTrash calls fn for each trashed copy of s.ID (every session's when
// it is empty) in s's project (every project's when s names none), as the
// daemon's pages arrive.
func (c *Client) ListTrash(ctx context.Context, s Session, fn func(*sessiondv1.TrashedCopy) error) error {
	req := &sessiondv1.ListTrashRequest{SessionId: s.ID}
	switch {
	case s.Cwd != "":
		req.Project = &sessiondv1.ListTrashRequest_Cwd{Cwd: s.Cwd}
	case s.ProjectKey != "":
		req.Project = &sessiondv1.ListTrashRequest_ProjectKey{ProjectKey: s.ProjectKey}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.ListTrash(ctx, req)
	if err != nil {
		return err
	}
	return Receive(stream, func(resp *sessiondv1.ListTrashResponse) error {
		for _, t := range resp.GetCopies() {
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	})
}

// Subkeys lists s's subagent transcripts.
func (c *Client) Subkeys(ctx context.Context, s Session) ([]string, error) {
	resp, err := c.api.ListSubkeys(ctx, &sessiondv1.ListSubkeysRequest{Session: s.ref()})
	if err != nil {
		return nil, err
	}
	return resp.GetSubkeys(), nil
}
