// Package daemon wires sessiond together: it recovers the journals, opens
// the socket, serves the gRPC API and shuts everything down in order when
// its context ends. cmd/sessiond only parses flags and calls Run.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/metrics"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/server"
	"github.com/sessiond/sessiond/internal/socket"
	"github.com/sessiond/sessiond/internal/writer"
)

// Defaults of Config, which sessiond's flags show.
const (
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMaxMessageBytes = 64 << 20
)

// Config is everything Run needs.
type Config struct {
	Socket          string
	Root            string
	StateDir        string
	ShutdownTimeout time.Duration
	// MaxMessageBytes bounds one gRPC message (an append batch, a read
	// chunk). It must exceed Writer.MaxEntryBytes.
	MaxMessageBytes int
	Version         string
	Writer          writer.Config
	Logger          *zap.Logger
	// MetricsListen, when set, is where the Prometheus metrics are served
	// (metrics.ParseAddress: 127.0.0.1:PORT, [::1]:PORT, localhost:PORT
	// or unix:/path); empty serves none and costs the hot paths nothing.
	MetricsListen string
	// Mirror, when set, mirrors every transcript into PostgreSQL (see
	// package mirror).
	Mirror *mirror.Config
	// FS is the filesystem the state folder and root are on; nil is
	// fsys.OS. Tests wrap it to see the order of the start.
	FS fsys.FS
}

// Run serves until ctx ends, then drains: new calls get UNAVAILABLE, open
// follow streams end, calls in flight finish, every session is compacted.
// It returns nil after a clean drain.
//
// The order of its steps is what keeps a second sessiond from destroying
// what this one acknowledged: first the locks (the state folder, the root,
// then the socket's), then recovery, then serving. A process refused at
// any lock has changed nothing of the owner's (TestStartOrder).
func Run(ctx context.Context, cfg Config) error {
	p, err := prepare(cfg)
	if err != nil {
		return err
	}
	defer p.release()
	if err := p.lock(); err != nil {
		return err
	}
	if err := p.recover(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// SIGTERM while the journals were checked (the socket is
			// held before, so a client may see it and stop us): a stop
			// asked for and done; what is journaled stays for the next
			// start.
			p.log.Info("stopped during recovery")
			return nil
		}
		return err
	}
	if err := p.serve(ctx); err != nil {
		p.m.Close(context.Background())
		return err
	}
	return p.drain(p.wait(ctx))
}

// process is one run of sessiond: what each step makes and a later one
// uses or stops.
type process struct {
	cfg         Config
	log         *zap.Logger
	wc          writer.Config
	metricsAddr metrics.Address

	claim     *owner.Claim
	ln        net.Listener
	activated bool

	met        *metrics.Metrics
	metricsLn  net.Listener
	metricsSrv *metrics.Server
	mir        *mirror.Mirror
	m          *writer.Manager
	cat        *catalog.Catalog

	recoveryStart, start time.Time
	replay               []layout.Key // sessions whose journaled entries go into their files once serving

	srv              *server.Server
	g                *grpc.Server
	serveErr         chan error
	replayed, purged chan struct{}
}

