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
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.FS == nil {
		cfg.FS = fsys.OS
	}
	wc := cfg.Writer
	wc.Layout = layout.Layout{Root: cfg.Root, StateDir: cfg.StateDir}
	wc.Logger = log
	wc.FS = cfg.FS
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if wc.MaxEntryBytes <= 0 {
		wc.MaxEntryBytes = writer.DefaultMaxEntryBytes
	}
	if cfg.MaxMessageBytes < wc.MaxEntryBytes+(1<<20) {
		return fmt.Errorf("--max-message-bytes (%d) must exceed --max-entry-bytes (%d) by at least 1 MiB", cfg.MaxMessageBytes, wc.MaxEntryBytes)
	}
	var metricsAddr metrics.Address
	if cfg.MetricsListen != "" {
		a, err := metrics.ParseAddress(cfg.MetricsListen)
		if err != nil {
			return err
		}
		metricsAddr = a
	}

	// The order is what keeps a second sessiond from destroying what this
	// one acknowledged: first the locks (the state folder, the root, then
	// the socket's), then recovery, then serving. A process refused at any
	// lock has changed nothing of the owner's (TestStartOrder).
	claim, err := owner.Acquire(cfg.FS, wc.Layout, owner.Self(cfg.Version, cfg.Socket))
	if err != nil {
		return err
	}
	defer claim.Release() // last: after the writers have closed
	wc.Owner = claim
	ln, activated, err := listen(cfg.Socket)
	if err != nil {
		return err
	}
	defer ln.Close()

	// Metrics are set up before the writers, whose log feeds them.
	var met *metrics.Metrics
	if cfg.MetricsListen != "" {
		met = metrics.New(cfg.Version)
		wc.JournalOnCommit = met.ObserveCommit
	}
	var mir *mirror.Mirror
	if cfg.Mirror != nil {
		mc := *cfg.Mirror
		mc.Logger = log
		if mc.MachineID == "" {
			var moved bool
			if mc.MachineID, moved, err = lease.MachineID(cfg.FS, cfg.StateDir); err != nil {
				return fmt.Errorf("machine id: %w", err)
			}
			if moved {
				log.Warn("the state folder's machine id was made on another machine (a copy or a restored backup): this one takes a new id, so the two never hold the same sessions' leases; leases held under the old id here expire by themselves",
					zap.String("machine_id", mc.MachineID))
			}
		}
		if mir, err = mirror.New(mc); err != nil {
			return err
		}
		// The writers tell the mirror what changed; it never holds them up.
		wc.Changed = mir.Notify
		// And ask it whether another machine holds the session.
		wc.AppendGate = mir.Leases().CheckAppend
	}
	// Recovery starts here: writer.New reads and checks the log.
	recoveryStart := time.Now()
	m, err := writer.New(wc)
	if err != nil {
		return err
	}
	cat := newCatalog(m, log)
	var metricsLn net.Listener
	if met != nil {
		if metricsLn, err = metrics.Listen(metricsAddr); err != nil {
			m.Close(context.Background())
			return err
		}
		defer metricsLn.Close() // until the server owns it
	}
	if wc.BallastSize == 0 {
		// No reserve wanted: one an earlier run kept is space wasted.
		if err := cfg.FS.Remove(wc.Layout.BallastPath()); err == nil {
			log.Info("removed the ballast (--ballast-size 0)", zap.String("path", wc.Layout.BallastPath()))
		}
	}

	// Check every journal before serving (clients that connect meanwhile
	// wait): a torn tail is cut and every record read back against its
	// checksum, so what is served is what was acknowledged. The entries are
	// served from the journals; moving them into the canonical files, for
	// the official readers, runs once serving has started.
	start := time.Now()
	rep, replay, err := m.CheckJournals(ctx)
	if err != nil {
		m.Close(context.Background())
		return fmt.Errorf("recovery: %w", err)
	}
	if rep.Checked > 0 || len(rep.Failed) > 0 {
		log.Info("checked journals", zap.Int("journals", rep.Checked), zap.Int64("bytes", rep.Bytes),
			zap.Int("failed", len(rep.Failed)), zap.Duration("took", time.Since(start)))
	}
	if mir != nil {
		// After the journals' check: what it reads is what was
		// acknowledged. It connects in the background (PostgreSQL may
		// be down) and stops before the writers do. Its context is not
		// the signal's: it drains at shutdown (below), then Close stops it.
		if err := mir.Start(context.WithoutCancel(ctx), mirrorSource{m, cat}); err != nil {
			m.Close(context.Background())
			return fmt.Errorf("mirror: %w", err)
		}
		defer mir.Close()
	}
	srv := server.New(m, log, server.Info{Version: cfg.Version, Socket: cfg.Socket, Root: cfg.Root,
		StateDir: cfg.StateDir, Started: start, Mirror: mir, MaxMessageBytes: cfg.MaxMessageBytes, Catalog: cat})
	uidUnary, uidStream := socket.SameUserInterceptors(uint32(os.Getuid()))
	drainUnary, drainStream := srv.Interceptors()
	unary := []grpc.UnaryServerInterceptor{uidUnary, drainUnary}
	stream := []grpc.StreamServerInterceptor{uidStream, drainStream}
	var metricsSrv *metrics.Server
	if met != nil {
		met.SetRecovery(time.Since(recoveryStart))
		if err := met.Register(metrics.NewStatsCollector(m, m.Trash())); err != nil {
			m.Close(context.Background())
			return err
		}
		if mir != nil {
			if err := registerMirrorMetrics(met, mir); err != nil {
				m.Close(context.Background())
				return err
			}
		}
		srv.ObserveAppends(met.ObserveAppend)
		// First in the chain: they see the codes the drain interceptor
		// makes of the handlers' errors, and the calls refused before.
		mu, ms := met.Interceptors()
		unary = append([]grpc.UnaryServerInterceptor{mu}, unary...)
		stream = append([]grpc.StreamServerInterceptor{ms}, stream...)
		metricsSrv = met.Serve(metricsLn, zap.NewStdLog(log.Named("metrics")))
		// The address bound (a port 0 became a real one), as the flag takes it.
		bound := metrics.Address{Network: metricsAddr.Network, Addr: metricsLn.Addr().String()}
		log.Info("serving metrics", zap.Stringer("metrics_listen", bound))
	}
	g := grpc.NewServer(append(TransportOptions(cfg.MaxMessageBytes),
		grpc.Creds(socket.PeerCredentials()),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)...)
	srv.Register(g)

	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(ln) }()
	replayed := make(chan struct{})
	if len(replay) == 0 {
		close(replayed)
	} else {
		go func() {
			defer close(replayed)
			t := time.Now()
			r := m.Replay(ctx, replay)
			log.Info("replayed journals into their transcripts", zap.Int("sessions", r.Sessions),
				zap.Uint64("entries", r.Entries), zap.Int("failed", len(r.Failed)), zap.Int("deferred_for_space", r.Deferred),
				zap.Duration("took", time.Since(t)))
		}()
	}
	// Trashed copies past their retention go now and every hour; only
	// after CheckJournals, which finishes restores that were reading them.
	purged := make(chan struct{})
	go func() { defer close(purged); m.Trash().RunPurge(ctx) }()
	// Index the sessions already on disk (written before sessiond, or by
	// other programs), so the first listing is as fast as the next.
	go func() {
		t := time.Now()
		if err := cat.WarmIndex(ctx); err != nil && ctx.Err() == nil {
			log.Warn("indexing the sessions on disk failed; listings will index on demand", zap.Error(err))
			return
		}
		log.Info("indexed sessions on disk", zap.Duration("took", time.Since(t)))
	}()
	if _, err := socket.Notify("READY=1"); err != nil {
		log.Warn("sd_notify READY failed", zap.Error(err))
	}
	log.Info("sessiond serving", zap.String("socket", ln.Addr().String()), zap.Bool("socket_activated", activated),
		zap.String("root", cfg.Root), zap.String("state_dir", cfg.StateDir), zap.String("version", cfg.Version))

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	}

	log.Info("draining")
	socket.Notify("STOPPING=1")
	deadline := time.Now().Add(cfg.ShutdownTimeout)
	srv.Drain()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Until(deadline)):
		log.Warn("calls still running at the shutdown deadline; closing them")
		g.Stop()
		<-stopped
	}
	// The replay stops at the session it is on (ctx is done); what it did
	// not reach stays journaled for the next start.
	select {
	case <-replayed:
	case <-time.After(time.Until(deadline)):
	}
	closeCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	<-purged // ctx is done: it stops between two copies
	if mir != nil {
		// No append comes any more: what the mirror holds back for its
		// pace goes now, within the shutdown's time (at most mirrorDrain),
		// before Close releases the leases. Its reads go through the
		// writers, which close next; what it could not mirror is at the
		// next start.
		dctx, dcancel := context.WithTimeout(closeCtx, mirrorDrain)
		if err := mir.Drain(dctx); err != nil {
			log.Warn("stopping the mirror", zap.Error(err))
		}
		dcancel()
		mir.Close()
	}
	err = m.Close(closeCtx)
	<-replayed
	// Metrics are served through the drain, for whoever watches it.
	if cerr := metricsSrv.Close(closeCtx); cerr != nil {
		log.Warn("stopping the metrics server", zap.Error(cerr))
	}
	if err != nil {
		log.Error("shutdown incomplete", zap.Error(err))
		return errors.Join(runErr, err)
	}
	st := m.Stats()
	log.Info("sessiond stopped", zap.Uint64("entries_stored", st.EntriesStored), zap.Uint64("compactions", st.Compactions))
	return runErr
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

// mirrorSource is what the mirror reads: the transcripts from the
// writers, which transcripts and sidecars there are from the catalog.
type mirrorSource struct {
	*writer.Manager
	*catalog.Catalog
}
