package server

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/repair"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/trash"
)

// Check implements sessiond.v1.Sessiond: each transcript's result is sent
// as soon as it is checked, its problems in pages.
func (s *Server) Check(req *sessiondv1.CheckRequest, stream grpc.ServerStreamingServer[sessiondv1.CheckResponse]) error {
	ctx := stream.Context()
	send := func(r repair.CheckResult) error { return s.sendCheck(stream, r) }
	if req.GetAll() {
		pk, _, err := projectOf(req.GetSession().GetProject())
		if err != nil {
			return err
		}
		keys, err := s.cat.AllKeys(pk, true)
		if err != nil {
			return err
		}
		return s.m.Repairs().CheckAll(ctx, keys, send)
	}
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return err
	}
	r, err := s.m.Repairs().Check(ctx, k)
	if err != nil {
		return err
	}
	return send(r)
}

// sendCheck sends one transcript's result: its counts and verdict in the
// first message, its problems in as many as they need.
func (s *Server) sendCheck(stream grpc.ServerStreamingServer[sessiondv1.CheckResponse], r repair.CheckResult) error {
	rep := r.Report
	session := s.resolved(r.Key)
	msg := &sessiondv1.CheckResponse{Session: session, Lines: uint64(rep.Lines), Entries: uint64(rep.Entries),
		ProblemCount: uint64(len(rep.Problems)), Clean: rep.Clean()}
	pg := newPager(s.pageBudget(), func(page []*sessiondv1.Problem, more bool) error {
		if msg == nil {
			msg = &sessiondv1.CheckResponse{Session: session}
		}
		msg.Problems, msg.More = page, more
		err := stream.Send(msg)
		msg = nil
		return err
	})
	if err := addProblems(pg, rep.Problems); err != nil {
		return err
	}
	return pg.close()
}

// Repair implements sessiond.v1.Sessiond: the outcome first, then the
// actions, the problems found before and those left, in pages.
func (s *Server) Repair(req *sessiondv1.RepairRequest, stream grpc.ServerStreamingServer[sessiondv1.RepairResponse]) error {
	ctx := stream.Context()
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return err
	}
	o, err := s.m.Repairs().Repair(ctx, k, req.GetDryRun())
	if err != nil {
		return err
	}
	res := o.Result
	var before, after []damage.Problem
	if res.Before != nil {
		before = res.Before.Problems
	}
	if res.After != nil {
		after = res.After.Problems
	}
	session := s.resolved(k)
	if err := stream.Send(&sessiondv1.RepairResponse{Session: session, Changed: res.Changed, BackupPath: o.Backup,
		ActionCount: uint64(len(res.Actions)), BeforeCount: uint64(len(before)), AfterCount: uint64(len(after))}); err != nil {
		return err
	}
	budget := s.pageBudget()
	acts := newPager(budget, func(page []*sessiondv1.RepairAction, _ bool) error {
		if len(page) == 0 {
			return nil
		}
		return stream.Send(&sessiondv1.RepairResponse{Session: session, Actions: page})
	})
	for _, a := range res.Actions {
		if err := acts.add(&sessiondv1.RepairAction{Line: uint64(a.Line), Kind: a.Kind, Detail: cutText(a.Detail, budget/4), Before: a.Before, After: a.After}); err != nil {
			return err
		}
	}
	if err := acts.close(); err != nil {
		return err
	}
	for _, part := range []struct {
		ps    []damage.Problem
		after bool
	}{{before, false}, {after, true}} {
		pg := newPager(budget, func(page []*sessiondv1.Problem, _ bool) error {
			if len(page) == 0 {
				return nil
			}
			msg := &sessiondv1.RepairResponse{Session: session, Before: page}
			if part.after {
				msg = &sessiondv1.RepairResponse{Session: session, After: page}
			}
			return stream.Send(msg)
		})
		if err := addProblems(pg, part.ps); err != nil {
			return err
		}
		if err := pg.close(); err != nil {
			return err
		}
	}
	return nil
}