// prepare fills in the defaults and checks what can be checked before
// anything on disk is touched.
func prepare(cfg Config) (*process, error) {
	p := &process{cfg: cfg, log: cfg.Logger}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	if p.cfg.ShutdownTimeout <= 0 {
		p.cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if p.cfg.FS == nil {
		p.cfg.FS = fsys.OS
	}
	if p.cfg.MaxMessageBytes <= 0 {
		p.cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	p.wc = p.cfg.Writer
	p.wc.Layout = layout.Layout{Root: p.cfg.Root, StateDir: p.cfg.StateDir}
	p.wc.Logger = p.log
	p.wc.FS = p.cfg.FS
	if p.wc.MaxEntryBytes <= 0 {
		p.wc.MaxEntryBytes = writer.DefaultMaxEntryBytes
	}
	if p.cfg.MaxMessageBytes < p.wc.MaxEntryBytes+(1<<20) {
		return nil, fmt.Errorf("--max-message-bytes (%d) must exceed --max-entry-bytes (%d) by at least 1 MiB", p.cfg.MaxMessageBytes, p.wc.MaxEntryBytes)
	}
	if p.cfg.MetricsListen != "" {
		a, err := metrics.ParseAddress(p.cfg.MetricsListen)
		if err != nil {
			return nil, err
		}
		p.metricsAddr = a
	}
	return p, nil
}

// lock takes the state folder and the root, then the socket.
func (p *process) lock() error {
	claim, err := owner.Acquire(p.cfg.FS, p.wc.Layout, owner.Self(p.cfg.Version, p.cfg.Socket))
	if err != nil {
		return err
	}
	p.claim = claim
	p.wc.Owner = claim
	p.ln, p.activated, err = listen(p.cfg.Socket)
	if err == nil && claim.Fresh() {
		p.announceFirstStart()
	}
	return err
}

// announceFirstStart says, on a state folder no sessiond used before, what
// this one keeps there: a user who never chose the folder learns where it
// is and what it costs.
func (p *process) announceFirstStart() {
	fields := []zap.Field{zap.String("state_dir", p.cfg.StateDir), zap.String("journal", p.wc.Layout.JournalDir())}
	if p.wc.BallastSize > 0 {
		fields = append(fields, zap.String("ballast", p.wc.Layout.BallastPath()), zap.Int64("ballast_bytes", p.wc.BallastSize))
	}
	p.log.Info("first start on this state folder: sessiond keeps its journal there and, unless --ballast-size 0, a file of disk space held in reserve for compactions on a full disk (--state-dir chooses another folder)", fields...)
}

// release undoes what the steps made, in the reverse order: the mirror,
// the metrics listener, the socket, and last the claim on the folders,
// after the writers have closed.
func (p *process) release() {
	if p.mir != nil {
		p.mir.Close()
	}
	if p.metricsLn != nil {
		p.metricsLn.Close() // the server's Close closed it already, if it served
	}
	if p.ln != nil {
		p.ln.Close()
	}
	if p.claim != nil {
		p.claim.Release()
	}
}

// recover opens the writers on what is on disk and checks every journal
// before anything is served (clients that connect meanwhile wait): a torn
// tail is cut and every record read back against its checksum, so what is
// served is what was acknowledged.
func (p *process) recover(ctx context.Context) error {
	// Metrics are set up before the writers, whose journal feeds them.
	if p.cfg.MetricsListen != "" {
		p.met = metrics.New(p.cfg.Version)
		p.wc.JournalOnCommit = p.met.ObserveCommit
	}
	if err := p.newMirror(); err != nil {
		return err
	}
	p.recoveryStart = time.Now()
	m, err := writer.New(p.wc)
	if err != nil {
		return err
	}
	p.m = m
	p.cat = newCatalog(m, p.log)
	if err := p.afterOpen(ctx); err != nil {
		m.Close(context.Background())
		return err
	}
	return nil
}

// newMirror makes the mirror --mirror asks for, which the writers tell
// what changed (it never holds them up) and ask whether another machine
// holds a session.
func (p *process) newMirror() error {
	if p.cfg.Mirror == nil {
		return nil
	}
	mc := *p.cfg.Mirror
	mc.Logger = p.log
	if mc.MachineID == "" {
		var moved bool
		var err error
		if mc.MachineID, moved, err = lease.MachineID(p.cfg.FS, p.cfg.StateDir); err != nil {
			return fmt.Errorf("machine id: %w", err)
		}
		if moved {
			p.log.Warn("the state folder's machine id was made on another machine (a copy or a restored backup): this one takes a new id, so the two never hold the same sessions' leases; leases held under the old id here expire by themselves",
				zap.String("machine_id", mc.MachineID))
		}
	}
	mir, err := mirror.New(mc)
	if err != nil {
		return err
	}
	p.mir = mir
	p.wc.Changed = mir.Notify
	p.wc.AppendGate = mir.Leases().CheckAppend
	return nil
}

// afterOpen is recovery once the writers are open: the metrics listener,
// the ballast, the journals' check, then the mirror, which reads what the
// check found acknowledged.
func (p *process) afterOpen(ctx context.Context) error {
	if p.met != nil {
		ln, err := metrics.Listen(p.metricsAddr)
		if err != nil {
			return err
		}
		p.metricsLn = ln
	}
	if p.wc.BallastSize == 0 {
		// No reserve wanted: one an earlier run kept is space wasted.
		if err := p.cfg.FS.Remove(p.wc.Layout.BallastPath()); err == nil {
			p.log.Info("removed the ballast (--ballast-size 0)", zap.String("path", p.wc.Layout.BallastPath()))
		}
	}
	p.start = time.Now()
	rep, replay, err := p.m.CheckJournals(ctx)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	p.replay = replay
	if rep.Checked > 0 || len(rep.Failed) > 0 {
		p.log.Info("checked journals", zap.Int("journals", rep.Checked), zap.Int64("bytes", rep.Bytes),
			zap.Int("failed", len(rep.Failed)), zap.Duration("took", time.Since(p.start)))
	}
	if p.mir != nil {
		// It connects in the background (PostgreSQL may be down) and
		// stops before the writers do. Its context is not the signal's:
		// it drains at shutdown, then Close stops it.
		if err := p.mir.Start(context.WithoutCancel(ctx), mirrorSource{reader.New(writer.NewSnapshots(p.m)), p.cat}); err != nil {
			return fmt.Errorf("mirror: %w", err)
		}
	}
	return nil
}

// serve starts the gRPC server on the socket, then the background work
// that needs it running (the replay into the transcripts, the trash's
// purge, indexing the sessions on disk), and tells systemd it is ready.
func (p *process) serve(ctx context.Context) error {
	p.srv = server.New(p.m, p.log, server.Info{Version: p.cfg.Version, Socket: p.cfg.Socket, Root: p.cfg.Root,
		StateDir: p.cfg.StateDir, Started: p.start, Mirror: p.mir, MaxMessageBytes: p.cfg.MaxMessageBytes, Catalog: p.cat})
	unary, stream, err := p.interceptors()
	if err != nil {
		return err
	}
	p.g = grpc.NewServer(append(TransportOptions(p.cfg.MaxMessageBytes),
		grpc.Creds(socket.PeerCredentials()),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)...)
	p.srv.Register(p.g)
	p.serveErr = make(chan error, 1)
	go func() { p.serveErr <- p.g.Serve(p.ln) }()
	p.background(ctx)
	if _, err := socket.Notify("READY=1"); err != nil {
		p.log.Warn("sd_notify READY failed", zap.Error(err))
	}
	p.log.Info("sessiond serving", zap.String("socket", p.ln.Addr().String()), zap.Bool("socket_activated", p.activated),
		zap.String("root", p.cfg.Root), zap.String("state_dir", p.cfg.StateDir), zap.String("version", p.cfg.Version))
	return nil
}

// interceptors are the calls' chain: the peer's uid, then the drain;
// with metrics, theirs first, so they see the codes the drain makes of the
// handlers' errors and the calls refused before them.
func (p *process) interceptors() ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor, error) {
	uidUnary, uidStream := socket.SameUserInterceptors(uint32(os.Getuid()))
	drainUnary, drainStream := p.srv.Interceptors()
	unary := []grpc.UnaryServerInterceptor{uidUnary, drainUnary}
	stream := []grpc.StreamServerInterceptor{uidStream, drainStream}
	if p.met == nil {
		return unary, stream, nil
	}
	p.met.SetRecovery(time.Since(p.recoveryStart))
	if err := p.met.Register(metrics.NewStatsCollector(p.m, p.m.Trash())); err != nil {
		return nil, nil, err
	}
	if p.mir != nil {
		if err := registerMirrorMetrics(p.met, p.mir); err != nil {
			return nil, nil, err
		}
	}
	p.srv.ObserveAppends(p.met.ObserveAppend)
	mu, ms := p.met.Interceptors()
	unary = append([]grpc.UnaryServerInterceptor{mu}, unary...)
	stream = append([]grpc.StreamServerInterceptor{ms}, stream...)
	p.metricsSrv = p.met.Serve(p.metricsLn, zap.NewStdLog(p.log.Named("metrics")))
	// The address bound (a port 0 became a real one), as the flag takes it.
	bound := metrics.Address{Network: p.metricsAddr.Network, Addr: p.metricsLn.Addr().String()}
	p.log.Info("serving metrics", zap.Stringer("metrics_listen", bound))
	return unary, stream, nil
}

// background starts the work that runs while serving: the journaled
// entries found at start go into their transcripts; trashed copies past
// their retention go now and every hour (only after CheckJournals, which
// finishes restores that were reading them); the sessions already on disk
// are indexed, so the first listing is as fast as the next.
func (p *process) background(ctx context.Context) {
	p.replayed = make(chan struct{})
	if len(p.replay) == 0 {
		close(p.replayed)
	} else {
		go func() {
			defer close(p.replayed)
			t := time.Now()
			r := p.m.Replay(ctx, p.replay)
			p.log.Info("replayed journals into their transcripts", zap.Int("sessions", r.Sessions),
				zap.Uint64("entries", r.Entries), zap.Int("failed", len(r.Failed)), zap.Int("deferred_for_space", r.Deferred),
				zap.Duration("took", time.Since(t)))
		}()
	}
	p.purged = make(chan struct{})
	go func() { defer close(p.purged); p.m.Trash().RunPurge(ctx) }()
	go func() {
		t := time.Now()
		if err := p.cat.WarmIndex(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("indexing the sessions on disk failed; listings will index on demand", zap.Error(err))
			return
		}
		p.log.Info("indexed sessions on disk", zap.Duration("took", time.Since(t)))
	}()
}

// wait serves until ctx ends (a normal stop) or the server fails.
func (p *process) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-p.serveErr:
		return fmt.Errorf("serve: %w", err)
	}
}

