package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer"
)

// Store is what a pull needs of the local transcripts (the writers'
// Manager, read through a reader.Reader): to compare them with
// PostgreSQL's, and to write what they lack.
type Store interface {
	Exists(key layout.Key) (bool, error)
	Read(ctx context.Context, key layout.Key, opt reader.ReadOptions, send func([]reader.Entry) error) error
	Import(ctx context.Context, key layout.Key, lines [][]byte, meta []byte) error
	Append(ctx context.Context, key layout.Key, raw [][]byte) (*writer.AppendResult, error)
	Sidecars(key layout.Key) ([]sidecar.Sidecar, error)
	WriteSidecar(ctx context.Context, key layout.Key, name string, body []byte) error
}

// Puller brings sessions down from PostgreSQL into the local store: on
// request (Pull), before a call on a session that is here only in
// PostgreSQL (BeforeAppend, BeforeRead), and when this machine takes a
// session over from another (the leases' takeover hook), so that a copy
// here never parts from the fleet's.
type Puller struct {
	mr    *Mirror
	store Store
	lay   layout.Layout
	log   *zap.Logger
}

// NewPuller returns the Puller of mr's sessions into store, under lay,
// and makes it mr's takeover hook. Call it before the first append.
func NewPuller(mr *Mirror, store Store, lay layout.Layout, log *zap.Logger) *Puller {
	p := &Puller{mr: mr, store: store, lay: lay, log: log}
	mr.leases.OnTakeover(p.takenOver)
	return p
}

// Pulled is what a pull did: the session, and what became of each of its
// transcripts and sidecars here.
type Pulled struct {
	Key         layout.Key
	Transcripts []PulledTranscript
	Sidecars    []PulledSidecar
}

// PulledTranscript is one transcript of a pull. Action is "pulled"
// (written whole), "appended" (the rest appended), "identical", or
// "ahead" (a takeover found more here, after all of PostgreSQL's lines).
type PulledTranscript struct {
	Subpath string
	Entries uint64
	Action  string
}

// PulledSidecar is one sidecar of a pull. Action is "pulled", "replaced",
// "identical", "kept" (the one here wins) or "refused" (a name sessiond
// does not know).
type PulledSidecar struct {
	Name, Action string
}

// pullLookTimeout bounds an append's look into PostgreSQL for a session
// that is not here.
const pullLookTimeout = 3 * time.Second

// Pull brings session id (of project, "" for whichever holds it) down
// from PostgreSQL: every transcript this machine lacks is written whole,
// one it has that is behind gets the rest appended, an identical one is
// left alone. A local copy that differs from PostgreSQL's, or holds more,
// is refused before anything is written.
func (p *Puller) Pull(ctx context.Context, project, id string) (Pulled, error) {
	return p.pull(ctx, project, id, 0, false)
}

// BeforeAppend pulls the session of k when it is not here but in
// PostgreSQL: appended to as a new one, it would replace the fleet's
// copy. Appends never wait for PostgreSQL: while it is away, or does not
// answer within a bound, the session is created here.
func (p *Puller) BeforeAppend(ctx context.Context, k layout.Key) error {
	return p.ifAbsent(ctx, k, false)
}

// BeforeRead pulls the session of k when it is not here but in
// PostgreSQL (Read, Fork): the call then goes on with it. A session
// PostgreSQL does not have either is no error; one PostgreSQL cannot be
// asked about is.
func (p *Puller) BeforeRead(ctx context.Context, k layout.Key) error {
	return p.ifAbsent(ctx, k, true)
}

