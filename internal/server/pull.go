package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/writer"
)

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
	key, done, sides, err := s.pull(ctx, project, k.SessionID, 0, false)
	if err != nil {
		return nil, err
	}
	return &sessiondv1.PullResponse{Session: s.resolved(key), Transcripts: done, Sidecars: sides}, nil
}

// pull brings session id (of project, "" for whichever holds it) down
// from PostgreSQL: every transcript this machine lacks is written whole,
// one it has that is behind gets the rest appended, an identical one is
// left alone. A local copy that differs from PostgreSQL's, or holds more,
// is refused before anything is written. Subagents are written before the
// main transcript, so that a main transcript here means a complete pull;
// the session's sidecars come after them (pullSidecars).
// look, when not 0, bounds the read from PostgreSQL (not the writes here:
// a pull cut off between two transcripts would leave a session half
// here). takeover: a copy here that holds more than PostgreSQL's, after
// all of its lines, is left as it is (action "ahead": the mirror sends
// the rest once this machine holds the lease) instead of refused.
func (s *Server) pull(ctx context.Context, project, id string, look time.Duration, takeover bool) (layout.Key, []*sessiondv1.PulledTranscript, []*sessiondv1.PulledSidecar, error) {
	mr := s.info.Mirror
	if mr == nil {
		return layout.Key{}, nil, nil, fmt.Errorf("sessiond runs without a PostgreSQL mirror (start it with --mirror or SESSIOND_MIRROR) so it has nothing to pull from: %w", errdefs.ErrFailedPrecondition)
	}
	fctx := ctx
	if look > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, look)
		defer cancel()
	}
	remote, err := mr.Fetch(fctx, project, id)
	if err != nil {
		return layout.Key{}, nil, nil, err
	}
	type plan struct {
		key    layout.Key
		rt     mirror.RemoteTranscript
		local  uint64 // lines here
		action string
	}
	var plans []plan
	for _, rt := range remote.Transcripts {
		k := remote.Key
		k.Subpath = rt.Subpath
		if err := s.info.layout().CheckOnDisk(k); err != nil {
			return k, nil, nil, err
		}
		p := plan{key: k, rt: rt, action: "pulled"}
		ok, err := s.m.Exists(k)
		if err != nil {
			return k, nil, nil, err
		}
		if ok {
			n, err := s.compareLocal(ctx, k, rt.Lines)
			switch {
			case takeover && errors.Is(err, errAhead):
				p.action = "ahead"
			case err != nil:
				return k, nil, nil, err
			default:
				p.local, p.action = n, "appended"
				if n == uint64(len(rt.Lines)) {
					p.action = "identical"
				}
			}
		}
		plans = append(plans, p)
	}
	// Main last (subpaths come sorted, "" first): the main transcript
	// here says the session is.
	if len(plans) > 1 && plans[0].key.Subpath == "" {
		plans = append(plans[1:], plans[0])
	}
	var out []*sessiondv1.PulledTranscript
	behind := false // this machine lacked lines PostgreSQL has
	// Appending the rest may take the session's lease over from the
	// machine that wrote it: this pull is the catch-up such a takeover
	// owes, so it must not run another (which would append the same
	// lines again).
	actx := mirror.Pulling(ctx, remote.Key)
	for _, p := range plans {
		var err error
		switch p.action {
		case "pulled":
			err = s.m.Import(ctx, p.key, p.rt.Lines, p.rt.Meta)
		case "appended":
			_, err = s.m.Append(actx, p.key, p.rt.Lines[p.local:])
		}
		if err != nil {
			return p.key, out, nil, fmt.Errorf("pull %s: %w", p.key, err)
		}
		behind = behind || p.action == "pulled" || p.action == "appended"
		out = append(out, &sessiondv1.PulledTranscript{Subpath: p.key.Subpath, Entries: uint64(len(p.rt.Lines)), Action: p.action})
	}
	mr.Pulled(remote.Key)
	sides, err := s.pullSidecars(ctx, remote.Key, remote.Sidecars, behind)
	if err != nil {
		return remote.Key, out, sides, err
	}
	s.log.Info("pulled a session from PostgreSQL", zap.Stringer("session", remote.Key), zap.Int("transcripts", len(out)), zap.Int("sidecars", len(sides)))
	return remote.Key, out, sides, nil
}

// pullSidecars writes here the session sidecars PostgreSQL holds for key
// (archived.json, custom-title.json), each durably (temp, fsync, rename,
// fsync of the folder): one that is not here is written, an identical one
// left alone. One here that differs is replaced when this machine was
// behind (the pull wrote or appended a transcript: PostgreSQL's is the
// later word), else the newer by mtime wins (PostgreSQL's row keeps the
// writing machine's mtime), and a tie keeps the one here. A name sessiond
// does not know is refused (never made a path) and reported; a sidecar
// here that PostgreSQL lacks is left alone.
func (s *Server) pullSidecars(ctx context.Context, key layout.Key, remote []writer.Sidecar, behind bool) ([]*sessiondv1.PulledSidecar, error) {
	if len(remote) == 0 {
		return nil, nil
	}
	local, err := s.m.Sidecars(key)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", key, err)
	}
	here := map[string]writer.Sidecar{}
	for _, sc := range local {
		here[sc.Name] = sc
	}
	var out []*sessiondv1.PulledSidecar
	for _, sc := range remote {
		action := "pulled"
		l, ok := here[sc.Name]
		switch {
		case writer.CheckSidecarName(sc.Name) != nil:
			action = "refused"
			s.log.Warn("PostgreSQL holds a sidecar sessiond does not know; not written", zap.Stringer("session", key), zap.String("name", sc.Name))
		case ok && bytes.Equal(l.Body, sc.Body):
			action = "identical"
		case ok && !behind && sc.MtimeMs <= l.MtimeMs:
			action = "kept"
			s.log.Info("kept a session sidecar that differs from PostgreSQL's (the session was identical here, and this one is not older)",
				zap.Stringer("session", key), zap.String("name", sc.Name))
		case ok:
			action = "replaced"
		}
		if action == "pulled" || action == "replaced" {
			if err := s.m.WriteSidecar(ctx, key, sc.Name, sc.Body); err != nil {
				return out, fmt.Errorf("pull %s: %w", key, err)
			}
		}
		out = append(out, &sessiondv1.PulledSidecar{Name: sc.Name, Action: action})
	}
	return out, nil
}

