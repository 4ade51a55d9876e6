package materialize

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// Daemon is the Source of a running sessiond: GetSession, ListSubkeys and
// Read, which serve journaled entries too, so the copy holds everything
// sessiond acknowledged when each transcript was read. Its errors are the
// client's (gRPC statuses).
type Daemon struct{ C *client.Client }

// Resolve implements Source.
func (d Daemon) Resolve(ctx context.Context, ref Ref) (Session, error) {
	in, err := d.C.Info(ctx, client.Session{Cwd: ref.Cwd, ProjectKey: ref.ProjectKey, ID: ref.SessionID})
	if err != nil {
		return Session{}, err
	}
	s := in.GetSession()
	return Session{Key: layout.Key{ProjectKey: s.GetProjectKey(), SessionID: s.GetSessionId(), Subpath: s.GetSubpath()}, Cwd: in.GetCwd()}, nil
}

// Subkeys implements Source.
func (d Daemon) Subkeys(ctx context.Context, k layout.Key) ([]string, error) {
	return d.C.Subkeys(ctx, client.Session{ProjectKey: k.ProjectKey, ID: k.SessionID})
}

// Lines implements Source.
func (d Daemon) Lines(ctx context.Context, k layout.Key, fn func([]byte) error) error {
	return d.C.Read(ctx, client.Session{ProjectKey: k.ProjectKey, ID: k.SessionID, Subpath: k.Subpath}, client.ReadOptions{},
		func(e *sessiondv1.Entry) error { return fn(e.GetData()) })
}