// ifAbsent pulls the session of k when it is not here. When PostgreSQL
// cannot be asked, strict says whether that fails the call (a read) or
// not (an append).
func (p *Puller) ifAbsent(ctx context.Context, k layout.Key, strict bool) error {
	main := k.Main()
	if main.ProjectKey != "" {
		if ok, err := p.store.Exists(main); err != nil || ok {
			return err
		}
	}
	look := time.Duration(0)
	if !strict {
		if !p.mr.Connected() {
			return nil
		}
		look = pullLookTimeout
	}
	_, err := p.pull(ctx, main.ProjectKey, main.SessionID, look, false)
	switch {
	case err == nil, errors.Is(err, ErrNotMirrored):
		return nil
	case !strict && errors.Is(err, errdefs.ErrUnavailable):
		p.log.Warn("could not ask PostgreSQL for a session that is not here; appending locally", zap.Stringer("session", main), zap.Error(err))
		return nil
	}
	return err
}

// takenOver is the leases' takeover hook: the session fam was just
// leased from machine from, which may have written lines after the copy
// here; they are pulled (the rest appended, or the whole session written
// when it is not here) before the append that took the lease goes on.
// The read from PostgreSQL is bounded like an append's look.
func (p *Puller) takenOver(ctx context.Context, fam layout.Key, from string) error {
	done, err := p.pull(ctx, fam.ProjectKey, fam.SessionID, pullLookTimeout, true)
	if errors.Is(err, ErrNotMirrored) {
		return nil // nothing of it in PostgreSQL: nothing to lack
	}
	if err != nil {
		return err
	}
	for _, d := range done.Transcripts {
		if d.Action != "identical" && d.Action != "ahead" {
			p.log.Info("brought down what another machine wrote before taking the session over", zap.Stringer("session", fam), zap.String("from", from),
				zap.String("subpath", d.Subpath), zap.String("action", d.Action), zap.Uint64("entries", d.Entries))
		}
	}
	return nil
}

// transcriptPlan is what a pull does with one transcript of PostgreSQL's.
type transcriptPlan struct {
	key    layout.Key
	rt     RemoteTranscript
	local  uint64 // lines here
	action string
}

// pull is Pull, with look, when not 0, bounding the read from PostgreSQL
// (not the writes here: a pull cut off between two transcripts would
// leave a session half here). takeover: a copy here that holds more than
// PostgreSQL's, after all of its lines, is left as it is (action "ahead":
// the mirror sends the rest once this machine holds the lease) instead of
// refused. Subagents are written before the main transcript, so that a
// main transcript here means a complete pull; the session's sidecars come
// after them (pullSidecars).
func (p *Puller) pull(ctx context.Context, project, id string, look time.Duration, takeover bool) (Pulled, error) {
	fctx := ctx
	if look > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, look)
		defer cancel()
	}
	remote, err := p.mr.Fetch(fctx, project, id)
	if err != nil {
		return Pulled{}, err
	}
	plans, err := p.plan(ctx, remote, takeover)
	if err != nil {
		return Pulled{Key: remote.Key}, err
	}
	out := Pulled{Key: remote.Key}
	out.Transcripts, err = p.apply(ctx, remote.Key, plans)
	if err != nil {
		return out, err
	}
	p.mr.leases.Pulled(remote.Key)
	behind := false // this machine lacked lines PostgreSQL has
	for _, t := range out.Transcripts {
		behind = behind || t.Action == "pulled" || t.Action == "appended"
	}
	out.Sidecars, err = p.pullSidecars(ctx, remote.Key, remote.Sidecars, behind)
	if err != nil {
		return out, err
	}
	p.log.Info("pulled a session from PostgreSQL", zap.Stringer("session", remote.Key), zap.Int("transcripts", len(out.Transcripts)), zap.Int("sidecars", len(out.Sidecars)))
	return out, nil
}