// drain stops within the shutdown timeout: no new call, the calls in
// flight finish (or are closed at the deadline), the replay stops at the
// session it is on, the mirror sends what it held back, and every writer
// compacts and closes.
func (p *process) drain(runErr error) error {
	p.log.Info("draining")
	socket.Notify("STOPPING=1")
	deadline := time.Now().Add(p.cfg.ShutdownTimeout)
	p.srv.Drain()
	stopped := make(chan struct{})
	go func() { p.g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Until(deadline)):
		p.log.Warn("calls still running at the shutdown deadline; closing them")
		p.g.Stop()
		<-stopped
	}
	// What the replay did not reach stays journaled for the next start.
	select {
	case <-p.replayed:
	case <-time.After(time.Until(deadline)):
	}
	closeCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	<-p.purged // ctx is done: it stops between two copies
	p.drainMirror(closeCtx)
	err := p.m.Close(closeCtx)
	<-p.replayed
	// Metrics are served through the drain, for whoever watches it.
	if cerr := p.metricsSrv.Close(closeCtx); cerr != nil {
		p.log.Warn("stopping the metrics server", zap.Error(cerr))
	}
	if err != nil {
		p.log.Error("shutdown incomplete", zap.Error(err))
		return errors.Join(runErr, err)
	}
	st := p.m.Stats()
	p.log.Info("sessiond stopped", zap.Uint64("entries_stored", st.EntriesStored), zap.Uint64("compactions", st.Compactions))
	return runErr
}

