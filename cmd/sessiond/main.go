// Command sessiond is the transcript daemon: it serialises every write to
// agent session transcripts behind a gRPC API on a Unix socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/internal/daemon"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/socket"
	"github.com/sessiond/sessiond/internal/writer"
)

// exitOwned is the exit status when another sessiond already owns the
// state folder, the root or the socket: nothing was touched, and
// restarting will not help until that one stops (the systemd unit's
// RestartPreventExitStatus= names it).
const exitOwned = 3

func main() {
	flag.Usage = usage
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sessiond:", err)
		if errors.Is(err, owner.ErrOwned) || errors.Is(err, socket.ErrAlreadyRunning) {
			os.Exit(exitOwned)
		}
		os.Exit(1)
	}
}

func usage() {
	w := flag.CommandLine.Output()
	fmt.Fprintf(w, `Usage: sessiond [flags]

sessiond serialises every write to agent session transcripts behind a gRPC
API on a Unix socket (see README.md).

One sessiond owns a state folder and a transcripts root. A second one
started on either (another terminal, a manual run beside the systemd
service, a second unit), or on a socket already served, is refused before
it reads anything: it exits with status %d and names the one that runs.

Flags:
`, exitOwned)
	flag.PrintDefaults()
}

// run is sessiond's life in named steps: read the flags, make the
// daemon's configuration of them, start the log and the profiles, serve
// until SIGTERM or SIGINT.
func run() error {
	opts := defineFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (sessiond takes flags only; see -h)", flag.Args())
	}
	if opts.showVersion {
		fmt.Println("sessiond", version())
		return nil
	}
	cfg, err := opts.daemonConfig()
	if err != nil {
		return err
	}
	log, err := newLogger(opts.logFormat, opts.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	log.Debug("scheduler", zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)), zap.Int("cpus", runtime.NumCPU()))
	stopProfiles, err := opts.profiles.start(log)
	if err != nil {
		return err
	}
	defer stopProfiles()
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return daemon.Run(ctx, cfg)
}

// options are the flags, as given.
type options struct {
	socket, root, state  string
	rootErr, stateErr    error // why no default root or state folder was found
	shutdownTimeout      time.Duration
	maxEntry, maxMessage int
	idleCompact          time.Duration
	compactWithin        time.Duration
	commitDelay          time.Duration
	idleRetire           time.Duration
	minCompact           int64
	segment, journalMax  int64
	ballast              int64
	retention            time.Duration
	retentionSize        int64
	trashRetention       time.Duration
	metricsListen        string
	mirrorDSN, mirrorTab string
	mirrorPace           time.Duration
	machineID            string
	leaseTTL             time.Duration
	acceptJournalLoss    bool
	logFormat, logLevel  string
	showVersion          bool
	profiles             profiles
}

