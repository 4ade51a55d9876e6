// Package server is sessiond's gRPC edge: it turns wire requests into calls
// on the session writers, and the writers' errors into gRPC status codes
// (errors.go). Handlers stay thin; the rules live in the writer and
// transcript packages.
package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/writer"
)

// Info is what Status reports about the daemon itself.
type Info struct {
	Version  string
	Socket   string
	Root     string
	StateDir string
	Started  time.Time
	// Mirror is the PostgreSQL mirror, nil without --mirror.
	Mirror *mirror.Mirror
	// MaxMessageBytes is the largest message the daemon sends
	// (--max-message-bytes): answers in pages keep well under it.
	MaxMessageBytes int
}

// Server implements sessiond.v1.Sessiond.
type Server struct {
	sessiondv1.UnimplementedSessiondServer

	m      *writer.Manager
	log    *zap.Logger
	info   Info
	health *health.Server

	draining atomic.Bool
	// agentDirsOK are the agent config dirs found not to be the root.
	agentDirsOK sync.Map
	// streams is cancelled when draining starts, so open Follow streams
	// end instead of holding up the shutdown.
	streams      context.Context
	closeStreams context.CancelFunc
	// observeAppend, when set, times every append (ObserveAppends).
	observeAppend AppendObserver
}

// New returns a Server over m.
func New(m *writer.Manager, log *zap.Logger, info Info) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{m: m, log: log, info: info, health: health.NewServer(), streams: ctx, closeStreams: cancel}
	if info.Mirror != nil {
		// A session taken over from another machine gets what that
		// machine wrote before this one appends after it (issue 16:
		// "takes it over after expiry, pulling what it lacks first").
		info.Mirror.OnTakeover(s.pullTakenOver)
	}
	return s
}

// Register adds the Sessiond service, the standard health service and
// server reflection (so grpcurl works against the socket) to g.
func (s *Server) Register(g *grpc.Server) {
	sessiondv1.RegisterSessiondServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(sessiondv1.Sessiond_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Drain makes every new call fail with UNAVAILABLE, reports NOT_SERVING
// and ends open Follow streams. Calls already running go on.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.health.Shutdown()
	s.closeStreams()
}

// Interceptors refuse new calls while draining. Health checks still get an
// answer (NOT_SERVING) so supervisors can watch the drain.
func (s *Server) Interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if s.draining.Load() && !isHealth(info.FullMethod) {
			return nil, notProcessed()
		}
		resp, err := h(ctx, req)
		return resp, toStatus(err)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if s.draining.Load() && !isHealth(info.FullMethod) {
			return notProcessed()
		}
		return toStatus(h(srv, ss))
	}
	return unary, stream
}

func isHealth(method string) bool {
	return len(method) > 24 && method[:24] == "/grpc.health.v1.Health/"
}

// resolve turns a wire SessionRef into a Key. Without a project the id is
// looked up in every project; needProject refuses that (appends create
// sessions, so they must say where). A key whose files or folders on disk
// run through a symbolic link is refused (see layout.CheckOnDisk): no
// request may read or write outside the root and state folders.
func (s *Server) resolve(ref *sessiondv1.SessionRef, needProject bool) (layout.Key, error) {
	k, err := s.resolveRef(ref, needProject)
	if err != nil {
		return k, err
	}
	if err := s.info.layout().CheckOnDisk(k); err != nil {
		return k, err
	}
	return k, nil
}