// plan compares each of remote's transcripts with the copy here, before
// anything is written, and orders them main last (subpaths come sorted,
// "" first): the main transcript here says the session is.
func (p *Puller) plan(ctx context.Context, remote *Remote, takeover bool) ([]transcriptPlan, error) {
	var plans []transcriptPlan
	for _, rt := range remote.Transcripts {
		k := remote.Key
		k.Subpath = rt.Subpath
		if err := p.lay.CheckOnDisk(k); err != nil {
			return nil, err
		}
		pl := transcriptPlan{key: k, rt: rt, action: "pulled"}
		ok, err := p.store.Exists(k)
		if err != nil {
			return nil, err
		}
		if ok {
			n, err := p.compareLocal(ctx, k, rt.Lines)
			switch {
			case takeover && errors.Is(err, errAhead):
				pl.action = "ahead"
			case err != nil:
				return nil, err
			default:
				pl.local, pl.action = n, "appended"
				if n == uint64(len(rt.Lines)) {
					pl.action = "identical"
				}
			}
		}
		plans = append(plans, pl)
	}
	if len(plans) > 1 && plans[0].key.Subpath == "" {
		plans = append(plans[1:], plans[0])
	}
	return plans, nil
}

// apply writes what plans say, in their order.
func (p *Puller) apply(ctx context.Context, fam layout.Key, plans []transcriptPlan) ([]PulledTranscript, error) {
	var out []PulledTranscript
	// Appending the rest may take the session's lease over from the
	// machine that wrote it: this pull is the catch-up such a takeover
	// owes, so it must not run another (which would append the same
	// lines again).
	actx := lease.Pulling(ctx, fam)
	for _, pl := range plans {
		var err error
		switch pl.action {
		case "pulled":
			err = p.store.Import(ctx, pl.key, pl.rt.Lines, pl.rt.Meta)
		case "appended":
			_, err = p.store.Append(actx, pl.key, pl.rt.Lines[pl.local:])
		}
		if err != nil {
			return out, fmt.Errorf("pull %s: %w", pl.key, err)
		}
		out = append(out, PulledTranscript{Subpath: pl.key.Subpath, Entries: uint64(len(pl.rt.Lines)), Action: pl.action})
	}
	return out, nil
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
func (p *Puller) pullSidecars(ctx context.Context, key layout.Key, remote []sidecar.Sidecar, behind bool) ([]PulledSidecar, error) {
	if len(remote) == 0 {
		return nil, nil
	}
	local, err := p.store.Sidecars(key)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", key, err)
	}
	here := map[string]sidecar.Sidecar{}
	for _, sc := range local {
		here[sc.Name] = sc
	}
	var out []PulledSidecar
	for _, sc := range remote {
		action := "pulled"
		l, ok := here[sc.Name]
		switch {
		case sidecar.CheckName(sc.Name) != nil:
			action = "refused"
			p.log.Warn("PostgreSQL holds a sidecar sessiond does not know; not written", zap.Stringer("session", key), zap.String("name", sc.Name))
		case ok && bytes.Equal(l.Body, sc.Body):
			action = "identical"
		case ok && !behind && sc.MtimeMs <= l.MtimeMs:
			action = "kept"
			p.log.Info("kept a session sidecar that differs from PostgreSQL's (the session was identical here, and this one is not older)",
				zap.Stringer("session", key), zap.String("name", sc.Name))
		case ok:
			action = "replaced"
		}
		if action == "pulled" || action == "replaced" {
			if err := p.store.WriteSidecar(ctx, key, sc.Name, sc.Body); err != nil {
				return out, fmt.Errorf("pull %s: %w", key, err)
			}
		}
		out = append(out, PulledSidecar{Name: sc.Name, Action: action})
	}
	return out, nil
}

// errStop ends a read early.
var errStop = errors.New("stop")

// errAhead: the copy here starts with every line PostgreSQL has, and
// holds more.
var errAhead = errors.New("the copy here holds lines PostgreSQL does not have yet")

// compareLocal checks that k's local lines are the first of remote's and
// returns how many there are; a copy that differs or holds more is
// refused, saying what to do.
func (p *Puller) compareLocal(ctx context.Context, k layout.Key, remote [][]byte) (uint64, error) {
	var n uint64
	var differ bool
	err := p.store.Read(ctx, k, reader.ReadOptions{}, func(es []reader.Entry) error {
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
