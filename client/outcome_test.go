package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// lossyDaemon receives appends and then, as told, loses the answer (the
// stream ends as a broken connection would end it), answers with a
// status, or answers; it remembers batch ids as sessiond does.
type lossyDaemon struct {
	sessiondv1.UnimplementedSessiondServer
	mu       sync.Mutex
	received []string        // the batch id of each request received
	stored   map[string]bool // batch ids stored
	loseNext int             // answers to lose, after storing the batch
	reply    error           // when set, the answer to every request
	arrived  chan struct{}   // when set, told of each request, which then waits for hold
	hold     chan struct{}
}

func (f *lossyDaemon) AppendStream(st grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if f.arrived != nil {
			f.arrived <- struct{}{}
			<-f.hold
		}
		f.mu.Lock()
		f.received = append(f.received, req.GetBatchId())
		if f.stored == nil {
			f.stored = map[string]bool{}
		}
		dup := f.stored[req.GetBatchId()]
		f.stored[req.GetBatchId()] = true
		lose := f.loseNext > 0
		if lose {
			f.loseNext--
		}
		reply := f.reply
		f.mu.Unlock()
		if lose {
			return status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		out := &sessiondv1.AppendStreamResponse{Response: &sessiondv1.AppendResponse{DuplicateBatch: dup}}
		if reply != nil {
			out = &sessiondv1.AppendStreamResponse{Error: &sessiondv1.AppendError{Code: int32(status.Code(reply)), Message: status.Convert(reply).Message()}}
		}
		if err := st.Send(out); err != nil {
			return err
		}
	}
}

func serveLossy(t *testing.T, f *lossyDaemon) (string, *grpc.Server) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sessiondv1.RegisterSessiondServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return sock, g
}

// TestAppendBatchResendsLostAnswer: an answer lost after the daemon took
// the batch is retried with the same batch id, so the daemon can tell it
// is the same batch and store it once.
func TestAppendBatchResendsLostAnswer(t *testing.T) {
	f := &lossyDaemon{loseNext: 2}
	sock, _ := serveLossy(t, f)
	c, err := Dial(sock, WithRetry(4, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.AppendBatch(context.Background(), sess, "batch-1", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetDuplicateBatch() {
		t.Error("the answer to the resent batch is not a duplicate batch")
	}
	if len(f.received) != 3 || f.received[0] != "batch-1" || f.received[1] != "batch-1" || f.received[2] != "batch-1" {
		t.Errorf("the daemon received batch ids %q, want batch-1 three times", f.received)
	}

	// Without a batch id (or uuids), a lost answer is not retried: a
	// resend could store the entries twice.
	f.loseNext = 1
	_, err = c.Append(context.Background(), sess, []byte(`{}`))
	if !errors.Is(err, ErrOutcomeUnknown) || status.Code(err) != codes.Unavailable {
		t.Fatalf("append whose answer was lost: %v, want UNAVAILABLE and ErrOutcomeUnknown", err)
	}
	if len(f.received) != 4 {
		t.Errorf("%d requests received, want 4: an append without batch id or uuids was retried", len(f.received))
	}
}

// TestAppendOutcome: only an error that says the daemon did not store the
// batch leaves out ErrOutcomeUnknown.
func TestAppendOutcome(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "the session's writer is reopening")
	for _, c := range []struct {
		name    string
		reply   error
		unknown bool
	}{
		{"refused", status.Error(codes.InvalidArgument, "entry 1 of 1: not JSON"), false},
		{"too large", status.Error(codes.ResourceExhausted, "too large"), false},
		{"unavailable answer", unavailable, false},
		{"internal", status.Error(codes.Internal, "journal sync: i/o error"), true},
		{"data loss", status.Error(codes.DataLoss, "corrupt"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock, _ := serveLossy(t, &lossyDaemon{reply: c.reply})
			cl, err := Dial(sock, WithRetry(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = cl.AppendBatch(context.Background(), sess, "b", []byte(`{}`))
			if status.Code(err) != status.Code(c.reply) || errors.Is(err, ErrOutcomeUnknown) != c.unknown {
				t.Errorf("%v: code %v, unknown %v; want %v, %v", err, status.Code(err), errors.Is(err, ErrOutcomeUnknown), status.Code(c.reply), c.unknown)
			}
		})
	}

	t.Run("connection lost", func(t *testing.T) {
		f := &lossyDaemon{arrived: make(chan struct{}, 1), hold: make(chan struct{})}
		sock, g := serveLossy(t, f)
		cl, err := Dial(sock, WithRetry(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		go func() {
			<-f.arrived
			g.Stop() // the daemon dies holding the request
			close(f.hold)
		}()
		_, err = cl.AppendBatch(context.Background(), sess, "b", []byte(`{}`))
		if !errors.Is(err, ErrOutcomeUnknown) || status.Code(err) != codes.Unavailable {
			t.Errorf("daemon gone with the request: %v, want UNAVAILABLE and ErrOutcomeUnknown", err)
		}
	})

	t.Run("deadline after send", func(t *testing.T) {
		f := &lossyDaemon{arrived: make(chan struct{}, 1), hold: make(chan struct{})}
		sock, _ := serveLossy(t, f)
		defer close(f.hold)
		cl, err := Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err = cl.AppendBatch(ctx, sess, "b", []byte(`{}`))
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline with the request at the daemon: %v, want the deadline and ErrOutcomeUnknown", err)
		}
	})

	t.Run("draining", func(t *testing.T) {
		f := &fakeDaemon{}
		cl, err := Dial(serveFake(t, f), WithRetry(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		_, err = cl.AppendBatch(context.Background(), sess, "b", []byte("drain"))
		if !notProcessed(err) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("NOT_PROCESSED: %v, want it known that nothing was stored", err)
		}
	})

	t.Run("unary lost", func(t *testing.T) {
		f := &fakeDaemon{block: make(chan struct{})}
		sock := filepath.Join(shortDir(t), "s.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		sessiondv1.RegisterSessiondServer(g, f)
		go g.Serve(ln)
		defer g.Stop()
		cl, err := Dial(sock, WithRetry(1, 0), WithUnaryAppend())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		time.AfterFunc(callTimeout, func() { g.Stop(); close(f.block) })
		_, err = cl.AppendBatch(context.Background(), sess, "b", []byte(`{}`))
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("unary append whose daemon died: %v, want ErrOutcomeUnknown", err)
		}
	})
}
