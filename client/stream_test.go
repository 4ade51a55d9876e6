package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// fakeDaemon answers appends without storing anything: these tests are
// about the client's use of streams, not about the daemon.
type fakeDaemon struct {
	sessiondv1.UnimplementedSessiondServer
	noStream bool // behave like an older sessiond without AppendStream

	unary, streamed, opened atomic.Int64
	block                   chan struct{} // when set, answers wait for it
}

func (f *fakeDaemon) answer(req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
	if f.block != nil {
		<-f.block
	}
	if len(req.GetEntries()) == 1 && string(req.GetEntries()[0]) == "refuse" {
		return nil, status.Error(codes.InvalidArgument, "entry 1 of 1: refused")
	}
	if len(req.GetEntries()) == 1 && string(req.GetEntries()[0]) == "drain" {
		st, _ := status.New(codes.Unavailable, "draining").WithDetails(&errdetails.ErrorInfo{Reason: "NOT_PROCESSED", Domain: "sessiond"})
		return nil, st.Err()
	}
	return &sessiondv1.AppendResponse{Entries: uint64(len(req.GetEntries()))}, nil
}

func (f *fakeDaemon) Append(_ context.Context, req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
	f.unary.Add(1)
	return f.answer(req)
}

func (f *fakeDaemon) AppendStream(st grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	if f.noStream {
		return status.Error(codes.Unimplemented, "unknown method AppendStream")
	}
	f.opened.Add(1)
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		f.streamed.Add(1)
		out := &sessiondv1.AppendStreamResponse{}
		if resp, err := f.answer(req); err != nil {
			s := status.Convert(err)
			out.Error = &sessiondv1.AppendError{Code: int32(s.Code()), Message: s.Message()}
			for _, d := range s.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					out.Error.Reason = info.GetReason()
				}
			}
		} else {
			out.Response = resp
		}
		if err := st.Send(out); err != nil {
			return err
		}
	}
}

func serveFake(t *testing.T, f *fakeDaemon) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sessiondv1.RegisterSessiondServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return sock
}

var sess = Session{ProjectKey: "-p", ID: "6f1c58a4-3d6b-4c1e-9a57-2f1f2f1f2f1f"}

func TestAppendReusesStreams(t *testing.T) {
	f := &fakeDaemon{}
	c, err := Dial(serveFake(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := c.Append(ctx, sess, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if f.streamed.Load() != 20 || f.unary.Load() != 0 || f.opened.Load() != 1 {
		t.Fatalf("20 sequential appends: %d streamed on %d streams, %d unary; want 20 on 1, 0", f.streamed.Load(), f.opened.Load(), f.unary.Load())
	}
	// Concurrent appends get streams of their own (so the daemon can
	// group them), and the streams come back to the pool.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				if _, err := c.Append(ctx, sess, []byte(`{}`)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if f.streamed.Load() != 100 || f.opened.Load() > 9 {
		t.Fatalf("after 80 concurrent appends: %d streamed on %d streams", f.streamed.Load(), f.opened.Load())
	}
}

func TestAppendStreamRefusalKeepsStream(t *testing.T) {
	f := &fakeDaemon{}
	c, err := Dial(serveFake(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, err = c.Append(ctx, sess, []byte("refuse"))
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "entry 1 of 1: refused" {
		t.Fatalf("refused append: %v", err)
	}
	if _, err := c.Append(ctx, sess, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if f.opened.Load() != 1 {
		t.Fatalf("%d streams opened; a refused request must not end its stream", f.opened.Load())
	}
}

func TestAppendStreamNotProcessedIsRetried(t *testing.T) {
	f := &fakeDaemon{}
	c, err := Dial(serveFake(t, f), WithRetry(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No uuid: only the NOT_PROCESSED reason, carried through the stream's
	// error, allows the retries.
	_, err = c.Append(context.Background(), sess, []byte("drain"))
	if status.Code(err) != codes.Unavailable || !notProcessed(err) {
		t.Fatalf("append answered NOT_PROCESSED: %v", err)
	}
	if f.streamed.Load() != 3 {
		t.Fatalf("%d attempts, want 3 (WithRetry)", f.streamed.Load())
	}
}

func TestAppendFallsBackToUnary(t *testing.T) {
	f := &fakeDaemon{noStream: true}
	c, err := Dial(serveFake(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		if _, err := c.Append(context.Background(), sess, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if f.unary.Load() != 3 {
		t.Fatalf("%d unary appends against a daemon without AppendStream, want 3", f.unary.Load())
	}

	g := &fakeDaemon{}
	c2, err := Dial(serveFake(t, g), WithUnaryAppend())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Append(context.Background(), sess, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if g.unary.Load() != 1 || g.streamed.Load() != 0 {
		t.Fatalf("WithUnaryAppend: %d unary, %d streamed", g.unary.Load(), g.streamed.Load())
	}
}

func TestAppendStreamCallContext(t *testing.T) {
	f := &fakeDaemon{block: make(chan struct{})}
	c, err := Dial(serveFake(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Append(ctx, sess, []byte(`{}`))
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("append past its deadline: %v", err)
	}
	close(f.block)
	// The stream the expired call used is gone; the next call opens another.
	if _, err := c.Append(context.Background(), sess, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if f.opened.Load() != 2 {
		t.Fatalf("%d streams opened, want 2 (the interrupted one is not reused)", f.opened.Load())
	}
}

// Only sessiond's own NOT_PROCESSED detail makes a call safe to retry: the
// same reason from another domain (a proxy, another service) does not.
func TestNotProcessedMatchesDomainAndReason(t *testing.T) {
	for _, c := range []struct {
		domain, reason string
		want           bool
	}{
		{"sessiond", "NOT_PROCESSED", true},
		{"example.com", "NOT_PROCESSED", false},
		{"sessiond", "OTHER", false},
	} {
		st, err := status.New(codes.Unavailable, "x").WithDetails(&errdetails.ErrorInfo{Domain: c.domain, Reason: c.reason})
		if err != nil {
			t.Fatal(err)
		}
		if got := notProcessed(st.Err()); got != c.want {
			t.Errorf("domain %q reason %q: notProcessed = %v, want %v", c.domain, c.reason, got, c.want)
		}
	}
	if notProcessed(status.Error(codes.Unavailable, "no details")) {
		t.Error("an error without details counted as not processed")
	}
}