func (s *Server) resolveRef(ref *sessiondv1.SessionRef, needProject bool) (layout.Key, error) {
	if ref == nil {
		return layout.Key{}, fmt.Errorf("session is required: %w", errdefs.ErrInvalidArgument)
	}
	k := layout.Key{SessionID: ref.GetSessionId(), Subpath: ref.GetSubpath()}
	if err := layout.ValidateSessionID(k.SessionID); err != nil {
		return k, err
	}
	if k.Subpath != "" {
		if err := layout.ValidateSubpath(k.Subpath); err != nil {
			return k, err
		}
	}
	switch p := ref.GetProject().(type) {
	case *sessiondv1.SessionRef_Cwd:
		key, err := layout.ProjectKeyFromCwd(p.Cwd)
		if err != nil {
			return k, err
		}
		k.ProjectKey = key
	case *sessiondv1.SessionRef_ProjectKey:
		if err := layout.ValidateProjectKey(p.ProjectKey); err != nil {
			return k, err
		}
		k.ProjectKey = p.ProjectKey
	default:
		// Find looks for the id in either case.
		if needProject {
			return k, fmt.Errorf("the project is required to create or append to a session: set cwd (the agent's working directory) or project_key (sessionctl: --cwd or --project): %w", errdefs.ErrInvalidArgument)
		}
		keys, err := s.m.Find(k.SessionID, k.Subpath)
		if err != nil {
			return k, err
		}
		if len(keys) == 0 && k.Subpath != "" {
			// The subagent transcript is not anywhere; if its session is
			// found, the call goes on and says the subpath is missing.
			if mains, err := s.m.Find(k.SessionID, ""); err == nil && len(mains) == 1 {
				return layout.Key{ProjectKey: mains[0].ProjectKey, SessionID: mains[0].SessionID, Subpath: k.Subpath}, nil
			}
		}
		switch len(keys) {
		case 0:
			return k, fmt.Errorf("no session %s in any project under %s: %w", k.SessionID, s.info.Root, errdefs.ErrNotFound)
		case 1:
			return keys[0], nil
		default:
			names := ""
			for i, key := range keys {
				if i > 0 {
					names += ", "
				}
				names += key.ProjectKey
			}
			return k, fmt.Errorf("session %s exists in several projects (%s); name the project with cwd or project_key (sessionctl: --cwd or --project): %w", k.SessionID, names, errdefs.ErrAmbiguous)
		}
	}
	// One UUID is one session in any case: stored under the lower-case
	// id, found under either.
	return s.m.SessionKey(k), nil
}

func (s *Server) resolved(k layout.Key) *sessiondv1.ResolvedSession {
	return &sessiondv1.ResolvedSession{ProjectKey: k.ProjectKey, SessionId: k.SessionID, Subpath: k.Subpath,
		Path: s.info.layout().TranscriptPath(k)}
}

func (i Info) layout() layout.Layout { return layout.Layout{Root: i.Root, StateDir: i.StateDir} }

// AppendObserver is told of every Append, and every message of an
// AppendStream, once it is answered: how long it took, its entries, and
// its error (nil when it succeeded). It runs on the call's goroutine, so
// it must be quick (the daemon's metrics: a histogram or two).
type AppendObserver func(took time.Duration, entries int, err error)

// ObserveAppends sets the AppendObserver; call it before Register.
func (s *Server) ObserveAppends(f AppendObserver) { s.observeAppend = f }

// Append implements sessiond.v1.Sessiond.
func (s *Server) Append(ctx context.Context, req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
	if s.observeAppend == nil {
		return s.append(ctx, req)
	}
	t := time.Now()
	resp, err := s.append(ctx, req)
	s.observeAppend(time.Since(t), len(req.GetEntries())+len(req.GetEntriesText()), err)
	return resp, err
}

