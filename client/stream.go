package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// Appends go over AppendStream streams kept open between calls: a new
// HTTP/2 stream per call (a unary Append) was about 40% of the daemon's CPU
// per 1 KiB append (BENCHMARKS.md). Each call takes an idle stream (or opens one),
// so concurrent appends from one Client still run concurrently and are
// grouped by the session's writer; the stream goes back to the pool
// once its answer is in.

// maxIdleStreams bounds the streams kept open per Client when idle.
const maxIdleStreams = 64

type appendStream struct {
	st     grpc.BidiStreamingClient[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]
	cancel context.CancelFunc
}

type streamPool struct {
	mu   sync.Mutex
	idle []*appendStream
	// unsupported is set when the daemon does not know AppendStream
	// (an older sessiond): appends then use unary calls.
	unsupported atomic.Bool
}

// get returns an idle stream, or a new one (fresh true) when none is
// idle or pooledOK is false.
func (p *streamPool) get(ctx context.Context, api sessiondv1.SessiondClient, pooledOK bool) (s *appendStream, fresh bool, err error) {
	if pooledOK {
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			s := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			return s, false, nil
		}
		p.mu.Unlock()
	}
	// The stream outlives the call that opens it (it goes back to the
	// pool), so it has a context of its own. The call's ctx bounds the
	// open, which waits for a connection: against a daemon that accepts
	// and never answers (stopped, hung), gRPC's connect timeout is 20 s.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	st, err := api.AppendStream(sctx)
	if !stop() {
		cancel()
		return nil, true, &contextError{ctx: ctx.Err(), last: err}
	}
	if err != nil {
		cancel()
		return nil, true, err
	}
	return &appendStream{st: st, cancel: cancel}, true, nil
}

func (p *streamPool) put(s *appendStream) {
	p.mu.Lock()
	if len(p.idle) < maxIdleStreams {
		p.idle = append(p.idle, s)
		s = nil
	}
	p.mu.Unlock()
	if s != nil {
		s.close()
	}
}

func (p *streamPool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, s := range idle {
		s.close()
	}
}

func (s *appendStream) close() {
	s.st.CloseSend()
	s.cancel()
}

// appendOnce makes one append call, on a pooled stream when the daemon
// has AppendStream. Its error is what a unary Append would have returned,
// so the retry rules in Append apply unchanged; maybeStored says whether
// the daemon may have stored the batch all the same (ErrOutcomeUnknown).
func (c *Client) appendOnce(ctx context.Context, req *sessiondv1.AppendRequest) (_ *sessiondv1.AppendResponse, maybeStored bool, _ error) {
	if c.opts.unary || c.streams.unsupported.Load() {
		return c.appendUnary(ctx, req)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, &contextError{ctx: err}
	}
	for pooledOK := true; ; pooledOK = false {
		s, fresh, err := c.streams.get(ctx, c.api, pooledOK)
		if err != nil {
			// Nothing was sent: opening a stream sends no request.
			return nil, false, err
		}
		resp, sent, err := c.appendOn(ctx, s, req)
		if !sent && !fresh && ctx.Err() == nil {
			// An idle stream that had ended meanwhile (the daemon
			// restarted, say): the request never left, so it goes again
			// on a new stream without counting as an attempt.
			continue
		}
		if status.Code(err) == codes.Unimplemented && resp == nil && c.streams.markUnsupported(err) {
			return c.appendUnary(ctx, req)
		}
		if err == nil || !sent {
			return resp, false, err
		}
		var reply *replyError
		if errors.As(err, &reply) {
			// The daemon's own answer: its UNAVAILABLE means it did not
			// take the request (a writer reopening).
			return nil, !refusal(err) && status.Code(err) != codes.Unavailable, err
		}
		return nil, !refusal(err), err
	}
}

// appendUnary makes one unary Append call. A unary call does not say
// whether its request left, so a failure that is not the daemon's refusal
// may have stored the batch, unless no connection was ever made.
func (c *Client) appendUnary(ctx context.Context, req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, bool, error) {
	resp, err := c.api.Append(ctx, req)
	if err == nil {
		return resp, false, nil
	}
	var u *UntrustedSocketError
	maybe := !refusal(err) && !errors.As(err, &u) && c.dialer.connected.Load()
	return nil, maybe, err
}

// markUnsupported reports whether err says the daemon has no
// AppendStream at all (not a refused request), and remembers it.
func (p *streamPool) markUnsupported(err error) bool {
	if _, isReply := err.(*replyError); isReply {
		return false
	}
	p.unsupported.Store(true)
	return true
}

// replyError is a request refused by the daemon inside a working stream.
type replyError struct{ st *status.Status }

func (e *replyError) Error() string              { return e.st.Err().Error() }
func (e *replyError) GRPCStatus() *status.Status { return e.st }

func (c *Client) appendOn(ctx context.Context, s *appendStream, req *sessiondv1.AppendRequest) (_ *sessiondv1.AppendResponse, sent bool, _ error) {
	// The call's ctx ending cancels the whole stream: the request may be
	// half sent or in the daemon's hands, exactly as with a cancelled
	// unary call, and the stream cannot be reused.
	stop := context.AfterFunc(ctx, s.cancel)
	err := s.st.Send(req)
	sent = err == nil
	var out *sessiondv1.AppendStreamResponse
	// After a failed Send, Recv gives the status the stream ended with.
	out, rerr := s.st.Recv()
	if err == nil {
		err = rerr
	} else if rerr != nil && rerr != io.EOF {
		err = rerr
	}
	if !stop() {
		// ctx ended first (the stream was cancelled).
		s.close()
		if ctx.Err() != nil {
			return nil, sent, &contextError{ctx: ctx.Err()}
		}
		return nil, sent, err
	}
	if err != nil {
		// The stream broke: its status is the call's answer (for
		// instance UNAVAILABLE with NOT_PROCESSED from a draining daemon).
		s.close()
		return nil, sent, err
	}
	c.streams.put(s)
	if e := out.GetError(); e != nil {
		st := status.New(codes.Code(e.GetCode()), e.GetMessage())
		if e.GetReason() != "" {
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: e.GetReason(), Domain: sessiondv1.ErrorDomain}); derr == nil {
				st = d
			}
		}
		return nil, true, &replyError{st: st}
	}
	if out.GetResponse() == nil {
		return nil, true, status.Error(codes.Internal, "sessiond answered an append with neither a result nor an error")
	}
	return out.GetResponse(), true, nil
}