// Fork implements sessiond.v1.Sessiond.
func (s *Server) Fork(ctx context.Context, req *sessiondv1.ForkRequest) (*sessiondv1.ForkResponse, error) {
	k, err := s.resolvePulling(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	id := req.GetNewSessionId()
	if id != "" {
		if err := layout.ValidateSessionID(id); err != nil {
			return nil, fmt.Errorf("new session id: %w", err)
		}
		// Under the name the id is stored under, so that a fork onto an
		// existing session in another case is refused as existing.
		target, err := s.cat.SessionKey(layout.Key{ProjectKey: k.ProjectKey, SessionID: id})
		if err != nil {
			return nil, fmt.Errorf("fork target: %w", err)
		}
		if err := s.info.layout().CheckOnDisk(target); err != nil {
			return nil, fmt.Errorf("fork target: %w", err)
		}
		id = target.SessionID
	}
	o, err := s.m.Repairs().Fork(ctx, k, req.GetUpToUuid(), req.GetTitle(), id)
	if err != nil {
		return nil, err
	}
	return &sessiondv1.ForkResponse{Session: s.resolved(o.Key), Entries: uint64(o.Entries), Title: o.Title}, nil
}

// Rename implements sessiond.v1.Sessiond.
func (s *Server) Rename(ctx context.Context, req *sessiondv1.RenameRequest) (*sessiondv1.MetadataResponse, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	title, err := transcript.NormalizeTitle(req.GetTitle())
	if err != nil {
		return nil, err
	}
	if err := s.m.AppendMetadata(ctx, k, transcript.CustomTitleLine(k.SessionID, title)); err != nil {
		return nil, err
	}
	return &sessiondv1.MetadataResponse{Session: s.resolved(k)}, nil
}

// Tag implements sessiond.v1.Sessiond.
func (s *Server) Tag(ctx context.Context, req *sessiondv1.TagRequest) (*sessiondv1.MetadataResponse, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	tag, err := transcript.NormalizeTag(req.GetTag())
	if err != nil {
		return nil, err
	}
	if err := s.m.AppendMetadata(ctx, k, transcript.TagLine(k.SessionID, tag)); err != nil {
		return nil, err
	}
	return &sessiondv1.MetadataResponse{Session: s.resolved(k)}, nil
}

// SetArchived implements sessiond.v1.Sessiond.
func (s *Server) SetArchived(ctx context.Context, req *sessiondv1.SetArchivedRequest) (*sessiondv1.MetadataResponse, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	if err := s.m.SetArchived(ctx, k, req.GetArchived()); err != nil {
		return nil, err
	}
	return &sessiondv1.MetadataResponse{Session: s.resolved(k)}, nil
}

// Delete implements sessiond.v1.Sessiond.
func (s *Server) Delete(ctx context.Context, req *sessiondv1.DeleteRequest) (*sessiondv1.DeleteResponse, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	entry, err := s.m.Trash().Delete(ctx, k, req.GetPurge())
	if err != nil {
		return nil, err
	}
	return &sessiondv1.DeleteResponse{Session: s.resolved(k), TrashPath: entry}, nil
}

// Restore implements sessiond.v1.Sessiond.
func (s *Server) Restore(ctx context.Context, req *sessiondv1.RestoreRequest) (*sessiondv1.RestoreResponse, error) {
	ref := req.GetSession()
	if err := layout.ValidateSessionID(ref.GetSessionId()); err != nil {
		return nil, err
	}
	pk, _, err := projectOf(ref.GetProject())
	if err != nil {
		return nil, err
	}
	// A deleted session is found in the trash, not among the projects:
	// under its lower-case id, or where there is none, under the id as
	// given (see catalog.Catalog.SessionKey).
	forms := layout.SessionIDForms(ref.GetSessionId())
	id, projects := forms[0], []string(nil)
	for _, f := range forms {
		if projects, err = s.m.Trash().Projects(f, ref.GetSubpath()); err != nil {
			return nil, err
		}
		if pk != "" && slices.Contains(projects, pk) || pk == "" && len(projects) > 0 {
			id = f
			break
		}
	}
	if pk == "" {
		switch len(projects) {
		case 0:
			return nil, trash.NotFound(layout.Key{SessionID: ref.GetSessionId(), Subpath: ref.GetSubpath()})
		case 1:
			pk = projects[0]
		default:
			return nil, fmt.Errorf("deleted session %s is in the trash of several projects (%v); name the project: %w", ref.GetSessionId(), projects, errdefs.ErrAmbiguous)
		}
	}
	k := layout.Key{ProjectKey: pk, SessionID: id, Subpath: ref.GetSubpath()}
	if err := s.info.layout().CheckOnDisk(k); err != nil {
		return nil, err
	}
	o, err := s.m.Trash().RestoreCopies(ctx, k, trash.RestoreOptions{All: req.GetAll()})
	if err != nil {
		return nil, err
	}
	return &sessiondv1.RestoreResponse{Session: s.resolved(k), Copies: uint32(o.Copies), Merged: o.Merged,
		Entries: o.Entries, Duplicates: o.Duplicates}, nil
}

// ListTrash implements sessiond.v1.Sessiond.
func (s *Server) ListTrash(req *sessiondv1.ListTrashRequest, stream grpc.ServerStreamingServer[sessiondv1.ListTrashResponse]) error {
	pk, _, err := projectOf(req.GetProject())
	if err != nil {
		return err
	}
	if id := req.GetSessionId(); id != "" {
		if err := layout.ValidateSessionID(id); err != nil {
			return err
		}
	}
	copies, err := s.m.Trash().List(stream.Context(), pk, req.GetSessionId())
	if err != nil {
		return err
	}
	pg := newPager(s.pageBudget(), func(page []*sessiondv1.TrashedCopy, _ bool) error {
		return stream.Send(&sessiondv1.ListTrashResponse{Copies: page})
	})
	for _, c := range copies {
		if err := pg.add(&sessiondv1.TrashedCopy{ProjectKey: c.Key.ProjectKey, SessionId: c.Key.SessionID,
			Subpath: c.Key.Subpath, DeletedMs: c.DeletedAt.UnixMilli(), Entries: c.Entries, Transcripts: uint32(c.Transcripts),
			Bytes: uint64(c.Bytes), Path: c.Path}); err != nil {
			return err
		}
	}
	return pg.close()
}

// ListSubkeys implements sessiond.v1.Sessiond.
func (s *Server) ListSubkeys(ctx context.Context, req *sessiondv1.ListSubkeysRequest) (*sessiondv1.ListSubkeysResponse, error) {
	ref := req.GetSession()
	k, err := s.resolve(&sessiondv1.SessionRef{Project: ref.GetProject(), SessionId: ref.GetSessionId()}, false)
	if err != nil {
		return nil, err
	}
	subs, err := s.cat.Subkeys(k)
	if err != nil {
		return nil, err
	}
	return &sessiondv1.ListSubkeysResponse{Subkeys: subs}, nil
}
