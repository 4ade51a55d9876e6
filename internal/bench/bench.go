// Package bench is the suite of sessiond-bench: it picks the scenarios a
// command line asks for, gives each a sessiond (a running one, or one it
// starts on a temp folder) and a work folder on the same filesystem, and
// gathers their tables and targets into one report. The scenarios live in
// the packages beside it, over the shared harness; the throughput rows are
// measured by package throughput, the rows built from sessiond's own
// packages by package inprocess. These are measurements; nothing here
// asserts them.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/inprocess"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// Config is one invocation of the tool.
type Config struct {
	// Socket of a running sessiond (default: client.DefaultSocket()).
	// Ignored when Sessiond is set.
	Socket string
	// Sessiond, when set, is the sessiond binary to start on a temp folder
	// (socket, root and state inside it) for the duration of the run.
	Sessiond string
	// SessiondArgs are extra flags for the started sessiond.
	SessiondArgs []string
	// Dir is the work folder for a started sessiond and the baselines'
	// files. Empty: a temp folder (removed unless Keep). With a running
	// sessiond the default is a temp folder next to its state folder, so
	// the baselines write to the same filesystem.
	Dir string
	// Keep keeps the work folder and, on a running sessiond, the
	// sessions the run wrote (otherwise deleted with purge).
	Keep bool

	// Single-scenario mode (Suite false).
	Target    string // TargetDaemon (default) or TargetInProc
	Clients   int    // default 64
	Sessions  int    // default 1
	Size      string // default "1KiB"
	Baselines bool   // also measure (a), (b), (c)

	// Suite runs every scenario of the suite (Scenarios selects some).
	Suite     bool
	Scenarios []string
	// InProc adds, in the suite, a run of internal/writer in-process next
	// to each sessiond run (sessiond minus gRPC and the socket).
	InProc bool

	Duration time.Duration // per run; default 10s
	Entries  int64         // > 0: measured entries per run instead of Duration
	Seed     uint64        // 0: time-based
	Verify   bool          // after each run, compare the files with what was acknowledged
	// MaxConns caps the gRPC connections to sessiond (clients share them
	// round robin); 0: one per client, as separate agents have.
	MaxConns int
	// Batch > 1 (single runs of the daemon targets, without baselines):
	// each Append carries this many entries, as an agent sending a turn
	// at a time does. Latency is then per call.
	Batch int
	// UnaryAppend makes the Go client send each Append as a unary call
	// (client.WithUnaryAppend) instead of on its AppendStream streams.
	UnaryAppend bool
	// CPUProfile writes a CPU profile of the bench process over the
	// measurement of each in-process run (TargetInProc,
	// TargetInProcDaemon); with
	// several such runs the run's id is added to the name.
	CPUProfile string

	// Scale shrinks the suite's sizes (1, the default: the full
	// sizes): the client counts of the throughput scenarios (at least 2 or
	// 4 clients) and the other scenarios' data (see Env.Scale).
	Scale float64
	// SDKDir holds node_modules with the official TypeScript SDK, for the
	// listing scenario (default: e2e/sdk under the current folder).
	SDKDir string

	Log io.Writer // progress (default os.Stderr)
}

// Run runs what cfg asks for and returns the report; out gets the
// human-readable tables as each scenario ends (nil: nothing).
func Run(ctx context.Context, cfg Config, out io.Writer) (*harness.Report, error) {
	cfg = cfg.withDefaults()
	if out == nil {
		out = io.Discard
	}
	p, err := plan(cfg)
	if err != nil {
		return nil, err
	}
	rep := &harness.Report{Date: time.Now().Format(time.RFC3339), Duration: cfg.Duration.String(), Machine: machine()}
	if cfg.Entries > 0 {
		rep.Duration = fmt.Sprintf("%d entries", cfg.Entries)
	}
	ws, err := prepare(ctx, cfg, p, rep)
	if ws != nil {
		defer ws.close(cfg)
	}
	if err != nil {
		return nil, err
	}
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0))
	opts := throughputOptions(cfg, p, ws)
	for i, def := range p.throughput {
		sc, err := opts.Run(ctx, def, i, seeds)
		rep.Scenarios = append(rep.Scenarios, sc)
		harness.WriteScenario(out, sc)
		if err != nil {
			return rep, err
		}
	}
	for _, x := range p.others {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		sc, err := runOther(ctx, cfg, ws.dir, x, seeds.Uint64())
		if err != nil {
			fmt.Fprintf(cfg.Log, "[%s] FAILED: %v\n", x.name, err)
		}
		rep.Scenarios = append(rep.Scenarios, sc)
		harness.WriteScenario(out, sc)
	}
	return rep, nil
}