// defineFlags registers sessiond's flags on fs. Their defaults are the
// packages' own (daemon, writer, journal, mirror), so -h shows what an
// unset flag means.
func defineFlags(fs *flag.FlagSet) *options {
	o := &options{}
	var root, state string
	root, o.rootErr = layout.DefaultRoot(os.Getenv)
	state, o.stateErr = layout.DefaultStateDir(os.Getenv)
	fs.StringVar(&o.socket, "socket", layout.DefaultSocket(os.Getenv), "Unix socket to serve on (env SESSIOND_SOCKET; default: $XDG_RUNTIME_DIR/sessiond, /run/user/<uid>/sessiond, macOS $TMPDIR/sessiond, <state folder from SESSIOND_STATE_DIR, XDG_STATE_HOME or HOME>/run, else /tmp/sessiond-<uid>)")
	fs.StringVar(&o.root, "root", root, "transcripts root holding projects/ (env SESSIOND_ROOT, else CLAUDE_CONFIG_DIR, else ~/.claude)")
	fs.StringVar(&o.state, "state-dir", state, "the journal and daemon state (env SESSIOND_STATE_DIR, else $XDG_STATE_HOME/sessiond)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", daemon.DefaultShutdownTimeout, "how long a SIGTERM drain may take before sessiond exits, leaving the rest to recovery from the journal")
	fs.IntVar(&o.maxEntry, "max-entry-bytes", writer.DefaultMaxEntryBytes, "largest entry accepted")
	fs.IntVar(&o.maxMessage, "max-message-bytes", daemon.DefaultMaxMessageBytes, "largest gRPC message (an append batch) accepted")
	fs.DurationVar(&o.idleCompact, "idle-compact", writer.DefaultIdleCompact, "write a new session's transcript after this long without appends")
	fs.DurationVar(&o.commitDelay, "commit-delay", journal.DefaultCommitDelay, "while many sessions append, how long a small group commit may wait for other sessions' appends before its write and sync (fewer syncs and less CPU for this much latency; 0: never wait)")
	fs.DurationVar(&o.compactWithin, "compact-within", writer.DefaultCompactWithin, "the longest an acknowledged entry waits before it is in its transcript (files up to 4 MiB; never less than --idle-compact)")
	fs.DurationVar(&o.idleRetire, "idle-retire", writer.DefaultIdleRetire, "close a session's files after this long without activity")
	fs.Int64Var(&o.minCompact, "min-compact-bytes", writer.DefaultMinCompactBytes, "compact a session once the journal holds this many bytes of its entries and at least as many as its transcript (benchmarks raise it to keep large journals)")
	fs.Int64Var(&o.segment, "journal-segment-size", journal.DefaultSegmentSize, "size at which the journal starts a new segment file (default: a sixteenth of the state folder's disk when that is smaller)")
	fs.Int64Var(&o.journalMax, "journal-max-size", journal.DefaultMaxSize, "once the journal's segments add up to more, the sessions holding the oldest one are compacted so it can go (default: a quarter of the state folder's disk when that is smaller)")
	fs.Int64Var(&o.ballast, "ballast-size", writer.DefaultBallastSize, "disk space kept in reserve (the file <state-dir>/ballast), released when the disk fills so the compactions waiting can finish, made again once there is room for it twice over; 0 keeps none (default: a sixteenth of the state folder's disk when that is smaller)")
	fs.DurationVar(&o.retention, "journal-retention", writer.DefaultJournalRetention, "keep the journal's segments this long after their sessions were compacted, so repair can put back acknowledged entries another program's rewrite of a transcript dropped (0 keeps none)")
	fs.Int64Var(&o.retentionSize, "journal-retention-size", writer.DefaultJournalRetentionSize, "the most the retained segments may add up to, in bytes; the oldest go first (and all of them when the disk is full) (default: an eighth of the state folder's disk when that is smaller)")
	fs.DurationVar(&o.trashRetention, "trash-retention", writer.DefaultTrashRetention, "how long a deleted session's copy stays in the trash before it is purged (checked at start and hourly); the default is the official CLI's own cleanupPeriodDays, 30 days")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at GET /metrics on this address: 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:/path (a socket made 0600 in a folder only this user controls); other addresses are refused, the endpoint having no authentication. Empty (the default): no metrics")
	fs.StringVar(&o.mirrorDSN, "mirror", "", "mirror every transcript into PostgreSQL at this connection string (postgres://user@host:5432/db, or key=value pairs; env SESSIOND_MIRROR, which keeps the password out of the process list, as does ~/.pgpass): the reference SessionStore adapter's table, kept exactly once behind the local transcripts, which stay the source of truth")
	fs.StringVar(&o.mirrorTab, "mirror-table", mirror.DefaultTable, "the table --mirror writes (the reference adapter's layout; letters, digits and _; env SESSIOND_MIRROR_TABLE)")
	fs.DurationVar(&o.mirrorPace, "mirror-pace", mirror.DefaultPace, "with --mirror: the least time between two transactions of one transcript (what is appended meanwhile goes in the next; 0: none)")
	fs.StringVar(&o.machineID, "machine-id", "", "the name this sessiond holds sessions' leases under in the --mirror database (one writer per session across machines; env SESSIOND_MACHINE_ID): every machine sharing the database needs its own. Default: the host name and a random suffix, made once and kept in <state-dir>/machine-id")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", mirror.DefaultLeaseTTL, "with --mirror: how long a session's lease lasts unless renewed (renewed every third of it while the session is appended to); after it another machine may take the session over")
	fs.BoolVar(&o.acceptJournalLoss, "accept-journal-loss", false, "start even though the journal lost acknowledged entries to something other than a crash (a segment cut short, deleted or damaged by another program or the disk): those entries are then gone for good, and status and the log report them. Without it sessiond refuses to start over such a loss and changes nothing, so the segments can still be restored from a backup")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto (console on a terminal, else JSON), console or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.StringVar(&o.profiles.cpu, "cpuprofile", "", "write a CPU profile of the whole run to this file (for `go tool pprof`), finished when sessiond exits")
	fs.StringVar(&o.profiles.mem, "memprofile", "", "write a profile of the whole run's allocations to this file (for `go tool pprof`) when sessiond exits")
	fs.StringVar(&o.profiles.trace, "trace", "", "write an execution trace of the whole run to this file (for `go tool trace`: where each request waited), finished when sessiond exits")
	return o
}

