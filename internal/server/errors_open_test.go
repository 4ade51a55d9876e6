package server

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer"
)

// TestDescriptorsOutAtSessionOpen: a writer that cannot open its session
// because sessiond ran out of file descriptors (here at the store sidecar,
// which holds the batch ids it must remember) refuses the append through
// the edge with RESOURCE_EXHAUSTED and a message saying what to do; a
// failing disk there is UNAVAILABLE, which clients retry. The client's
// retry, once the sidecar reads again, is answered as the duplicate it
// is.
func TestDescriptorsOutAtSessionOpen(t *testing.T) {
	dir := t.TempDir()
	lay := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	ff := fstest.NewFaultFS(fsys.OS)
	open := func() (*writer.Manager, func(*sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error)) {
		m, err := writer.New(writer.Config{Layout: lay, FS: ff, Logger: zap.NewNop(), IdleCompact: time.Hour, IdleRetire: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		s := New(m, zap.NewNop(), Info{Root: lay.Root, StateDir: lay.StateDir})
		unary, _ := s.Interceptors()
		info := &grpc.UnaryServerInfo{FullMethod: "/sessiond.v1.Sessiond/Append"}
		return m, func(req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
			resp, err := unary(context.Background(), req, info, func(ctx context.Context, r any) (any, error) {
				return s.Append(ctx, r.(*sessiondv1.AppendRequest))
			})
			r, _ := resp.(*sessiondv1.AppendResponse)
			return r, err
		}
	}
	closeM := func(m *writer.Manager) {
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	k := layout.Key{ProjectKey: "-tmp-project", SessionID: "00000001-0000-4000-8000-000000000000"}
	req := &sessiondv1.AppendRequest{
		Session: &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: k.ProjectKey}, SessionId: k.SessionID},
		Entries: [][]byte{[]byte(`{"type":"queue-operation","operation":"enqueue"}`)},
		BatchId: "batch-1",
	}
	m, appendReq := open()
	if _, err := appendReq(req); err != nil {
		t.Fatal(err)
	}
	closeM(m) // compacted: the batch id lives in the store sidecar only

	m, appendReq = open()
	defer closeM(m)
	for _, c := range []struct {
		err  error
		code codes.Code
		says []string
	}{
		{syscall.EMFILE, codes.ResourceExhausted, []string{"store sidecar", "too many open files", "run out of file descriptors", "raise its limit"}},
		{syscall.EIO, codes.Unavailable, []string{"store sidecar", "input/output error", "retry"}},
	} {
		ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: func(p string) bool { return p == lay.StorePath(k) }, Err: c.err, Sticky: true})
		_, err := appendReq(req)
		st := status.Convert(err)
		if st.Code() != c.code {
			t.Fatalf("append with %v at the session's open: %v, want %v", c.err, err, c.code)
		}
		for _, want := range c.says {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("the message %q does not say %q", st.Message(), want)
			}
		}
		ff.Clear()
	}
	resp, err := appendReq(req)
	if err != nil || !resp.GetDuplicateBatch() {
		t.Fatalf("the batch resent once the sidecar reads: %v %v; want a duplicate", resp, err)
	}
}
