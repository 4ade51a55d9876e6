package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror"
)

// fleet is what the handlers ask of the PostgreSQL mirror: the sessions
// it pulls down (when to pull is its policy, mirror.Puller) and its
// listing of every machine's sessions.
type fleet interface {
	Pull(ctx context.Context, project, id string) (mirror.Pulled, error)
	BeforeAppend(ctx context.Context, k layout.Key) error
	BeforeRead(ctx context.Context, k layout.Key) error
	List(ctx context.Context, projectKey string) ([]mirror.FleetSession, error)
}

// mirrorFleet is the fleet of a daemon run with --mirror.
type mirrorFleet struct {
	*mirror.Puller
	*mirror.Mirror
}

// noMirror is the fleet of a daemon run without --mirror: nothing to
// pull before a call, and nothing to pull or list when asked.
type noMirror struct{}

func (noMirror) Pull(context.Context, string, string) (mirror.Pulled, error) {
	return mirror.Pulled{}, fmt.Errorf("sessiond runs without a PostgreSQL mirror (start it with --mirror or SESSIOND_MIRROR) so it has nothing to pull from: %w", errdefs.ErrFailedPrecondition)
}

func (noMirror) BeforeAppend(context.Context, layout.Key) error { return nil }
func (noMirror) BeforeRead(context.Context, layout.Key) error   { return nil }

func (noMirror) List(context.Context, string) ([]mirror.FleetSession, error) {
	return nil, fmt.Errorf("sessiond runs without a PostgreSQL mirror (start it with --mirror or SESSIOND_MIRROR), so it has no fleet to list: %w", errdefs.ErrFailedPrecondition)
}

// Pull implements sessiond.v1.Sessiond.
func (s *Server) Pull(ctx context.Context, req *sessiondv1.PullRequest) (*sessiondv1.PullResponse, error) {
	ref := req.GetSession()
	if ref.GetSubpath() != "" {
		return nil, fmt.Errorf("pull brings a whole session with its subagents; name the session without a subpath: %w", errdefs.ErrInvalidArgument)
	}
	k, err := s.resolveRef(ref, false)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	project := k.ProjectKey
	if ref.GetProject() == nil {
		project = ""
	}
	p, err := s.fleet.Pull(ctx, project, k.SessionID)
	if err != nil {
		return nil, err
	}
	out := &sessiondv1.PullResponse{Session: s.resolved(p.Key)}
	for _, t := range p.Transcripts {
		out.Transcripts = append(out.Transcripts, &sessiondv1.PulledTranscript{Subpath: t.Subpath, Entries: t.Entries, Action: t.Action})
	}
	for _, sc := range p.Sidecars {
		out.Sidecars = append(out.Sidecars, &sessiondv1.PulledSidecar{Name: sc.Name, Action: sc.Action})
	}
	return out, nil
}

// resolvePulling is resolve for calls that read a session (Read, Fork):
// a session that is not here but in PostgreSQL is pulled first.
func (s *Server) resolvePulling(ctx context.Context, ref *sessiondv1.SessionRef) (layout.Key, error) {
	k, err := s.resolve(ref, false)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return k, err
	}
	if perr := s.fleet.BeforeRead(ctx, k); perr != nil {
		return k, perr
	}
	if err != nil {
		return s.resolve(ref, false)
	}
	return k, nil
}

// listFleet lists pk's sessions ("" for every project's) from PostgreSQL,
// with the columns of the local listing it has: entries, size, modified
// time and title (the path is where a pull would write the session).
func (s *Server) listFleet(ctx context.Context, pk string, req *sessiondv1.ListSessionsRequest, stream grpc.ServerStreamingServer[sessiondv1.ListSessionsResponse]) error {
	if req.GetContinue() {
		return fmt.Errorf("the fleet listing cannot tell sidechains (PostgreSQL holds no such mark); leave --continue out: %w", errdefs.ErrInvalidArgument)
	}
	list, err := s.fleet.List(ctx, pk)
	if err != nil {
		return err
	}
	if req.GetExcludeArchived() {
		list = slices.DeleteFunc(list, func(f mirror.FleetSession) bool { return f.Archived })
	}
	pg := s.sessionPager(stream, len(list))
	list = list[min(int(req.GetOffset()), len(list)):]
	if l := int(req.GetLimit()); l > 0 && l < len(list) {
		list = list[:l]
	}
	for _, f := range list {
		session := &sessiondv1.ResolvedSession{ProjectKey: f.Key.ProjectKey, SessionId: f.Key.SessionID}
		if layout.ValidateProjectKey(f.Key.ProjectKey) == nil && layout.ValidateSessionID(f.Key.SessionID) == nil {
			session = s.resolved(f.Key)
		}
		if err := pg.add(&sessiondv1.SessionInfo{Session: session, Title: f.Title, Summary: f.Title,
			Entries: f.Entries, Bytes: f.Bytes, ModifiedMs: f.ModifiedMs, Archived: f.Archived}); err != nil {
			return err
		}
	}
	return pg.close()
}