// drainMirror sends what the mirror holds back for its pace, within the
// shutdown's time (at most mirrorDrain), before Close releases the
// leases. Its reads go through the writers, which close next; what it
// could not mirror is at the next start.
func (p *process) drainMirror(ctx context.Context) {
	if p.mir == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, mirrorDrain)
	defer cancel()
	if err := p.mir.Drain(dctx); err != nil {
		p.log.Warn("stopping the mirror", zap.Error(err))
	}
	p.mir.Close()
}

// listen takes the socket systemd passed, or opens cfg.Socket safely.
func listen(path string) (net.Listener, bool, error) {
	ln, err := socket.FromSystemd()
	if err != nil {
		return nil, false, fmt.Errorf("socket activation: %w", err)
	}
	if ln != nil {
		return ln, true, nil
	}
	ln, err = socket.Listen(path)
	if err != nil {
		return nil, false, err
	}
	return ln, false, nil
}

// TransportOptions are the gRPC server settings that shape sessiond's
// per-call cost; the load tool's transport baseline uses the same ones.
func TransportOptions(maxMessageBytes int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxSendMsgSize(maxMessageBytes),
		// A fixed pool of goroutines serves the streams instead of one
		// new goroutine per call, whose stack grows afresh each time.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.SharedWriteBuffer(true),
		// Fixed flow-control windows. With the default dynamic windows
		// grpc-go pings the peer to estimate the bandwidth-delay product
		// whenever data arrives and no such ping is out: on a local socket
		// that is a PING and its ACK (frames, a wake-up and a write on each
		// side) on every call. About 20% more appends per second with 64
		// clients (BENCHMARKS.md). These are the daemon's receive windows,
		// so they bound what a client may send ahead of sessiond reading
		// it: as large as the dynamic windows grow, so a large entry is not
		// slowed. The client sets its own, small ones (client.Dial).
		grpc.StaticStreamWindowSize(8 << 20),
		grpc.StaticConnWindowSize(16 << 20),
	}
}