func (s *Server) append(ctx context.Context, req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
	// The writer checks the key's paths for links (once per live writer,
	// see writer.Manager.Append), so resolveRef, not resolve.
	k, err := s.resolveRef(req.GetSession(), true)
	if err != nil {
		return nil, err
	}
	if err := s.checkAgentConfigDir(req.GetAgentConfigDir()); err != nil {
		return nil, err
	}
	// A session known only in PostgreSQL comes down first: appended to
	// as a new one, it would replace the fleet's copy.
	if err := s.pullIfAbsent(ctx, k, false); err != nil {
		return nil, err
	}
	opt := writer.AppendOptions{BatchID: req.GetBatchId()}
	if su := req.GetSummary(); su != nil {
		opt.Summary = &writer.SummaryUpdate{Data: su.GetData(), ExpectedVersion: su.GetExpectedVersion(),
			Covers: su.GetCoversEntries(), CheckCoverage: su.GetCheckCoverage()}
	}
	entries := req.GetEntries()
	if text := req.GetEntriesText(); len(text) > 0 {
		if len(entries) > 0 {
			return nil, fmt.Errorf("the request carries both entries and entries_text; send one of them: %w", errdefs.ErrInvalidArgument)
		}
		entries = make([][]byte, len(text))
		for i, t := range text {
			entries[i] = []byte(t)
		}
	}
	res, err := s.m.AppendBatch(ctx, k, entries, opt)
	if err != nil {
		return nil, err
	}
	out := &sessiondv1.AppendResponse{Session: s.resolved(k), Entries: res.Entries, Results: make([]*sessiondv1.EntryResult, len(res.Results)),
		DuplicateBatch: res.DuplicateBatch, SummaryVersion: res.SummaryVersion}
	for i, r := range res.Results {
		er := &sessiondv1.EntryResult{Uuid: r.UUID, Size: uint64(r.Size)}
		if r.Outcome == writer.Stored {
			er.Outcome = sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED
			er.Index = r.Index
		} else {
			er.Outcome = sessiondv1.EntryOutcome_ENTRY_OUTCOME_DUPLICATE
		}
		out.Results[i] = er
	}
	return out, nil
}

// checkAgentConfigDir refuses an append mirrored by an agent whose CLI
// writes its local transcripts under sessiond's own root: the CLI and
// sessiond would then both write each file.
func (s *Server) checkAgentConfigDir(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("agent_config_dir %q is not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if _, ok := s.agentDirsOK.Load(dir); ok {
		// Checked before: an adapter sends the same dir with every batch,
		// and two stats per append are not free.
		return nil
	}
	same := filepath.Clean(dir) == filepath.Clean(s.info.Root)
	if a, err := os.Stat(dir); err == nil {
		if b, err := os.Stat(s.info.Root); err == nil {
			same = os.SameFile(a, b)
		}
	}
	if same {
		return fmt.Errorf("this agent's config dir %s is sessiond's root: the Claude Code CLI writes its own copy of every transcript there before it mirrors the lines to sessiond, so two writers would share each file. "+
			"Give the agent a config dir of its own (for example CLAUDE_CONFIG_DIR=$HOME/.cache/claude-agent; sessiond keeps the lasting copy) or run sessiond with another --root: %w",
			dir, errdefs.ErrFailedPrecondition)
	}
	s.agentDirsOK.Store(dir, struct{}{})
	return nil
}

// projectKeyOf is the project a listing names: by the agent's working
// directory, by key, or (neither set) "", every project.
func projectKeyOf(byCwd bool, cwd string, byKey bool, key string) (string, error) {
	switch {
	case byCwd:
		return layout.ProjectKeyFromCwd(cwd)
	case byKey:
		if err := layout.ValidateProjectKey(key); err != nil {
			return "", err
		}
		return key, nil
	}
	return "", nil
}

// ListSummaries implements sessiond.v1.Sessiond.
func (s *Server) ListSummaries(req *sessiondv1.ListSummariesRequest, stream grpc.ServerStreamingServer[sessiondv1.ListSummariesResponse]) error {
	ctx := stream.Context()
	_, byCwd := req.GetProject().(*sessiondv1.ListSummariesRequest_Cwd)
	_, byKey := req.GetProject().(*sessiondv1.ListSummariesRequest_ProjectKey)
	if !byCwd && !byKey {
		return fmt.Errorf("ListSummaries needs a project: set cwd or project_key: %w", errdefs.ErrInvalidArgument)
	}
	pk, err := projectKeyOf(byCwd, req.GetCwd(), byKey, req.GetProjectKey())
	if err != nil {
		return err
	}
	id := req.GetSessionId()
	if id != "" {
		if err := layout.ValidateSessionID(id); err != nil {
			return err
		}
		id = s.m.SessionKey(layout.Key{ProjectKey: pk, SessionID: id}).SessionID
	}
	sums, err := s.m.ListSummaries(ctx, pk, id)
	if err != nil {
		return err
	}
	pg := newPager(s.pageBudget(), func(page []*sessiondv1.SessionSummary, _ bool) error {
		return stream.Send(&sessiondv1.ListSummariesResponse{Summaries: page})
	})
	for _, x := range sums {
		if err := pg.add(&sessiondv1.SessionSummary{SessionId: x.Key.SessionID, MtimeMs: x.ModifiedMs, Data: x.Data, Version: x.Version,
			CoversEntries: x.Covers, Entries: x.Entries}); err != nil {
			return err
		}
	}
	return pg.close()
}

