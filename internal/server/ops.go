package server

import (
	"context"
	"fmt"
	"slices"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/writer"
)

// projectOf returns the project named by ref (cwd or project key), or ""
// when it names none.
func projectOf(ref *sessiondv1.SessionRef) (string, error) {
	switch p := ref.GetProject().(type) {
	case *sessiondv1.SessionRef_Cwd:
		return layout.ProjectKeyFromCwd(p.Cwd)
	case *sessiondv1.SessionRef_ProjectKey:
		if err := layout.ValidateProjectKey(p.ProjectKey); err != nil {
			return "", err
		}
		return p.ProjectKey, nil
	}
	return "", nil
}

func problems(ps []transcript.Problem) []*sessiondv1.Problem {
	out := make([]*sessiondv1.Problem, len(ps))
	for i, p := range ps {
		out[i] = &sessiondv1.Problem{Line: uint64(p.Line), Offset: uint64(p.Offset), Kind: p.Kind, Message: p.Message, Ids: p.IDs, Warning: p.Warning()}
	}
	return out
}

// Check implements sessiond.v1.Sessiond.
func (s *Server) Check(ctx context.Context, req *sessiondv1.CheckRequest) (*sessiondv1.CheckResponse, error) {
	var results []writer.CheckResult
	if req.GetAll() {
		pk, err := projectOf(req.GetSession())
		if err != nil {
			return nil, err
		}
		results, err = s.m.CheckAll(ctx, pk)
		if err != nil {
			return nil, err
		}
	} else {
		k, err := s.resolve(req.GetSession(), false)
		if err != nil {
			return nil, err
		}
		r, err := s.m.Check(ctx, k)
		if err != nil {
			return nil, err
		}
		results = []writer.CheckResult{r}
	}
	out := &sessiondv1.CheckResponse{Clean: true}
	for _, r := range results {
		out.Sessions = append(out.Sessions, &sessiondv1.SessionCheck{Session: s.resolved(r.Key),
			Lines: uint64(r.Report.Lines), Entries: uint64(r.Report.Entries), Problems: problems(r.Report.Problems)})
		if !r.Report.Clean() {
			out.Clean = false
		}
	}
	return out, nil
}

// Repair implements sessiond.v1.Sessiond.
func (s *Server) Repair(ctx context.Context, req *sessiondv1.RepairRequest) (*sessiondv1.RepairResponse, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	o, err := s.m.Repair(ctx, k, req.GetDryRun())
	if err != nil {
		return nil, err
	}
	out := &sessiondv1.RepairResponse{Session: s.resolved(k), Changed: o.Result.Changed, BackupPath: o.Backup}
	for _, a := range o.Result.Actions {
		out.Actions = append(out.Actions, &sessiondv1.RepairAction{Line: uint64(a.Line), Kind: a.Kind, Detail: a.Detail, Before: a.Before, After: a.After})
	}
	if o.Result.Before != nil {
		out.Before = problems(o.Result.Before.Problems)
	}
	if o.Result.After != nil {
		out.After = problems(o.Result.After.Problems)
	}
	return out, nil
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
		target := s.m.SessionKey(layout.Key{ProjectKey: k.ProjectKey, SessionID: id})
		if err := s.info.layout().CheckOnDisk(target); err != nil {
			return nil, fmt.Errorf("fork target: %w", err)
		}
		id = target.SessionID
	}
	o, err := s.m.Fork(ctx, k, req.GetUpToUuid(), req.GetTitle(), id)
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
	trash, err := s.m.Delete(ctx, k, req.GetPurge())
	if err != nil {
		return nil, err
	}
	return &sessiondv1.DeleteResponse{Session: s.resolved(k), TrashPath: trash}, nil
}

// Restore implements sessiond.v1.Sessiond.
func (s *Server) Restore(ctx context.Context, req *sessiondv1.RestoreRequest) (*sessiondv1.RestoreResponse, error) {
	ref := req.GetSession()
	if err := layout.ValidateSessionID(ref.GetSessionId()); err != nil {
		return nil, err
	}
	pk, err := projectOf(ref)
	if err != nil {
		return nil, err
	}
	// A deleted session is found in the trash, not among the projects:
	// under its lower-case id, or where there is none, under the id as
	// given (see writer.Manager.SessionKey).
	forms := layout.SessionIDForms(ref.GetSessionId())
	id, projects := forms[0], []string(nil)
	for _, f := range forms {
		if projects, err = s.m.TrashedProjects(f, ref.GetSubpath()); err != nil {
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
			return nil, writer.NotInTrash(layout.Key{SessionID: ref.GetSessionId(), Subpath: ref.GetSubpath()})
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
	o, err := s.m.RestoreTrash(ctx, k, writer.RestoreOptions{All: req.GetAll()})
	if err != nil {
		return nil, err
	}
	return &sessiondv1.RestoreResponse{Session: s.resolved(k), Copies: uint32(o.Copies), Merged: o.Merged,
		Entries: o.Entries, Duplicates: o.Duplicates}, nil
}

// ListTrash implements sessiond.v1.Sessiond.
func (s *Server) ListTrash(ctx context.Context, req *sessiondv1.ListTrashRequest) (*sessiondv1.ListTrashResponse, error) {
	_, byCwd := req.GetProject().(*sessiondv1.ListTrashRequest_Cwd)
	_, byKey := req.GetProject().(*sessiondv1.ListTrashRequest_ProjectKey)
	pk, err := projectKeyOf(byCwd, req.GetCwd(), byKey, req.GetProjectKey())
	if err != nil {
		return nil, err
	}
	if id := req.GetSessionId(); id != "" {
		if err := layout.ValidateSessionID(id); err != nil {
			return nil, err
		}
	}
	copies, err := s.m.ListTrash(ctx, pk, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &sessiondv1.ListTrashResponse{}
	for _, c := range copies {
		out.Copies = append(out.Copies, &sessiondv1.TrashedCopy{ProjectKey: c.Key.ProjectKey, SessionId: c.Key.SessionID,
			Subpath: c.Key.Subpath, DeletedMs: c.DeletedAt.UnixMilli(), Entries: c.Entries, Transcripts: uint32(c.Transcripts),
			Bytes: uint64(c.Bytes), Path: c.Path})
	}
	return out, nil
}

// ListSubkeys implements sessiond.v1.Sessiond.
func (s *Server) ListSubkeys(ctx context.Context, req *sessiondv1.ListSubkeysRequest) (*sessiondv1.ListSubkeysResponse, error) {
	ref := req.GetSession()
	k, err := s.resolve(&sessiondv1.SessionRef{Project: ref.GetProject(), SessionId: ref.GetSessionId()}, false)
	if err != nil {
		return nil, err
	}
	subs, err := s.m.Subkeys(k)
	if err != nil {
		return nil, err
	}
	return &sessiondv1.ListSubkeysResponse{Subkeys: subs}, nil
}
