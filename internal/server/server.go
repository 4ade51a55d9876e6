// Package server is sessiond's gRPC edge: it turns wire requests into calls
// on the session writers, and the writers' errors into gRPC status codes
// (errors.go). Handlers stay thin: the rules live in the writer and
// transcript packages, and when a session comes down from PostgreSQL is
// the mirror's policy (the fleet interface, pull.go).
package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/sessionstore"
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
	// Catalog lists and finds the sessions; nil: one over m's folders
	// and index (none without m).
	Catalog *catalog.Catalog
}

// Server implements sessiond.v1.Sessiond.
type Server struct {
	sessiondv1.UnimplementedSessiondServer

	m      *writer.Manager
	rd     *reader.Reader // reads through m's snapshots
	cat    *catalog.Catalog
	log    *zap.Logger
	info   Info
	health *health.Server

	draining atomic.Bool
	// agentDirs: whether each agent config dir seen is the root (bool).
	agentDirs sync.Map
	// streams is cancelled when draining starts, so open Follow streams
	// end instead of holding up the shutdown.
	streams      context.Context
	closeStreams context.CancelFunc
	// observeAppend, when set, times every append (ObserveAppends).
	observeAppend AppendObserver
	// fleet: the PostgreSQL mirror's sessions, or noMirror.
	fleet fleet
}

// New returns a Server over m.
func New(m *writer.Manager, log *zap.Logger, info Info) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	if info.Catalog == nil && m != nil {
		c := m.Config()
		info.Catalog = catalog.New(catalog.Config{FS: c.FS, Layout: c.Layout, Index: c.Index, Logger: log, Progress: c.Progress}, m)
	}
	s := &Server{m: m, rd: reader.New(writer.NewSnapshots(m)), cat: info.Catalog, log: log, info: info, health: health.NewServer(), streams: ctx, closeStreams: cancel, fleet: noMirror{}}
	if info.Mirror != nil {
		// A pull reads the transcripts here through the reader and the
		// sidecars through the catalog, and writes through the writers.
		store := struct {
			*writer.Manager
			*reader.Reader
			*catalog.Catalog
		}{m, s.rd, info.Catalog}
		s.fleet = mirrorFleet{mirror.NewPuller(info.Mirror, store, info.layout(), log), info.Mirror}
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
	pk, named, err := projectOf(ref.GetProject())
	if err != nil {
		return k, err
	}
	if !named {
		// Find looks for the id in either case.
		if needProject {
			return k, fmt.Errorf("the project is required to create or append to a session: set cwd (the agent's working directory) or project_key (sessionctl: --cwd or --project): %w", errdefs.ErrInvalidArgument)
		}
		return s.find(k)
	}
	k.ProjectKey = pk
	// One UUID is one session in any case: stored under the lower-case
	// id, found under either.
	return s.cat.SessionKey(k)
}

// find is the one session whose id (and subpath) is k's, in whichever
// project holds it.
func (s *Server) find(k layout.Key) (layout.Key, error) {
	keys, err := s.cat.Find(k.SessionID, k.Subpath)
	if err != nil {
		return k, err
	}
	if len(keys) == 0 && k.Subpath != "" {
		// The subagent transcript is not anywhere; if its session is
		// found, the call goes on and says the subpath is missing.
		if mains, err := s.cat.Find(k.SessionID, ""); err == nil && len(mains) == 1 {
			return layout.Key{ProjectKey: mains[0].ProjectKey, SessionID: mains[0].SessionID, Subpath: k.Subpath}, nil
		}
	}
	switch len(keys) {
	case 0:
		return k, fmt.Errorf("no session %s in any project under %s: %w", k.SessionID, s.info.Root, errdefs.ErrNotFound)
	case 1:
		return keys[0], nil
	}
	names := make([]string, len(keys))
	for i, key := range keys {
		names[i] = key.ProjectKey
	}
	return k, fmt.Errorf("session %s exists in several projects (%s); name the project with cwd or project_key (sessionctl: --cwd or --project): %w", k.SessionID, strings.Join(names, ", "), errdefs.ErrAmbiguous)
}

// projectOf is the project a request names in its project oneof: by the
// agent's working directory or by key; named is false when it names
// none.
func projectOf(oneof any) (key string, named bool, err error) {
	switch p := oneof.(type) {
	case *sessiondv1.SessionRef_Cwd:
		return projectOfCwd(p.Cwd)
	case *sessiondv1.ListSessionsRequest_Cwd:
		return projectOfCwd(p.Cwd)
	case *sessiondv1.ListSummariesRequest_Cwd:
		return projectOfCwd(p.Cwd)
	case *sessiondv1.ListTrashRequest_Cwd:
		return projectOfCwd(p.Cwd)
	case *sessiondv1.SessionRef_ProjectKey:
		return projectOfKey(p.ProjectKey)
	case *sessiondv1.ListSessionsRequest_ProjectKey:
		return projectOfKey(p.ProjectKey)
	case *sessiondv1.ListSummariesRequest_ProjectKey:
		return projectOfKey(p.ProjectKey)
	case *sessiondv1.ListTrashRequest_ProjectKey:
		return projectOfKey(p.ProjectKey)
	}
	return "", false, nil
}