// daemonConfig checks the flags and turns them into the daemon's
// configuration: absolute paths, disk-sized defaults where a size was
// not given, the mirror's settings with the environment's.
func (o *options) daemonConfig() (daemon.Config, error) {
	if err := o.checkRanges(); err != nil {
		return daemon.Config{}, err
	}
	mc, err := o.mirrorConfig()
	if err != nil {
		return daemon.Config{}, err
	}
	if err := o.absPaths(); err != nil {
		return daemon.Config{}, err
	}
	o.diskSizes()
	retention := o.retention
	if retention == 0 {
		retention = -1 // writer.Config: negative keeps nothing, 0 is the default
	}
	return daemon.Config{
		Socket: o.socket, Root: o.root, StateDir: o.state,
		ShutdownTimeout: o.shutdownTimeout, MaxMessageBytes: o.maxMessage, Version: version(),
		Writer: writer.Config{MaxEntryBytes: o.maxEntry, IdleCompact: o.idleCompact, CompactWithin: o.compactWithin, CommitDelay: commitDelay(o.commitDelay), IdleRetire: o.idleRetire,
			MinCompactBytes: o.minCompact, JournalSegmentSize: o.segment, JournalMaxSize: o.journalMax, BallastSize: o.ballast,
			JournalRetention: retention, JournalRetentionSize: o.retentionSize, TrashRetention: o.trashRetention,
			AcceptJournalLoss: o.acceptJournalLoss},
		MetricsListen: o.metricsListen, Mirror: mc,
	}, nil
}

// commitDelay is the writer's CommitDelay for --commit-delay d: 0 there
// means no wait, which the writer spells negative (its 0 is the default).
func commitDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// checkRanges refuses values that would quietly mean a default further
// down: here the user can be told which flag it was.
func (o *options) checkRanges() error {
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"shutdown-timeout", o.shutdownTimeout > 0}, {"max-entry-bytes", o.maxEntry > 0},
		{"max-message-bytes", o.maxMessage > 0}, {"idle-compact", o.idleCompact > 0}, {"compact-within", o.compactWithin > 0},
		{"idle-retire", o.idleRetire > 0}, {"min-compact-bytes", o.minCompact > 0},
		{"journal-segment-size", o.segment > 0}, {"journal-max-size", o.journalMax > 0},
		{"journal-retention-size", o.retentionSize > 0},
		{"trash-retention", o.trashRetention > 0},
		{"lease-ttl", o.leaseTTL > 0},
	} {
		if !f.ok {
			return fmt.Errorf("--%s must be greater than zero (%s); leave it out for the default", f.name, flag.Lookup(f.name).Value)
		}
	}
	if o.ballast < 0 {
		return fmt.Errorf("--ballast-size must be 0 (no reserve) or more, not %d", o.ballast)
	}
	if o.retention < 0 {
		return fmt.Errorf("--journal-retention must not be negative (%s); 0 keeps nothing after compaction", o.retention)
	}
	if o.commitDelay < 0 {
		return fmt.Errorf("--commit-delay must not be negative (%s); 0 never waits", o.commitDelay)
	}
	if o.machineID == "" {
		o.machineID = os.Getenv("SESSIOND_MACHINE_ID")
	}
	if o.machineID != "" {
		if err := lease.CheckMachineID(o.machineID); err != nil {
			return fmt.Errorf("--machine-id %q is refused: %w", o.machineID, err)
		}
	}
	return nil
}