// AppendStream implements sessiond.v1.Sessiond: Append for each request of
// the stream, answered in order. A refused request is answered with its
// error and the stream goes on.
//
// Requests are received on a goroutine of their own so that a drain can
// end a stream waiting for its next request: the drain answers UNAVAILABLE
// with NOT_PROCESSED, which is true of any request received but not yet
// handled (a request being handled is finished and answered first).
func (s *Server) AppendStream(stream grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	ctx := stream.Context()
	type received struct {
		req *sessiondv1.AppendRequest
		err error
	}
	in := make(chan received)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case in <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r received
		select {
		case <-s.streams.Done():
			return notProcessed()
		case <-ctx.Done():
			return ctx.Err()
		case r = <-in:
		}
		if r.err == io.EOF {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if s.draining.Load() {
			return notProcessed()
		}
		out := &sessiondv1.AppendStreamResponse{}
		resp, err := s.Append(ctx, r.req)
		if err != nil {
			out.Error = appendError(err)
		} else {
			out.Response = resp
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// Flush implements sessiond.v1.Sessiond: the sessions compacted go out in
// pages as they are compacted.
func (s *Server) Flush(req *sessiondv1.FlushRequest, stream grpc.ServerStreamingServer[sessiondv1.FlushResponse]) error {
	ctx := stream.Context()
	pg := newPager(s.pageBudget(), func(page []*sessiondv1.FlushedSession, _ bool) error {
		return stream.Send(&sessiondv1.FlushResponse{Sessions: page})
	})
	add := func(r writer.FlushResult) error {
		return pg.add(&sessiondv1.FlushedSession{Session: s.resolved(r.Key),
			CompactedEntries: r.CompactedEntries, CanonicalBytes: uint64(r.CanonicalBytes)})
	}
	if req.GetAll() {
		err := s.m.FlushEach(ctx, add)
		// The sessions compacted are reported even when another failed:
		// they are compacted all the same.
		if cerr := pg.close(); err == nil {
			err = cerr
		}
		return err
	}
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return err
	}
	r, err := s.m.Flush(ctx, k)
	if err != nil {
		return err
	}
	if err := add(r); err != nil {
		return err
	}
	return pg.close()
}

// Read implements sessiond.v1.Sessiond.
func (s *Server) Read(req *sessiondv1.ReadRequest, stream sessiondv1.Sessiond_ReadServer) error {
	return s.read(req, stream, false)
}

// Follow implements sessiond.v1.Sessiond.
func (s *Server) Follow(req *sessiondv1.ReadRequest, stream sessiondv1.Sessiond_FollowServer) error {
	return s.read(req, stream, true)
}

func (s *Server) read(req *sessiondv1.ReadRequest, stream grpc.ServerStreamingServer[sessiondv1.ReadResponse], follow bool) error {
	k, err := s.resolvePulling(stream.Context(), req.GetSession())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	if follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.streams, cancel)
		defer stop()
	}
	opt := writer.ReadOptions{From: req.GetFromIndex(), Tail: req.GetTail(), Follow: follow}
	return s.m.Read(ctx, k, opt, func(es []writer.Entry) error {
		resp := &sessiondv1.ReadResponse{Entries: make([]*sessiondv1.Entry, len(es))}
		for i, e := range es {
			out := &sessiondv1.Entry{Index: e.Index, Malformed: !rawjson.WellFormedObject(e.Data)}
			if req.GetText() && utf8.Valid(e.Data) {
				out.Text = string(e.Data)
			} else {
				out.Data = e.Data
			}
			resp.Entries[i] = out
		}
		return stream.Send(resp)
	})
}

