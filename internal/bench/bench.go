// Package bench is the logic of sessiond-bench: a load tool that drives a
// running sessiond over its real socket (or one it starts on a temp
// folder) with C concurrent clients over S sessions, and measures in the
// same run, on the same filesystem, the baselines sessiond is judged
// against:
//
//	(a) naive safe writer: O_APPEND write + fsync per entry, a file per client;
//	(b) what agents do today: O_APPEND write, no fsync;
//	(c) the ceiling: the journal (internal/journal) alone,
//	    in-process, its one committer fed by the C clients, no gRPC.
//
// It prints throughput, per-append latency percentiles, the daemon's
// journal syncs and mean group-commit batch (from its Status counters), its
// CPU time and peak RSS (from /proc), and for the suite the targets
// with PASS/FAIL. These are measurements; nothing here asserts them.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
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

	// Suite runs every scenario of the issue (Scenarios selects some).
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

	// Scale shrinks the suite's sizes (1, the default: the issue's
	// sizes): the client counts of the throughput scenarios (at least 2 or
	// 4 clients) and the other scenarios' data (see Env.Scale).
	Scale float64
	// SDKDir holds node_modules with the official TypeScript SDK, for the
	// listing scenario (default: e2e/sdk under the current folder).
	SDKDir string

	Log io.Writer // progress (default os.Stderr)
}

// Report is everything a run measured.
type Report struct {
	Date      string      `json:"date"`
	Commit    string      `json:"commit,omitempty"`
	Machine   Machine     `json:"machine"`
	Daemon    DaemonInfo  `json:"sessiond"`
	Dir       string      `json:"dir"`
	Duration  string      `json:"duration_per_run"`
	Scenarios []*Scenario `json:"scenarios"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go"`
	Kernel    string `json:"kernel,omitempty"`
	FS        string `json:"filesystem,omitempty"`
}

// DaemonInfo describes the sessiond measured.
type DaemonInfo struct {
	Started  bool   `json:"started_by_bench"`
	Socket   string `json:"socket,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	Version  string `json:"version,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
	Root     string `json:"root,omitempty"`
}