// pullLookTimeout bounds an append's look into PostgreSQL for a session
// that is not here.
const pullLookTimeout = 3 * time.Second

// errStop ends a read early.
var errStop = errors.New("stop")

// errAhead: the copy here starts with every line PostgreSQL has, and
// holds more.
var errAhead = errors.New("the copy here holds lines PostgreSQL does not have yet")

// compareLocal checks that k's local lines are the first of remote's and
// returns how many there are; a copy that differs or holds more is
// refused, saying what to do.
func (s *Server) compareLocal(ctx context.Context, k layout.Key, remote [][]byte) (uint64, error) {
	var n uint64
	var differ bool
	err := s.m.Read(ctx, k, writer.ReadOptions{}, func(es []writer.Entry) error {
		for _, e := range es {
			if n >= uint64(len(remote)) || !bytes.Equal(e.Data, remote[n]) {
				differ = true
				return errStop
			}
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, err
	}
	if differ {
		if n >= uint64(len(remote)) {
			return 0, fmt.Errorf("%s: %w (it has all %d of PostgreSQL's first): nothing to pull, the mirror sends the rest: %w", k, errAhead, len(remote), errdefs.ErrFailedPrecondition)
		}
		return 0, fmt.Errorf("%s here differs from PostgreSQL's copy from line %d on: keep one of them (`sessionctl delete %s` here, then pull again; or leave this copy, and the mirror replaces PostgreSQL's rows with it): %w",
			k, n+1, k.SessionID, errdefs.ErrFailedPrecondition)
	}
	return n, nil
}

// pullIfAbsent pulls the session of k from PostgreSQL when the mirror is
// configured and the session is not here: Append, Read and Fork of a
// session known only in PostgreSQL then go on with it. A session
// PostgreSQL does not have either is no error (an append creates it).
// When PostgreSQL cannot be asked, strict says whether that fails the
// call (a read) or not (an append: appends never wait for PostgreSQL).
func (s *Server) pullIfAbsent(ctx context.Context, k layout.Key, strict bool) error {
	if s.info.Mirror == nil {
		return nil
	}
	main := k.Main()
	if main.ProjectKey != "" {
		if ok, err := s.m.Exists(main); err != nil || ok {
			return err
		}
	}
	look := time.Duration(0)
	if !strict {
		// Appends never wait for PostgreSQL: while it is away, a session
		// not here is created here; when it answers, the look is bounded.
		if !s.info.Mirror.Connected() {
			return nil
		}
		look = pullLookTimeout
	}
	_, _, _, err := s.pull(ctx, main.ProjectKey, main.SessionID, look, false)
	switch {
	case err == nil, errors.Is(err, mirror.ErrNotMirrored):
		return nil
	case !strict && errors.Is(err, errdefs.ErrUnavailable):
		s.log.Warn("could not ask PostgreSQL for a session that is not here; appending locally", zap.Stringer("session", main), zap.Error(err))
		return nil
	}
	return err
}

// pullTakenOver is the mirror's takeover hook: the session fam was
// just leased from machine from, which may have written lines after the
// copy here; they are pulled (the rest appended, or the whole session
// written when it is not here) before the append that took the lease
// goes on. The read from PostgreSQL is bounded like an append's look.
func (s *Server) pullTakenOver(ctx context.Context, fam layout.Key, from string) error {
	_, done, _, err := s.pull(ctx, fam.ProjectKey, fam.SessionID, pullLookTimeout, true)
	if errors.Is(err, mirror.ErrNotMirrored) {
		return nil // nothing of it in PostgreSQL: nothing to lack
	}
	if err != nil {
		return err
	}
	for _, d := range done {
		if a := d.GetAction(); a != "identical" && a != "ahead" {
			s.log.Info("brought down what another machine wrote before taking the session over", zap.Stringer("session", fam), zap.String("from", from),
				zap.String("subpath", d.GetSubpath()), zap.String("action", d.GetAction()), zap.Uint64("entries", d.GetEntries()))
		}
	}
	return nil
}

// resolvePulling is resolve for calls that read a session (Read, Fork):
// a session that is not here but in PostgreSQL is pulled first.
func (s *Server) resolvePulling(ctx context.Context, ref *sessiondv1.SessionRef) (layout.Key, error) {
	k, err := s.resolve(ref, false)
	if s.info.Mirror == nil || err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return k, err
	}
	if perr := s.pullIfAbsent(ctx, k, true); perr != nil {
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
	if s.info.Mirror == nil {
		return fmt.Errorf("sessiond runs without a PostgreSQL mirror (start it with --mirror or SESSIOND_MIRROR), so it has no fleet to list: %w", errdefs.ErrFailedPrecondition)
	}
	if req.GetContinue() {
		return fmt.Errorf("the fleet listing cannot tell sidechains (PostgreSQL holds no such mark); leave --continue out: %w", errdefs.ErrInvalidArgument)
	}
	list, err := s.info.Mirror.List(ctx, pk)
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