func projectOfCwd(cwd string) (string, bool, error) {
	key, err := layout.ProjectKeyFromCwd(cwd)
	return key, true, err
}

func projectOfKey(key string) (string, bool, error) {
	return key, true, layout.ValidateProjectKey(key)
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
	shared, err := s.sharesRoot(req.GetAgentConfigDir())
	if err != nil {
		return nil, err
	}
	if err := s.fleet.BeforeAppend(ctx, k); err != nil {
		return nil, err
	}
	opt := sessionstore.AppendOptions{BatchID: req.GetBatchId(), SharedFile: shared}
	if su := req.GetSummary(); su != nil {
		opt.Summary = &sessionstore.SummaryUpdate{Data: su.GetData(), ExpectedVersion: su.GetExpectedVersion(),
			Covers: su.GetCoversEntries(), CheckCoverage: su.GetCheckCoverage(), Folder: su.GetFolder()}
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
		DuplicateBatch: res.DuplicateBatch, SummaryVersion: res.SummaryVersion, AbsorbedEntries: res.Absorbed}
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

// sharesRoot reports whether dir, the config dir of the agent whose CLI
// mirrors an append, is sessiond's root: the CLI then writes its own copy
// of every line into the very file sessiond owns, before it mirrors the
// line, and the writer must take that copy in instead of storing the
// mirrored one again (sessionstore.AppendOptions.SharedFile). A relative
// dir is refused: which folder it names depends on the agent's working
// directory, which sessiond does not know.
func (s *Server) sharesRoot(dir string) (bool, error) {
	if dir == "" {
		return false, nil
	}
	if !filepath.IsAbs(dir) {
		return false, fmt.Errorf("agent_config_dir %q is not an absolute path; send the agent's CLAUDE_CONFIG_DIR (or ~/.claude) resolved to an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if v, ok := s.agentDirs.Load(dir); ok {
		// Checked before: an adapter sends the same dir with every batch,
		// and two stats per append are not free.
		return v.(bool), nil
	}
	same := filepath.Clean(dir) == filepath.Clean(s.info.Root)
	a, aerr := os.Stat(dir)
	b, berr := os.Stat(s.info.Root)
	if aerr == nil && berr == nil {
		same = os.SameFile(a, b)
		// Only a comparison of two folders that exist is for good.
		s.agentDirs.Store(dir, same)
	}
	return same, nil
}

// ListSummaries implements sessiond.v1.Sessiond.
func (s *Server) ListSummaries(req *sessiondv1.ListSummariesRequest, stream grpc.ServerStreamingServer[sessiondv1.ListSummariesResponse]) error {
	ctx := stream.Context()
	pk, named, err := projectOf(req.GetProject())
	if err != nil {
		return err
	}
	if !named {
		return fmt.Errorf("ListSummaries needs a project: set cwd or project_key: %w", errdefs.ErrInvalidArgument)
	}
	id := req.GetSessionId()
	if id != "" {
		if err := layout.ValidateSessionID(id); err != nil {
			return err
		}
		k, err := s.cat.SessionKey(layout.Key{ProjectKey: pk, SessionID: id})
		if err != nil {
			return err
		}
		id = k.SessionID
	}
	if err := sessionstore.ValidateFolder(req.GetFolder()); err != nil {
		return err
	}
	sums, err := s.cat.ListSummaries(ctx, pk, id, req.GetFolder())
	if err != nil {
		return err
	}
	pg := newPager(s.pageBudget(), func(page []*sessiondv1.SessionSummary, _ bool) error {
		return stream.Send(&sessiondv1.ListSummariesResponse{Summaries: page})
	})
	for _, x := range sums {
		if err := pg.add(&sessiondv1.SessionSummary{SessionId: x.Key.SessionID, MtimeMs: x.ModifiedMs, Data: x.Data, Version: x.Version,
			CoversEntries: x.Covers, Entries: x.Entries, Folder: x.Folder}); err != nil {
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
	opt := reader.ReadOptions{From: req.GetFromIndex(), Tail: req.GetTail(), Follow: follow}
	return s.rd.Read(ctx, k, opt, func(es []reader.Entry) error {
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
	pk, _, err := projectOf(req.GetProject())
	if err != nil {
		return err
	}
	if req.GetFleet() {
		return s.listFleet(ctx, pk, req, stream)
	}
	infos, total, err := s.cat.List(ctx, catalog.ListOptions{ProjectKey: pk, Limit: int(req.GetLimit()),
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
	in, err := s.cat.Info(ctx, k)
	if err != nil {
		return nil, err
	}
	return s.sessionInfo(in), nil
}

func (s *Server) sessionInfo(in catalog.Info) *sessiondv1.SessionInfo {
	return &sessiondv1.SessionInfo{
		Session: s.resolved(in.Key), Title: in.Title, FirstPrompt: in.FirstPrompt, Cwd: in.Cwd,
		Entries: in.Entries, Bytes: in.Bytes, PendingEntries: in.Pending, ModifiedMs: in.ModifiedMs,
		CreatedMs: in.CreatedMs, Active: in.Active, MalformedLines: in.Malformed,
		Summary: in.Summary, Tag: in.Tag, Archived: in.Archived, GitBranch: in.GitBranch,
		Sidechain: in.Sidechain, Damaged: in.Damaged,
	}
}