// ListSessions implements sessiond.v1.Sessiond: the sessions go out in
// pages, each with the total.
func (s *Server) ListSessions(req *sessiondv1.ListSessionsRequest, stream grpc.ServerStreamingServer[sessiondv1.ListSessionsResponse]) error {
	ctx := stream.Context()
	_, byCwd := req.GetProject().(*sessiondv1.ListSessionsRequest_Cwd)
	_, byKey := req.GetProject().(*sessiondv1.ListSessionsRequest_ProjectKey)
	pk, err := projectKeyOf(byCwd, req.GetCwd(), byKey, req.GetProjectKey())
	if err != nil {
		return err
	}
	if req.GetFleet() {
		return s.listFleet(ctx, pk, req, stream)
	}
	infos, total, err := s.m.List(ctx, writer.ListOptions{ProjectKey: pk, Limit: int(req.GetLimit()),
		Offset: int(req.GetOffset()), Continue: req.GetContinue(), ExcludeArchived: req.GetExcludeArchived()})
	if err != nil {
		return err
	}
	pg := s.sessionPager(stream, total)
	for _, in := range infos {
		if err := pg.add(s.sessionInfo(in)); err != nil {
			return err
		}
	}
	return pg.close()
}

// sessionPager sends a listing's pages, each with its total.
func (s *Server) sessionPager(stream grpc.ServerStreamingServer[sessiondv1.ListSessionsResponse], total int) *pager[*sessiondv1.SessionInfo] {
	return newPager(s.pageBudget(), func(page []*sessiondv1.SessionInfo, _ bool) error {
		return stream.Send(&sessiondv1.ListSessionsResponse{Sessions: page, Total: uint32(total)})
	})
}

// GetSession implements sessiond.v1.Sessiond.
func (s *Server) GetSession(ctx context.Context, req *sessiondv1.GetSessionRequest) (*sessiondv1.SessionInfo, error) {
	k, err := s.resolve(req.GetSession(), false)
	if err != nil {
		return nil, err
	}
	in, err := s.m.Info(ctx, k)
	if err != nil {
		return nil, err
	}
	return s.sessionInfo(in), nil
}

func (s *Server) sessionInfo(in writer.Info) *sessiondv1.SessionInfo {
	return &sessiondv1.SessionInfo{
		Session: s.resolved(in.Key), Title: in.Title, FirstPrompt: in.FirstPrompt, Cwd: in.Cwd,
		Entries: in.Entries, Bytes: in.Bytes, PendingEntries: in.Pending, ModifiedMs: in.ModifiedMs,
		CreatedMs: in.CreatedMs, Active: in.Active, MalformedLines: in.Malformed,
		Summary: in.Summary, Tag: in.Tag, Archived: in.Archived, GitBranch: in.GitBranch,
		Sidechain: in.Sidechain, Damaged: in.Damaged,
	}
}

// statusListMax is the most items Status lists of each kind (recovery
// errors, transcripts missing entries and their ids, deferred compactions,
// fenced sessions); it counts them all. A store where thousands of
// transcripts lost entries would otherwise make an answer over the
// message limit, and status would fail when it matters most.
const statusListMax = 100