// absPaths makes the socket, root and state folder absolute: the socket is
// unlinked at exit and the folders are compared with what the state
// records, whatever the working directory.
func (o *options) absPaths() error {
	if o.root == "" {
		return fmt.Errorf("no transcripts root: %v; pass --root", o.rootErr)
	}
	if o.state == "" {
		return fmt.Errorf("no state folder: %v; pass --state-dir", o.stateErr)
	}
	for _, p := range []*string{&o.socket, &o.root, &o.state} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("path %q: %w", *p, err)
		}
		*p = abs
	}
	return nil
}

// diskSizes gives the sizes not set on the command line the defaults of
// the state folder's disk: the fixed ones would take all of a small
// volume.
func (o *options) diskSizes() {
	total, err := fsys.DiskSize(o.state)
	if err != nil {
		return // the fixed defaults; the start says what is wrong with the folder
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	sz := writer.SizesFor(total)
	for _, f := range []struct {
		name string
		v    *int64
		auto int64
	}{{"ballast-size", &o.ballast, sz.Ballast}, {"journal-segment-size", &o.segment, sz.Segment},
		{"journal-max-size", &o.journalMax, sz.JournalMax}, {"journal-retention-size", &o.retentionSize, sz.Retention}} {
		if !set[f.name] {
			*f.v = f.auto
		}
	}
}

// mirrorConfig is the mirror the flags ask for, or nil.
func (o *options) mirrorConfig() (*mirror.Config, error) {
	mc, err := mirrorConfig(o.mirrorDSN, o.mirrorTab, o.mirrorPace)
	if err != nil || mc == nil {
		return mc, err
	}
	mc.LeaseTTL = o.leaseTTL
	mc.LeaseIdle = o.idleRetire
	mc.MachineID = o.machineID // empty: made once and kept in the state folder
	return mc, nil
}

// profiles are the runtime profiles asked for on the command line.
type profiles struct{ cpu, mem, trace string }

// start starts the profiles asked for; the returned function finishes
// them, at exit.
func (p profiles) start(log *zap.Logger) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return stop, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if p.mem != "" {
		f, err := os.Create(p.mem)
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("--memprofile: %w", err)
		}
		stops = append(stops, func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				log.Warn("--memprofile: cannot write the profile", zap.Error(err))
			}
			f.Close()
		})
	}
	if p.trace != "" {
		f, err := os.Create(p.trace)
		if err == nil {
			if err = trace.Start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("--trace: %w", err)
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}

// mirrorConfig is the mirror --mirror and --mirror-table ask for (nil:
// none), with the environment's SESSIOND_MIRROR and SESSIOND_MIRROR_TABLE
// where the flags were not given. The flag's default stays empty, so -h
// never prints a connection string from the environment.
func mirrorConfig(dsn, table string, pace time.Duration) (*mirror.Config, error) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["mirror"] {
		dsn = os.Getenv("SESSIOND_MIRROR")
	}
	if !set["mirror-table"] {
		if t := os.Getenv("SESSIOND_MIRROR_TABLE"); t != "" {
			table = t
		}
	}
	if err := mirror.CheckTable(table); err != nil {
		return nil, fmt.Errorf("--mirror-table: %w", err)
	}
	if pace < 0 || pace > time.Minute {
		return nil, fmt.Errorf("--mirror-pace %v: give a duration from 0 (none) to 1m", pace)
	}
	if pace == 0 {
		pace = -1 // mirror.Config: negative is none, 0 the default
	}
	if dsn == "" {
		if set["mirror"] {
			return nil, fmt.Errorf("--mirror is empty: give a PostgreSQL connection string, or leave the flag out for no mirror")
		}
		return nil, nil
	}
	mc := &mirror.Config{DSN: dsn, Table: table, Pace: pace}
	// Parse it now, so a bad string stops sessiond with a message
	// instead of a mirror that never connects.
	if _, err := mirror.New(*mc); err != nil {
		return nil, fmt.Errorf("--mirror: %w", err)
	}
	return mc, nil
}

func version() string { return buildinfo.Version() }

func newLogger(format, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	switch format {
	case "auto":
		if isTerminal(os.Stderr.Fd()) {
			format = "console"
		} else {
			format = "json"
		}
	case "console", "json":
	default:
		return nil, fmt.Errorf("--log-format must be auto, console or json, not %q", format)
	}
	var cfg zap.Config
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.DisableStacktrace = true
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.OutputPaths = []string{"stderr"}
	return cfg.Build()
}

func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), ioctlReadTermios)
	return err == nil
}