// mirrorDrain bounds the mirror's drain at shutdown: PostgreSQL may be
// slow, and the writers' own flush must still fit the stop timeout.
const mirrorDrain = 10 * time.Second

// registerMirrorMetrics publishes the mirror's lag and errors: what
// Status.mirror shows, read at each scrape.
func registerMirrorMetrics(met *metrics.Metrics, mir *mirror.Mirror) error {
	lag := func(fn func(mirror.Status) float64) func() float64 {
		return func() float64 { return fn(mir.Status()) }
	}
	for _, g := range []struct {
		name, help string
		fn         func(mirror.Status) float64
	}{
		{"sessiond_mirror_lag_entries", "Entries stored locally and not yet in PostgreSQL.",
			func(st mirror.Status) float64 { return float64(st.EntriesBehind) }},
		{"sessiond_mirror_lag_bytes", "Bytes of the entries stored locally and not yet in PostgreSQL.",
			func(st mirror.Status) float64 { return float64(st.BytesBehind) }},
		{"sessiond_mirror_lag_seconds", "Age of the oldest entry not yet in PostgreSQL (0: none waits).",
			func(st mirror.Status) float64 {
				if st.OldestBehind.IsZero() {
					return 0
				}
				return time.Since(st.OldestBehind).Seconds()
			}},
		{"sessiond_mirror_connected", "1 while PostgreSQL answers the mirror.",
			func(st mirror.Status) float64 {
				if st.Connected {
					return 1
				}
				return 0
			}},
	} {
		if err := met.GaugeFunc(g.name, g.help, nil, lag(g.fn)); err != nil {
			return err
		}
	}
	return met.CounterFunc("sessiond_mirror_errors_total", "Errors the PostgreSQL mirror met (lost connections, failed transactions), each try once.", nil,
		func() float64 { return float64(mir.Errors()) })
}

// newCatalog is the catalog over m's folders and the index its writers
// publish to.
func newCatalog(m *writer.Manager, log *zap.Logger) *catalog.Catalog {
	c := m.Config()
	return catalog.New(catalog.Config{FS: c.FS, Layout: c.Layout, Index: c.Index, Logger: log, Progress: c.Progress}, m)
}

// mirrorSource is what the mirror reads: the transcripts through the
// writers' snapshots, which transcripts and sidecars there are from the
// catalog.
type mirrorSource struct {
	*reader.Reader
	*catalog.Catalog
}