// withDefaults fills what cfg leaves unset.
func (cfg Config) withDefaults() Config {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Target == "" {
		cfg.Target = harness.TargetDaemon
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 64
	}
	if cfg.Sessions <= 0 {
		cfg.Sessions = 1
	}
	if cfg.Size == "" {
		cfg.Size = "1KiB"
	}
	if cfg.Scale <= 0 {
		cfg.Scale = 1
	}
	return cfg
}

// runPlan is what a command line asks for: throughput scenarios, then the
// scenarios that start a sessiond of their own.
type runPlan struct {
	throughput []throughput.Def
	others     []scenario
	size       harness.Sizer
	needDaemon bool
	profiles   int
}

// plan turns cfg into the scenarios to run.
func plan(cfg Config) (runPlan, error) {
	var p runPlan
	var err error
	if cfg.Suite {
		err = p.suite(cfg)
	} else {
		err = p.single(cfg)
	}
	if err != nil {
		return p, err
	}
	size := cfg.Size
	if cfg.Suite {
		size = "1KiB" // the suite's targets are stated for 1 KiB entries
	}
	if p.size, err = harness.ParseSize(size); err != nil {
		return p, err
	}
	for _, d := range p.throughput {
		p.needDaemon = p.needDaemon || d.HasTarget(harness.TargetDaemon)
		p.profiles += d.Profiled()
	}
	return p, nil
}

// suite picks the suite's scenarios that cfg.Scenarios names (all when it
// names none).
func (p *runPlan) suite(cfg Config) error {
	if cfg.Batch > 1 {
		return fmt.Errorf("--batch is for single runs, not --suite")
	}
	want := map[string]bool{}
	for _, s := range cfg.Scenarios {
		want[s] = true
	}
	all := len(want) == 0
	for _, d := range throughput.Suite(cfg.InProc, cfg.Scale) {
		if all || want[d.Name] {
			p.throughput = append(p.throughput, d)
			delete(want, d.Name)
		}
	}
	var names []string
	for _, x := range others {
		if all || want[x.name] {
			p.others = append(p.others, x)
			names = append(names, x.name)
			delete(want, x.name)
		}
	}
	for s := range want {
		return fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(AllScenarios(), ", "))
	}
	if len(p.others) > 0 && cfg.Sessiond == "" {
		return fmt.Errorf("scenarios %s start their own sessiond: pass --sessiond PATH (or --scenarios %s,%s,%s)",
			strings.Join(names, ", "), throughput.ScenarioParallel, throughput.ScenarioSequential, throughput.ScenarioSessions)
	}
	return nil
}

// single is the one throughput scenario of a command line without --suite.
func (p *runPlan) single(cfg Config) error {
	def, err := throughput.Single{Target: cfg.Target, Clients: cfg.Clients, Sessions: cfg.Sessions, Size: cfg.Size,
		Baselines: cfg.Baselines, Unary: cfg.UnaryAppend, Batch: cfg.Batch}.Def()
	if err != nil {
		return err
	}
	p.throughput = []throughput.Def{def}
	return nil
}

// workspace is the run's work folder and the sessiond the throughput
// scenarios append to.
type workspace struct {
	dir     string
	socket  string
	started *harness.Daemon
}

// prepare makes the work folder and finds or starts the sessiond, and
// describes both in rep.
func prepare(ctx context.Context, cfg Config, p runPlan, rep *harness.Report) (*workspace, error) {
	ws := &workspace{dir: cfg.Dir}
	if p.needDaemon && cfg.Sessiond == "" {
		if err := ws.useRunning(ctx, cfg, rep); err != nil {
			return nil, err
		}
	}
	if err := ws.makeDir(); err != nil {
		return nil, err
	}
	rep.Dir = ws.dir
	if p.needDaemon && cfg.Sessiond != "" {
		if err := ws.start(ctx, cfg, rep); err != nil {
			return ws, err
		}
	}
	if p.needDaemon {
		if err := harness.SameFS(ws.dir, rep.Daemon.StateDir); err != nil {
			fmt.Fprintf(cfg.Log, "warning: %v: baselines and sessiond are not on the same disk\n", err)
		}
	}
	rep.Machine.FS = fsType(ws.dir)
	return ws, nil
}

