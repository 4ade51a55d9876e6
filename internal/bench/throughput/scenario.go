// Package throughput measures rows of C clients appending as fast as they
// are acknowledged (the parallel64, sequential and sessions1000 scenarios,
// and the tool's single runs): sessiond over its socket, and in the same
// run, on the same filesystem, the baselines it is judged against, each
// behind a Driver. The rows built from sessiond's own packages come from
// package inprocess through Options.Others.
package throughput

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// Suite scenario names.
const (
	ScenarioParallel   = "parallel64"
	ScenarioSequential = "sequential"
	ScenarioSessions   = "sessions1000"
)

// runSpec is one row of a scenario: a target under a number of clients
// and sessions.
type runSpec struct {
	id, label, target string
	clients, sessions int
}

// Def is a throughput scenario: runs compared with each other, and the
// targets that read them.
type Def struct {
	Name, Title string
	runs        []runSpec
	checks      func(by map[string]*harness.Result) []harness.Check
	// awake names the runs measured with Workload.Awake.
	awake map[string]bool
}

// HasTarget reports whether one of d's runs measures target.
func (d Def) HasTarget(target string) bool {
	for _, r := range d.runs {
		if r.target == target {
			return true
		}
	}
	return false
}

// Profiled counts d's runs on the in-process targets, the ones a CPU
// profile of the bench process covers.
func (d Def) Profiled() int {
	n := 0
	for _, r := range d.runs {
		if r.target == TargetInProc || r.target == TargetInProcDaemon {
			n++
		}
	}
	return n
}

// Single is the Def of one run of target (with the baselines (a), (b) and
// (c) before it when baselines is set), as the tool's single-run mode
// asks for it.
type Single struct {
	Target            string
	Clients, Sessions int
	Size              string
	Baselines, Unary  bool
	Batch             int
}

// labels name each target in a single run's row.
var labels = map[string]string{harness.TargetDaemon: "sessiond", TargetInProc: "writer in-process (no gRPC)", TargetInProcDaemon: "daemon.Run in-process (gRPC)",
	TargetCeiling: "(c) the shared log alone", TargetNaive: "(a) O_APPEND+fsync", TargetNoSync: "(b) O_APPEND, no fsync", TargetEcho: "(e) gRPC echo, no disk", TargetEchoSync: "(f) gRPC echo + fdatasync",
	TargetRawSync: "(g) plain socket + fdatasync"}

// Def checks s and returns its scenario.
func (s Single) Def() (Def, error) {
	label, known := labels[s.Target]
	if !known {
		return Def{}, fmt.Errorf("unknown target %q", s.Target)
	}
	if s.Sessions > s.Clients {
		return Def{}, fmt.Errorf("--sessions (%d) above --clients (%d): each session needs a client", s.Sessions, s.Clients)
	}
	if s.Batch > 1 && (s.Baselines || (s.Target != harness.TargetDaemon && s.Target != TargetInProcDaemon)) {
		return Def{}, fmt.Errorf("--batch needs --target %s or %s and --baselines=false (the other targets store one entry per call)", harness.TargetDaemon, TargetInProcDaemon)
	}
	var runs []runSpec
	if s.Baselines {
		runs = append(runs,
			runSpec{"a", "(a) O_APPEND+fsync per entry", TargetNaive, s.Clients, s.Clients},
			runSpec{"b", "(b) O_APPEND, no fsync", TargetNoSync, s.Clients, s.Clients},
			runSpec{"c", "(c) the shared log alone, 1 session", TargetCeiling, s.Clients, 1})
		if s.Sessions > 1 {
			runs = append(runs, runSpec{"cJ", fmt.Sprintf("(c) the shared log alone, %d sessions", s.Sessions), TargetCeiling, s.Clients, s.Sessions})
		}
	}
	if s.Unary && (s.Target == harness.TargetDaemon || s.Target == TargetInProcDaemon) {
		label += " (unary Append)"
	}
	if s.Batch > 1 {
		label += fmt.Sprintf(", %d entries per Append", s.Batch)
	}
	runs = append(runs, runSpec{"t", fmt.Sprintf("%s, %d clients -> %d sessions", label, s.Clients, s.Sessions), s.Target, s.Clients, s.Sessions})
	return Def{Name: "custom", Title: fmt.Sprintf("%d clients, %d sessions, %s", s.Clients, s.Sessions, s.Size), runs: runs}, nil
}

