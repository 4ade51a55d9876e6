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

func run() error {
	root, rootErr := layout.DefaultRoot(os.Getenv)
	state, stateErr := layout.DefaultStateDir(os.Getenv)
	var (
		socketPath          = flag.String("socket", layout.DefaultSocket(os.Getenv), "Unix socket to serve on (env SESSIOND_SOCKET; default: $XDG_RUNTIME_DIR/sessiond, /run/user/<uid>/sessiond, macOS $TMPDIR/sessiond, <state folder from SESSIOND_STATE_DIR, XDG_STATE_HOME or HOME>/run, else /tmp/sessiond-<uid>)")
		rootDir             = flag.String("root", root, "transcripts root holding projects/ (env SESSIOND_ROOT, else CLAUDE_CONFIG_DIR, else ~/.claude)")
		stateDir            = flag.String("state-dir", state, "the journal and daemon state (env SESSIOND_STATE_DIR, else $XDG_STATE_HOME/sessiond)")
		shutdownTimeout     = flag.Duration("shutdown-timeout", 30*time.Second, "how long a SIGTERM drain may take before sessiond exits, leaving the rest to recovery from the journal")
		maxEntry            = flag.Int("max-entry-bytes", writer.DefaultMaxEntryBytes, "largest entry accepted")
		maxMessage          = flag.Int("max-message-bytes", 64<<20, "largest gRPC message (an append batch) accepted")
		idleCompact         = flag.Duration("idle-compact", writer.DefaultIdleCompact, "compact a session after this long without appends")
		idleRetire          = flag.Duration("idle-retire", writer.DefaultIdleRetire, "close a session's files after this long without activity")
		minCompact          = flag.Int64("min-compact-bytes", writer.DefaultMinCompactBytes, "compact a session once the log holds this many bytes of its entries and at least as many as its transcript (benchmarks raise it to keep large logs)")
		journalSegment      = flag.Int64("journal-segment-size", journal.DefaultSegmentSize, "size at which the journal starts a new segment file (default: a sixteenth of the state folder's disk when that is smaller)")
		journalMax          = flag.Int64("journal-max-size", journal.DefaultMaxSize, "once the journal's segments add up to more, the sessions holding the oldest one are compacted so it can go (default: a quarter of the state folder's disk when that is smaller)")
		ballastSize         = flag.Int64("ballast-size", writer.DefaultBallastSize, "disk space kept in reserve (the file <state-dir>/ballast), released when the disk fills so the compactions waiting can finish, made again once there is room for it twice over; 0 keeps none (default: a sixteenth of the state folder's disk when that is smaller)")
		journalRetention    = flag.Duration("journal-retention", writer.DefaultJournalRetention, "keep the journal's segments this long after their sessions were compacted, so repair can put back acknowledged entries another program's rewrite of a transcript dropped (0 keeps none)")
		journalRetentionMax = flag.Int64("journal-retention-size", writer.DefaultJournalRetentionSize, "the most the retained segments may add up to, in bytes; the oldest go first (and all of them when the disk is full) (default: an eighth of the state folder's disk when that is smaller)")
		trashRetention      = flag.Duration("trash-retention", writer.DefaultTrashRetention, "how long a deleted session's copy stays in the trash before it is purged (checked at start and hourly); the default is the official CLI's own cleanupPeriodDays, 30 days")
		metricsListen       = flag.String("metrics-listen", "", "serve Prometheus metrics at GET /metrics on this address: 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:/path (a socket made 0600 in a folder only this user controls); other addresses are refused, the endpoint having no authentication. Empty (the default): no metrics")
		mirrorDSN           = flag.String("mirror", "", "mirror every transcript into PostgreSQL at this connection string (postgres://user@host:5432/db, or key=value pairs; env SESSIOND_MIRROR, which keeps the password out of the process list, as does ~/.pgpass): the reference SessionStore adapter's table, kept exactly once behind the local transcripts, which stay the source of truth")
		mirrorTable         = flag.String("mirror-table", mirror.DefaultTable, "the table --mirror writes (the reference adapter's layout; letters, digits and _; env SESSIOND_MIRROR_TABLE)")
		mirrorPace          = flag.Duration("mirror-pace", mirror.DefaultPace, "with --mirror: the least time between two transactions of one transcript (what is appended meanwhile goes in the next; 0: none)")
		machineID           = flag.String("machine-id", "", "the name this sessiond holds sessions' leases under in the --mirror database (one writer per session across machines; env SESSIOND_MACHINE_ID): every machine sharing the database needs its own. Default: the host name and a random suffix, made once and kept in <state-dir>/machine-id")
		leaseTTL            = flag.Duration("lease-ttl", mirror.DefaultLeaseTTL, "with --mirror: how long a session's lease lasts unless renewed (renewed every third of it while the session is appended to); after it another machine may take the session over")
		acceptJournalLoss   = flag.Bool("accept-journal-loss", false, "start even though the journal lost acknowledged entries to something other than a crash (a segment cut short, deleted or damaged by another program or the disk): those entries are then gone for good, and status and the log report them. Without it sessiond refuses to start over such a loss and changes nothing, so the segments can still be restored from a backup")
		logFormat           = flag.String("log-format", "auto", "auto (console on a terminal, else JSON), console or json")
		logLevel            = flag.String("log-level", "info", "debug, info, warn or error")
		showVersion         = flag.Bool("version", false, "print the version and exit")
		cpuProfile          = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for `go tool pprof`), finished when sessiond exits")
		memProfile          = flag.String("memprofile", "", "write a profile of the whole run's allocations to this file (for `go tool pprof`) when sessiond exits")
		traceFile           = flag.String("trace", "", "write an execution trace of the whole run to this file (for `go tool trace`: where each request waited), finished when sessiond exits")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (sessiond takes flags only; see -h)", flag.Args())
	}
	if *showVersion {
		fmt.Println("sessiond", version())
		return nil
	}
	// Zero or less would quietly mean the default further down: refuse
	// it here, where the user can be told which flag it was.
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"shutdown-timeout", *shutdownTimeout > 0}, {"max-entry-bytes", *maxEntry > 0},
		{"max-message-bytes", *maxMessage > 0}, {"idle-compact", *idleCompact > 0},
		{"idle-retire", *idleRetire > 0}, {"min-compact-bytes", *minCompact > 0},
		{"journal-segment-size", *journalSegment > 0}, {"journal-max-size", *journalMax > 0},
		{"journal-retention-size", *journalRetentionMax > 0},
		{"trash-retention", *trashRetention > 0},
		{"lease-ttl", *leaseTTL > 0},
	} {
		if !f.ok {
			return fmt.Errorf("--%s must be greater than zero (%s); leave it out for the default", f.name, flag.Lookup(f.name).Value)
		}
	}
	if *ballastSize < 0 {
		return fmt.Errorf("--ballast-size must be 0 (no reserve) or more, not %d", *ballastSize)
	}
	if *journalRetention < 0 {
		return fmt.Errorf("--journal-retention must not be negative (%s); 0 keeps nothing after compaction", *journalRetention)
	}
	mc, err := mirrorConfig(*mirrorDSN, *mirrorTable, *mirrorPace)
	if err != nil {
		return err
	}
	if *machineID == "" {
		*machineID = os.Getenv("SESSIOND_MACHINE_ID")
	}
	if *machineID != "" {
		if err := lease.CheckMachineID(*machineID); err != nil {
			return fmt.Errorf("--machine-id %q is refused: %w", *machineID, err)
		}
	}
	if mc != nil {
		mc.LeaseTTL = *leaseTTL
		mc.LeaseIdle = *idleRetire
		mc.MachineID = *machineID // empty: made once and kept in the state folder
	}
	retention := *journalRetention
	if retention == 0 {
		retention = -1 // writer.Config: negative keeps nothing, 0 is the default
	}
	if *rootDir == "" {
		return fmt.Errorf("no transcripts root: %v; pass --root", rootErr)
	}
	if *stateDir == "" {
		return fmt.Errorf("no state folder: %v; pass --state-dir", stateErr)
	}
	// Absolute paths: the socket is unlinked at exit and the folders are
	// compared with what journals record, whatever the working directory.
	for _, p := range []*string{socketPath, rootDir, stateDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("path %q: %w", *p, err)
		}
		*p = abs
	}
	// Sizes not given follow the disk: the fixed defaults would take all
	// of a small volume.
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if total, err := fsys.DiskSize(*stateDir); err == nil {
		sz := writer.SizesFor(total)
		for _, f := range []struct {
			name string
			v    *int64
			auto int64
		}{{"ballast-size", ballastSize, sz.Ballast}, {"journal-segment-size", journalSegment, sz.Segment},
			{"journal-max-size", journalMax, sz.JournalMax}, {"journal-retention-size", journalRetentionMax, sz.Retention}} {
			if !set[f.name] {
				*f.v = f.auto
			}
		}
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	// The runtime's default Ps, one per CPU. (Releases with a journal per
	// session ran with four times as many, because every writer blocked in
	// its own fdatasync held a P; with the shared log only one goroutine
	// syncs at a time, and the extra Ps cost a lone client 60 us per append
	// in idle spinning, see BENCHMARKS.md.)
	log.Debug("scheduler", zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)), zap.Int("cpus", runtime.NumCPU()))

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				log.Warn("--memprofile: cannot write the profile", zap.Error(err))
			}
			f.Close()
		}()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer func() {
			trace.Stop()
			f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return daemon.Run(ctx, daemon.Config{
		Socket: *socketPath, Root: *rootDir, StateDir: *stateDir,
		ShutdownTimeout: *shutdownTimeout, MaxMessageBytes: *maxMessage, Version: version(),
		Writer: writer.Config{MaxEntryBytes: *maxEntry, IdleCompact: *idleCompact, IdleRetire: *idleRetire,
			MinCompactBytes: *minCompact, JournalSegmentSize: *journalSegment, JournalMaxSize: *journalMax, BallastSize: *ballastSize,
			JournalRetention: retention, JournalRetentionSize: *journalRetentionMax, TrashRetention: *trashRetention,
			AcceptJournalLoss: *acceptJournalLoss},
		Logger: log, MetricsListen: *metricsListen, Mirror: mc,
	})
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