// useRunning points ws at the sessiond already serving cfg.Socket, and
// puts the work folder next to its state folder, so that the baselines
// write to the same filesystem.
func (ws *workspace) useRunning(ctx context.Context, cfg Config, rep *harness.Report) error {
	ws.socket = cfg.Socket
	if ws.socket == "" {
		ws.socket = client.DefaultSocket()
	}
	st, err := harness.StatusOf(ctx, ws.socket)
	if err != nil {
		return fmt.Errorf("no sessiond answering at %s (start one, or pass --sessiond PATH to let the tool start one): %w", ws.socket, err)
	}
	rep.Daemon = harness.DaemonInfo{Socket: ws.socket, Pid: int(st.GetPid()), Version: st.GetVersion(), StateDir: st.GetStateDir(), Root: st.GetRoot()}
	if ws.dir == "" {
		if ws.dir, err = os.MkdirTemp(filepath.Dir(st.GetStateDir()), "sessiond-bench-"); err != nil {
			return fmt.Errorf("work folder next to sessiond's state folder: %w (use --dir)", err)
		}
	}
	return nil
}

func (ws *workspace) makeDir() error {
	if ws.dir == "" {
		var err error
		ws.dir, err = os.MkdirTemp("", "sessiond-bench-")
		return err
	}
	return os.MkdirAll(ws.dir, 0o700)
}

// start runs cfg.Sessiond on a folder of the work folder.
func (ws *workspace) start(ctx context.Context, cfg Config, rep *harness.Report) error {
	ddir := filepath.Join(ws.dir, "sessiond")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Log, "starting %s on %s\n", cfg.Sessiond, ddir)
	d, err := harness.StartDaemon(ctx, cfg.Sessiond, ddir, cfg.SessiondArgs)
	if err != nil {
		return err
	}
	ws.started, ws.socket = d, d.Socket
	st, err := harness.StatusOf(ctx, ws.socket)
	if err != nil {
		return err
	}
	rep.Daemon = harness.DaemonInfo{Started: true, Socket: ws.socket, Pid: int(st.GetPid()), Version: st.GetVersion(), StateDir: st.GetStateDir(), Root: st.GetRoot()}
	return nil
}

// close stops the sessiond ws started and removes the work folder unless
// cfg keeps it.
func (ws *workspace) close(cfg Config) {
	if ws.started != nil {
		if err := ws.started.Stop(60 * time.Second); err != nil {
			fmt.Fprintf(cfg.Log, "stopping sessiond: %v\n", err)
		}
	}
	if !cfg.Keep && ws.dir != "" {
		os.RemoveAll(ws.dir)
	}
}

// throughputOptions is how the throughput scenarios make their runs.
func throughputOptions(cfg Config, p runPlan, ws *workspace) *throughput.Options {
	return &throughput.Options{Socket: ws.socket, Started: ws.started != nil, Dir: ws.dir, Keep: cfg.Keep,
		Size: p.size, Duration: cfg.Duration, Entries: cfg.Entries, Verify: cfg.Verify, Batch: cfg.Batch,
		MaxConns: cfg.MaxConns, Unary: cfg.UnaryAppend, CPUProfile: cfg.CPUProfile, Profiles: p.profiles,
		Others: inprocess.NewDriver, Log: cfg.Log}
}

func machine() harness.Machine {
	m := harness.Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// fsType names the filesystem dir is on, from /proc/self/mounts (longest
// mount point that is a prefix of dir).
func fsType(dir string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	abs, _ := filepath.Abs(dir)
	best, kind := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, kind = mp, f[0]+" ("+f[2]+")"
		}
	}
	return kind
}

// GitCommit returns `git rev-parse --short HEAD` in dir, or "".
func GitCommit(dir string) string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(b))
	// Go files changed but not committed make the figures those of
	// another program than the commit's: say so. (BENCHMARKS.md itself
	// is rewritten by the run, so it does not count.)
	st := exec.Command("git", "status", "--porcelain", "--", "*.go", "go.mod", "go.sum")
	st.Dir = dir
	if out, err := st.Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		commit += "+uncommitted changes"
	}
	return commit
}