// Status implements sessiond.v1.Sessiond.
func (s *Server) Status(ctx context.Context, _ *sessiondv1.StatusRequest) (*sessiondv1.StatusResponse, error) {
	st, trash := s.m.Stats(), s.m.TrashUsage()
	mirrorSt, leaseSt := s.mirrorStatus()
	var ops []*sessiondv1.Operation
	for _, o := range s.m.Operations() {
		ops = append(ops, &sessiondv1.Operation{Id: o.ID, Kind: o.Kind, Unit: o.Unit, Done: uint64(o.Done), Total: uint64(o.Total), StartedMs: o.Started.UnixMilli()})
	}
	cfg := s.m.Config()
	ret := &sessiondv1.WalRetention{
		RetentionMs: max(cfg.WALRetention, 0).Milliseconds(), SizeBudget: uint64(cfg.WALRetentionSize),
		RetainedSegments: uint64(st.RetainedSegments), RetainedBytes: uint64(st.RetainedBytes),
	}
	if !st.OldestRetained.IsZero() {
		ret.OldestRetainedMs = st.OldestRetained.UnixMilli()
	}
	var missing []*sessiondv1.AcknowledgedMissing
	for _, in := range st.Missing[:min(len(st.Missing), statusListMax)] {
		missing = append(missing, &sessiondv1.AcknowledgedMissing{Session: s.resolved(in.Key), Count: uint64(in.Count),
			Ids: in.IDs[:min(len(in.IDs), statusListMax)], DetectedMs: in.DetectedMs})
	}
	return &sessiondv1.StatusResponse{
		WalRetention: ret, AcknowledgedMissing: missing, AcknowledgedMissingTotal: uint64(len(st.Missing)),
		Operations: ops,
		Version:    s.info.Version, Pid: int32(os.Getpid()), StartedMs: s.info.Started.UnixMilli(),
		Socket: s.info.Socket, Root: s.info.Root, StateDir: s.info.StateDir,
		ActiveSessions: uint32(st.ActiveSessions), Appends: st.Appends, EntriesStored: st.EntriesStored,
		EntriesDuplicate: st.EntriesDuplicate, JournalSyncs: st.JournalSyncs, JournalBytes: st.JournalBytes,
		Compactions: st.Compactions, CompactedBytes: st.CompactedBytes, RecoveredSessions: st.RecoveredSessions,
		Draining: s.draining.Load(), ReplayPending: st.ReplayPending,
		RecoveryErrors: st.RecoveryErrors[:min(len(st.RecoveryErrors), statusListMax)], RecoveryErrorsTotal: uint64(len(st.RecoveryErrors)),
		PastRecoveryFailures: st.PastRecoveryFailures, Disk: s.diskStatus(st.Disk),
		TrashCopies: uint32(trash.Copies), TrashBytes: uint64(trash.Bytes), TrashRetentionSeconds: uint64(trash.Retention.Seconds()),
		Mirror: mirrorSt, Leases: leaseSt,
	}, nil
}

// mirrorStatus is the mirror's status and the leases' (nil without
// --mirror), from one look at the mirror.
func (s *Server) mirrorStatus() (*sessiondv1.MirrorStatus, *sessiondv1.LeaseStatus) {
	if s.info.Mirror == nil {
		return &sessiondv1.MirrorStatus{}, nil
	}
	ms := s.info.Mirror.Status()
	leases := &sessiondv1.LeaseStatus{MachineId: ms.MachineID, Held: ms.Leases,
		Fenced: ms.Fenced[:min(len(ms.Fenced), statusListMax)], FencedTotal: uint64(len(ms.Fenced))}
	out := &sessiondv1.MirrorStatus{Configured: true, Target: ms.Target, Connected: ms.Connected,
		EntriesBehind: ms.EntriesBehind, BytesBehind: ms.BytesBehind, Transcripts: ms.Transcripts,
		Unchecked: ms.Unchecked, RowsWritten: ms.RowsWritten, LastError: ms.LastError, Listing: ms.Listing}
	if !ms.OldestBehind.IsZero() {
		out.OldestBehindMs = ms.OldestBehind.UnixMilli()
	}
	if !ms.LastErrorAt.IsZero() {
		out.LastErrorMs = ms.LastErrorAt.UnixMilli()
	}
	return out, leases
}

func (s *Server) diskStatus(d writer.DiskStats) *sessiondv1.DiskStatus {
	out := &sessiondv1.DiskStatus{BallastPath: d.BallastPath, BallastBytes: uint64(d.BallastSize),
		BallastPresent: d.BallastPresent, BallastReleased: d.BallastReleased, LagSessions: d.LagSessions, LagBytes: d.LagBytes,
		DeferredTotal: uint64(len(d.Deferred))}
	for _, x := range d.Deferred[:min(len(d.Deferred), statusListMax)] {
		out.Deferred = append(out.Deferred, &sessiondv1.DeferredCompaction{Session: s.resolved(x.Key), Dir: x.Dir,
			NeedBytes: x.Need, FreeBytes: x.Free, SinceMs: x.Since.UnixMilli(), Message: x.Line()})
	}
	return out
}