// Scenario is a set of runs compared with each other.
type Scenario struct {
	Name    string    `json:"name"`
	Title   string    `json:"title"`
	Results []*Result `json:"results,omitempty"`
	// Table holds the measurements of the scenarios that are not
	// throughput runs (see extra.go).
	Table  *Table   `json:"table,omitempty"`
	Checks []Check  `json:"targets,omitempty"`
	Notes  []string `json:"notes,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// Check is one target of the issue, measured.
type Check struct {
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	// AtLeast: the target is a lower bound (value >= limit), else an
	// upper bound.
	AtLeast bool   `json:"at_least"`
	Note    string `json:"note,omitempty"`
}

// Suite scenario names.
const (
	ScenarioParallel   = "parallel64"
	ScenarioSequential = "sequential"
	ScenarioSessions   = "sessions1000"
)

// AllScenarios lists the suite's scenarios in the order they run.
var AllScenarios = []string{ScenarioParallel, ScenarioSequential, ScenarioSessions, ScenarioFleet,
	ScenarioCompaction, ScenarioRecovery, ScenarioMemory, ScenarioCheckAll, ScenarioListing, ScenarioMirror}

type runSpec struct {
	id, label, target string
	clients, sessions int
}

type scenarioDef struct {
	name, title string
	runs        []runSpec
	checks      func(by map[string]*Result) []Check
	// awake names the runs measured with workload.awake.
	awake map[string]bool
}

func ok(rs ...*Result) bool {
	for _, r := range rs {
		if r == nil || r.Error != "" || r.Entries == 0 {
			return false
		}
	}
	return true
}

func check(target string, v, limit float64, unit string, atLeast bool) Check {
	pass := v >= limit
	if !atLeast {
		pass = v <= limit
	}
	return Check{Target: target, Value: v, Limit: limit, Unit: unit, Pass: pass, AtLeast: atLeast}
}

// Run runs what cfg asks for and returns the report; out gets the
// human-readable tables as each scenario ends (nil: nothing).
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if out == nil {
		out = io.Discard
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Target == "" {
		cfg.Target = TargetDaemon
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
	var defs []scenarioDef
	var extras []extraDef
	if cfg.Suite {
		if cfg.Batch > 1 {
			return nil, fmt.Errorf("--batch is for single runs, not --suite")
		}
		want := map[string]bool{}
		for _, s := range cfg.Scenarios {
			want[s] = true
		}
		all := len(want) == 0
		for _, d := range suiteDefs(cfg.InProc, cfg.Scale) {
			if all || want[d.name] {
				defs = append(defs, d)
				delete(want, d.name)
			}
		}
		for _, n := range extraNames() {
			if all || want[n] {
				d, _ := lookupExtra(n)
				extras = append(extras, d)
				delete(want, n)
			}
		}
		for s := range want {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(AllScenarios, ", "))
		}
		if len(extras) > 0 && cfg.Sessiond == "" {
			return nil, fmt.Errorf("scenarios %s start their own sessiond: pass --sessiond PATH (or --scenarios %s,%s,%s)",
				extraList(extras), ScenarioParallel, ScenarioSequential, ScenarioSessions)
		}
	} else {
		if cfg.Target != TargetDaemon && cfg.Target != TargetInProc && cfg.Target != TargetInProcDaemon && cfg.Target != TargetCeiling &&
			cfg.Target != TargetNaive && cfg.Target != TargetNoSync && cfg.Target != TargetEcho && cfg.Target != TargetEchoSync && cfg.Target != TargetRawSync {
			return nil, fmt.Errorf("unknown target %q", cfg.Target)
		}
		if cfg.Sessions > cfg.Clients {
			return nil, fmt.Errorf("--sessions (%d) above --clients (%d): each session needs a client", cfg.Sessions, cfg.Clients)
		}
		if cfg.Batch > 1 && (cfg.Baselines || (cfg.Target != TargetDaemon && cfg.Target != TargetInProcDaemon)) {
			return nil, fmt.Errorf("--batch needs --target %s or %s and --baselines=false (the other targets store one entry per call)", TargetDaemon, TargetInProcDaemon)
		}
		var runs []runSpec
		if cfg.Baselines {
			runs = append(runs,
				runSpec{"a", "(a) O_APPEND+fsync per entry", TargetNaive, cfg.Clients, cfg.Clients},
				runSpec{"b", "(b) O_APPEND, no fsync", TargetNoSync, cfg.Clients, cfg.Clients},
				runSpec{"c", "(c) the shared log alone, 1 session", TargetCeiling, cfg.Clients, 1})
			if cfg.Sessions > 1 {
				runs = append(runs, runSpec{"cJ", fmt.Sprintf("(c) the shared log alone, %d sessions", cfg.Sessions), TargetCeiling, cfg.Clients, cfg.Sessions})
			}
		}
		label := map[string]string{TargetDaemon: "sessiond", TargetInProc: "writer in-process (no gRPC)", TargetInProcDaemon: "daemon.Run in-process (gRPC)",
			TargetCeiling: "(c) the shared log alone", TargetNaive: "(a) O_APPEND+fsync", TargetNoSync: "(b) O_APPEND, no fsync", TargetEcho: "(e) gRPC echo, no disk", TargetEchoSync: "(f) gRPC echo + fdatasync",
			TargetRawSync: "(g) plain socket + fdatasync"}[cfg.Target]
		if cfg.UnaryAppend && (cfg.Target == TargetDaemon || cfg.Target == TargetInProcDaemon) {
			label += " (unary Append)"
		}
		if cfg.Batch > 1 {
			label += fmt.Sprintf(", %d entries per Append", cfg.Batch)
		}
		runs = append(runs, runSpec{"t", fmt.Sprintf("%s, %d clients -> %d sessions", label, cfg.Clients, cfg.Sessions), cfg.Target, cfg.Clients, cfg.Sessions})
		defs = []scenarioDef{{name: "custom", title: fmt.Sprintf("%d clients, %d sessions, %s", cfg.Clients, cfg.Sessions, cfg.Size), runs: runs}}
	}
	size := cfg.Size
	if cfg.Suite {
		size = "1KiB" // the targets are stated for 1 KiB entries
	}
	sizer, err := ParseSize(size)
	if err != nil {
		return nil, err
	}

	needDaemon := false
	for _, d := range defs {
		for _, r := range d.runs {
			needDaemon = needDaemon || r.target == TargetDaemon
		}
	}

	rep := &Report{Date: time.Now().Format(time.RFC3339), Duration: cfg.Duration.String(), Machine: machine()}
	if cfg.Entries > 0 {
		rep.Duration = fmt.Sprintf("%d entries", cfg.Entries)
	}
	// The work folder.
	dir := cfg.Dir
	var socket string
	var proc *daemonProc
	if needDaemon && cfg.Sessiond == "" {
		socket = cfg.Socket
		if socket == "" {
			socket = client.DefaultSocket()
		}
		st, err := statusOf(ctx, socket)
		if err != nil {
			return nil, fmt.Errorf("no sessiond answering at %s (start one, or pass --sessiond PATH to let the tool start one): %w", socket, err)
		}
		rep.Daemon = DaemonInfo{Socket: socket, Pid: int(st.GetPid()), Version: st.GetVersion(), StateDir: st.GetStateDir(), Root: st.GetRoot()}
		if dir == "" {
			// Next to the state folder: same filesystem for the baselines.
			dir, err = os.MkdirTemp(filepath.Dir(st.GetStateDir()), "sessiond-bench-")
			if err != nil {
				return nil, fmt.Errorf("work folder next to sessiond's state folder: %w (use --dir)", err)
			}
		}
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sessiond-bench-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	rep.Dir = dir
	if !cfg.Keep {
		defer os.RemoveAll(dir)
	}
	if needDaemon && cfg.Sessiond != "" {
		ddir := filepath.Join(dir, "sessiond")
		if err := os.MkdirAll(ddir, 0o700); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Log, "starting %s on %s\n", cfg.Sessiond, ddir)
		proc, err = startDaemon(ctx, cfg.Sessiond, ddir, cfg.SessiondArgs)
		if err != nil {
			return nil, err
		}
		socket = proc.socket
		defer func() {
			if err := proc.stop(60 * time.Second); err != nil {
				fmt.Fprintf(cfg.Log, "stopping sessiond: %v\n", err)
			}
		}()
		st, err := statusOf(ctx, socket)
		if err != nil {
			return nil, err
		}
		rep.Daemon = DaemonInfo{Started: true, Socket: socket, Pid: int(st.GetPid()), Version: st.GetVersion(), StateDir: st.GetStateDir(), Root: st.GetRoot()}
	}
	if needDaemon {
		if err := sameFS(dir, rep.Daemon.StateDir); err != nil {
			fmt.Fprintf(cfg.Log, "warning: %v: baselines and sessiond are not on the same disk\n", err)
		}
	}
	rep.Machine.FS = fsType(dir)

	profiles := 0
	for _, d := range defs {
		for _, r := range d.runs {
			if r.target == TargetInProc || r.target == TargetInProcDaemon {
				profiles++
			}
		}
	}

	seedRng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for si, def := range defs {
		sc := &Scenario{Name: def.name, Title: def.title}
		by := map[string]*Result{}
		for ri, rs := range def.runs {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			w := &workload{clients: rs.clients, sessions: rs.sessions, size: sizer, duration: cfg.Duration,
				entries: cfg.Entries, seed: seedRng.Uint64(), verify: cfg.Verify, awake: def.awake[rs.id], batch: cfg.Batch}
			w.projectKey = fmt.Sprintf("-sessiond-bench-%08x", seedRng.Uint32())
			for range w.sessions {
				w.sessionIDs = append(w.sessionIDs, newUUID(seedRng))
			}
			runDir := filepath.Join(dir, fmt.Sprintf("%d-%s-%d-%s", si, def.name, ri, rs.id))
			var d driver
			switch rs.target {
			case TargetNaive:
				d = &fileDriver{dir: runDir, sync: true}
			case TargetNoSync:
				d = &fileDriver{dir: runDir}
			case TargetCeiling:
				d = &ceilingDriver{dir: runDir}
			case TargetInProc, TargetInProcDaemon:
				if rs.target == TargetInProc {
					d = &inprocDriver{dir: runDir}
				} else {
					d = &inprocDaemonDriver{dir: runDir, daemonDriver: daemonDriver{maxConns: cfg.MaxConns, unary: cfg.UnaryAppend}}
				}
				if cfg.CPUProfile != "" {
					w.cpuProfile = cfg.CPUProfile
					if profiles > 1 {
						ext := filepath.Ext(cfg.CPUProfile)
						w.cpuProfile = fmt.Sprintf("%s-%s-%s%s", strings.TrimSuffix(cfg.CPUProfile, ext), def.name, rs.id, ext)
					}
				}
			case TargetEcho, TargetEchoSync:
				d = &echoDriver{dir: runDir, sync: rs.target == TargetEchoSync}
			case TargetRawSync:
				d = &rawDriver{dir: runDir}
			case TargetDaemon:
				d = &daemonDriver{socket: socket, resetHWM: proc != nil, maxConns: cfg.MaxConns, unary: cfg.UnaryAppend, purge: proc == nil && !cfg.Keep}
			}
			r := &Result{ID: rs.id, Label: rs.label, Target: rs.target}
			fmt.Fprintf(cfg.Log, "[%s] %s ... ", def.name, rs.label)
			err := run(ctx, d, w, r)
			if !cfg.Keep && rs.target != TargetDaemon {
				os.RemoveAll(runDir)
			}
			if err != nil {
				fmt.Fprintf(cfg.Log, "FAILED: %v\n", err)
			} else {
				fmt.Fprintf(cfg.Log, "%.0f entries/s, p50 %.0f us\n", r.EntriesPerSec, r.Latency.P50)
			}
			sc.Results = append(sc.Results, r)
			by[rs.id] = r
		}
		a, b, c := by["a"], by["b"], by["c"]
		for _, r := range sc.Results {
			if ok(r) {
				if ok(a) {
					r.RatioToNaive = r.EntriesPerSec / a.EntriesPerSec
				}
				if ok(b) {
					r.RatioToNoSync = r.EntriesPerSec / b.EntriesPerSec
				}
				if ok(c) {
					r.RatioToCeiling = r.EntriesPerSec / c.EntriesPerSec
				}
			}
		}
		if def.checks != nil {
			sc.Checks = def.checks(by)
		}
		rep.Scenarios = append(rep.Scenarios, sc)
		WriteScenario(out, sc)
	}
	for _, x := range extras {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		sc, err := runExtra(ctx, cfg, dir, x, seedRng.Uint64())
		if err != nil {
			fmt.Fprintf(cfg.Log, "[%s] FAILED: %v\n", x.name, err)
		}
		rep.Scenarios = append(rep.Scenarios, sc)
		WriteScenario(out, sc)
	}
	return rep, nil
}

func extraList(xs []extraDef) string {
	var names []string
	for _, x := range xs {
		names = append(names, x.name)
	}
	return strings.Join(names, ", ")
}

// runExtra runs one extra scenario in its own folder under dir.
func runExtra(ctx context.Context, cfg Config, dir string, x extraDef, seed uint64) (*Scenario, error) {
	sdir := filepath.Join(dir, "extra-"+x.name)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return &Scenario{Name: x.name, Title: x.title, Error: err.Error()}, err
	}
	if !cfg.Keep {
		defer os.RemoveAll(sdir)
	}
	sdk := cfg.SDKDir
	if sdk == "" {
		sdk = "e2e/sdk"
	}
	if abs, err := filepath.Abs(sdk); err == nil {
		sdk = abs
	}
	scale := cfg.Scale
	if scale <= 0 {
		scale = 1
	}
	env := &Env{Sessiond: cfg.Sessiond, SessiondArgs: cfg.SessiondArgs, Dir: sdir, Log: cfg.Log, Seed: seed,
		Verify: cfg.Verify, Scale: scale, SDKDir: sdk, Duration: cfg.Duration}
	fmt.Fprintf(cfg.Log, "[%s] %s\n", x.name, x.title)
	sc, err := x.run(ctx, env)
	if sc == nil {
		sc = &Scenario{Name: x.name, Title: x.title}
	}
	if sc.Name == "" {
		sc.Name = x.name
	}
	if sc.Title == "" {
		sc.Title = x.title
	}
	if err != nil {
		sc.Error = err.Error()
	}
	return sc, err
}

// Failed reports whether any run failed or did not verify.
func (r *Report) Failed() error {
	var errs []error
	for _, s := range r.Scenarios {
		if s.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", s.Name, s.Error))
		}
		for _, x := range s.Results {
			if x.Error != "" {
				errs = append(errs, fmt.Errorf("%s / %s: %s", s.Name, x.Label, x.Error))
			}
			if x.Verified != nil && !*x.Verified {
				errs = append(errs, fmt.Errorf("%s / %s: verify: %s", s.Name, x.Label, x.VerifyError))
			}
		}
	}
	return errors.Join(errs...)
}

// statusOf asks the sessiond at socket for its Status.
func statusOf(ctx context.Context, socket string) (*sessiondv1.StatusResponse, error) {
	c, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.Status(cctx)
	if err != nil {
		return nil, fmt.Errorf("status of sessiond at %s: %w", socket, err)
	}
	return st, nil
}

func sameFS(a, b string) error {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return err
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return err
	}
	if sa.Dev != sb.Dev {
		return fmt.Errorf("%s and %s are on different devices", a, b)
	}
	return nil
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
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

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHeader prints where and when the run happened.
func WriteHeader(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "sessiond-bench  %s  commit %s  %d CPUs  %s  kernel %s  fs %s\n", rep.Date, orDash(rep.Commit),
		rep.Machine.CPUs, rep.Machine.GoVersion, orDash(rep.Machine.Kernel), orDash(rep.Machine.FS))
	if rep.Daemon.Pid != 0 {
		how := "running"
		if rep.Daemon.Started {
			how = "started by bench"
		}
		fmt.Fprintf(w, "sessiond %s pid %d (%s), state %s\n", orDash(rep.Daemon.Version), rep.Daemon.Pid, how, rep.Daemon.StateDir)
	}
	fmt.Fprintf(w, "work folder %s, %s per run\n", rep.Dir, rep.Duration)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteScenario prints one scenario as a table.
func WriteScenario(w io.Writer, sc *Scenario) {
	fmt.Fprintf(w, "\n== %s: %s ==\n", sc.Name, strings.TrimPrefix(sc.Title, sc.Name+": "))
	if sc.Results == nil {
		if sc.Table != nil {
			writeTable(w, sc.Table)
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		writeChecks(w, sc.Checks)
		if sc.Error != "" {
			fmt.Fprintf(w, "ERROR %s\n", sc.Error)
		}
		return
	}
	fmt.Fprintf(w, "%-46s %10s %7s %8s %8s %8s %8s %8s %6s %7s %7s %7s %7s %7s\n",
		"run", "entries/s", "MB/s", "p50 us", "p90 us", "p99 us", "max us", "syncs", "batch", "cpu s", "rss MB", "/(a)", "/(c)", "/(b)")
	for _, r := range sc.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%-46s ERROR %s\n", r.Label, r.Error)
			continue
		}
		syncs, batch, cpu, rss := "-", "-", "-", "-"
		if r.Syncs > 0 {
			syncs, batch = fmt.Sprint(r.Syncs), fmt.Sprintf("%.1f", r.EntriesPerSync)
		}
		if strings.HasPrefix(r.CPUOf, "sessiond") || strings.HasPrefix(r.CPUOf, "echo") {
			cpu = fmt.Sprintf("%.1f", r.CPUSeconds)
		} else if r.CPUOf != "" {
			cpu = fmt.Sprintf("%.1f*", r.CPUSeconds)
		}
		if r.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.PeakRSSBytes)/(1<<20))
		}
		fmt.Fprintf(w, "%-46s %10.0f %7.1f %8.0f %8.0f %8.0f %8.0f %8s %6s %7s %7s %7s %7s %7s\n",
			r.Label, r.EntriesPerSec, r.MBPerSec, r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max,
			syncs, batch, cpu, rss, ratio(r.RatioToNaive), ratio(r.RatioToCeiling), ratio(r.RatioToNoSync))
		if r.Verified != nil {
			if *r.Verified {
				fmt.Fprintf(w, "%-46s verified: %d acknowledged entries on disk\n", "", r.TotalAcked)
			} else {
				fmt.Fprintf(w, "%-46s VERIFY FAILED: %s\n", "", r.VerifyError)
			}
		}
	}
	for _, n := range sc.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	writeChecks(w, sc.Checks)
	fmt.Fprintf(w, "(cpu s: the server's (sessiond's, or the echo server's) user+sys during the run; * = the bench process itself, load generator included)\n")
}

func writeChecks(w io.Writer, checks []Check) {
	for _, c := range checks {
		verdict := "FAIL"
		if c.Pass {
			verdict = "PASS"
		}
		note := ""
		if c.Note != "" {
			note = " (" + c.Note + ")"
		}
		fmt.Fprintf(w, "target %-40s %s: %.1f %s vs %.1f%s\n", c.Target, verdict, c.Value, c.Unit, c.Limit, note)
	}
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	if x >= 10 {
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}