// Options is how the runs of a scenario are made.
type Options struct {
	// Socket is the sessiond the daemon rows append to; Started: the
	// tool started it (its peak RSS is reset before each run).
	Socket  string
	Started bool
	// Dir holds one folder per run, removed afterwards unless Keep (the
	// daemon rows' sessions are purged from a running sessiond unless
	// Keep).
	Dir  string
	Keep bool

	Size     harness.Sizer
	Duration time.Duration
	Entries  int64
	Verify   bool
	Batch    int
	MaxConns int
	Unary    bool
	// CPUProfile names the CPU profile of each in-process run; with
	// several such runs (Profiles > 1) the run's id is added to the name.
	CPUProfile string
	Profiles   int
	// Others makes the drivers of the targets this package does not
	// build itself (the in-process ones).
	Others func(target, dir string, opts DaemonDriver) (Driver, bool)
	Log    io.Writer
}

// Run measures every run of def in order (index numbers its folders) and
// judges its targets. A run that fails carries its error in its Result.
func (o *Options) Run(ctx context.Context, def Def, index int, seeds *rand.Rand) (*harness.Scenario, error) {
	sc := &harness.Scenario{Name: def.Name, Title: def.Title}
	by := map[string]*harness.Result{}
	for ri, rs := range def.runs {
		if ctx.Err() != nil {
			return sc, ctx.Err()
		}
		w := o.workload(def, rs, seeds)
		runDir := filepath.Join(o.Dir, fmt.Sprintf("%d-%s-%d-%s", index, def.Name, ri, rs.id))
		d, err := o.driver(rs.target, runDir)
		if err != nil {
			return sc, err
		}
		if rs.target == TargetInProc || rs.target == TargetInProcDaemon {
			w.CPUProfile = o.profileName(def, rs)
		}
		r := &harness.Result{ID: rs.id, Label: rs.label, Target: rs.target}
		fmt.Fprintf(o.Log, "[%s] %s ... ", def.Name, rs.label)
		err = Measure(ctx, d, w, r)
		if !o.Keep && rs.target != harness.TargetDaemon {
			os.RemoveAll(runDir)
		}
		if err != nil {
			fmt.Fprintf(o.Log, "FAILED: %v\n", err)
		} else {
			fmt.Fprintf(o.Log, "%.0f entries/s, p50 %.0f us\n", r.EntriesPerSec, r.Latency.P50)
		}
		sc.Results = append(sc.Results, r)
		by[rs.id] = r
	}
	setRatios(sc.Results, by)
	if def.checks != nil {
		sc.Checks = def.checks(by)
	}
	return sc, nil
}

// workload is the load of one run, its sessions drawn from seeds.
func (o *Options) workload(def Def, rs runSpec, seeds *rand.Rand) *Workload {
	w := &Workload{Clients: rs.clients, Sessions: rs.sessions, Size: o.Size, Duration: o.Duration,
		Entries: o.Entries, Seed: seeds.Uint64(), Verify: o.Verify, Awake: def.awake[rs.id], Batch: o.Batch}
	w.ProjectKey = fmt.Sprintf("-sessiond-bench-%08x", seeds.Uint32())
	for range w.Sessions {
		w.SessionIDs = append(w.SessionIDs, harness.NewUUID(seeds))
	}
	return w
}

// driver makes the driver of target, writing under dir.
func (o *Options) driver(target, dir string) (Driver, error) {
	switch target {
	case TargetNaive:
		return &fileDriver{dir: dir, sync: true}, nil
	case TargetNoSync:
		return &fileDriver{dir: dir}, nil
	case TargetRawSync:
		return &rawDriver{dir: dir}, nil
	case harness.TargetDaemon:
		return &DaemonDriver{Socket: o.Socket, ResetHWM: o.Started, MaxConns: o.MaxConns, Unary: o.Unary, Purge: !o.Started && !o.Keep}, nil
	}
	if o.Others != nil {
		if d, ok := o.Others(target, dir, DaemonDriver{MaxConns: o.MaxConns, Unary: o.Unary}); ok {
			return d, nil
		}
	}
	return nil, fmt.Errorf("no driver for target %q", target)
}

// profileName is where the CPU profile of an in-process run goes ("": none).
func (o *Options) profileName(def Def, rs runSpec) string {
	if o.CPUProfile == "" || o.Profiles <= 1 {
		return o.CPUProfile
	}
	ext := filepath.Ext(o.CPUProfile)
	return fmt.Sprintf("%s-%s-%s%s", strings.TrimSuffix(o.CPUProfile, ext), def.Name, rs.id, ext)
}

// setRatios gives each run its rate over those of the baselines (a), (b)
// and (c) of the same scenario.
func setRatios(results []*harness.Result, by map[string]*harness.Result) {
	a, b, c := by["a"], by["b"], by["c"]
	for _, r := range results {
		if !harness.Measured(r) {
			continue
		}
		if harness.Measured(a) {
			r.RatioToNaive = r.EntriesPerSec / a.EntriesPerSec
		}
		if harness.Measured(b) {
			r.RatioToNoSync = r.EntriesPerSec / b.EntriesPerSec
		}
		if harness.Measured(c) {
			r.RatioToCeiling = r.EntriesPerSec / c.EntriesPerSec
		}
	}
}
