package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/errdefs"
)

// wantCodes is the documented code of each kind, written out here (not
// read from errdefs) so that moving a kind to another code fails a test.
var wantCodes = map[error]codes.Code{
	errdefs.ErrInvalidArgument:    codes.InvalidArgument,
	errdefs.ErrTooLarge:           codes.InvalidArgument,
	errdefs.ErrNotFound:           codes.NotFound,
	errdefs.ErrAlreadyExists:      codes.AlreadyExists,
	errdefs.ErrConflict:           codes.Aborted,
	errdefs.ErrAmbiguous:          codes.FailedPrecondition,
	errdefs.ErrUnsafePath:         codes.FailedPrecondition,
	errdefs.ErrFailedPrecondition: codes.FailedPrecondition,
	errdefs.ErrLeased:             codes.FailedPrecondition,
	errdefs.ErrNoSpace:            codes.ResourceExhausted,
	errdefs.ErrNoDescriptors:      codes.ResourceExhausted,
	errdefs.ErrUnavailable:        codes.Unavailable,
	errdefs.ErrCorrupt:            codes.DataLoss,
	errdefs.ErrIO:                 codes.Internal,
}

// failingDaemon answers every GetSession and AppendStream request with
// err, as a handler whose call below failed would.
type failingDaemon struct {
	sessiondv1.UnimplementedSessiondServer
	err error
}

func (f *failingDaemon) GetSession(context.Context, *sessiondv1.GetSessionRequest) (*sessiondv1.SessionInfo, error) {
	return nil, f.err
}

func (f *failingDaemon) AppendStream(st grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	for {
		if _, err := st.Recv(); err != nil {
			return nil
		}
		if err := st.Send(&sessiondv1.AppendStreamResponse{Error: appendError(f.err)}); err != nil {
			return err
		}
	}
}

// TestEveryKindReachesTheClient: for every kind errdefs lists, a wrapped
// error of that kind leaves the edge (the unary interceptor, and an
// AppendStream's in-band error) with its documented code, and the Go
// client hands its caller that code and the message, kind included.
func TestEveryKindReachesTheClient(t *testing.T) {
	if len(errdefs.Kinds) != len(wantCodes) {
		t.Fatalf("errdefs lists %d kinds, this test %d: give the new kind its code here", len(errdefs.Kinds), len(wantCodes))
	}
	dir, err := os.MkdirTemp("", "kinds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &failingDaemon{}
	unary, stream := New(nil, zap.NewNop(), Info{}).Interceptors()
	g := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	sessiondv1.RegisterSessiondServer(g, f)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	c, err := client.Dial(sock, client.WithRetry(1, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := client.Session{ProjectKey: "-p", ID: "0b8f5c4e-1f7a-4c1e-9a57-3f4b8f8c2d11"}
	for _, k := range errdefs.Kinds {
		want, ok := wantCodes[k.Err]
		if !ok {
			t.Errorf("kind %q has no documented code in this test", k.Err)
			continue
		}
		f.err = fmt.Errorf("session %s: %w", s.ID, k.Err)
		_, uerr := c.Info(ctx, s)
		_, aerr := c.Append(ctx, s, []byte(`{"type":"user"}`))
		for _, got := range []struct {
			call string
			err  error
		}{{"GetSession", uerr}, {"AppendStream", aerr}} {
			st := status.Convert(got.err)
			if st.Code() != want || !strings.Contains(st.Message(), k.Err.Error()) {
				t.Errorf("%s failing with %q: the client got %v %q, want %v", got.call, f.err, st.Code(), st.Message(), want)
			}
		}
	}
}
