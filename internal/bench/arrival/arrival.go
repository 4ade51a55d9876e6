// Package arrival is the fleet with random arrival: many sessions, each
// appending a batch after a think time drawn from an exponential
// distribution, so that sessions go idle (and sessiond compacts them into
// their transcripts) the way agents waiting on a model do. The fixed-period
// fleet (package fleet) sends every batch exactly once a second
// period, so its sessions never go idle; this one measures what idleness
// costs: the daemon's CPU and descriptors (how many of them deleted files
// it still holds), compactions per second, the bytes it writes over the
// bytes appended, append latency, and how stale the transcripts on disk
// are. A last run keeps 10,000 sessions live and reports the daemon's
// memory per live session.
package arrival

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/inprocess"
	"github.com/sessiond/sessiond/internal/journal"
)

// Name is the scenario's name in the suite (--scenarios).
const Name = "arrival"

// Title describes the scenario in the report.
const Title = "agent fleet with random arrival: 1,000 sessions, exponential think time (mean 1 s and 5 s), 60 s; 10,000 live sessions"

// The load.
const (
	sessions     = 1000
	window       = 60 * time.Second
	batchEntries = 3
	entrySize    = 1024
	// conns: as in the fixed-period fleet, the sessions share a few
	// connections, so the descriptors counted are the daemon's own.
	conns = 8
	// manySessions and manyWindow: the live-session run (10,000 sessions
	// at a mean think time of 1 s offer about 10,000 appends/s).
	manySessions = 10000
	manyWindow   = 30 * time.Second
	// warmConc is how many sessions are created at once before a window.
	warmConc = 32
	// fdEvery is how often the daemon's descriptors are counted.
	fdEvery = 100 * time.Millisecond
)

// The targets (measurements, judged in the report; nothing asserts them).
const (
	cpuPct   = 15.0 // daemon CPU at a mean think time of 1 s, % of one core
	fdLimit  = 100  // descriptors of the daemon, gRPC's sockets included
	p99MS    = 10.0 // p99 latency of an append call
	writeAmp = 3.0  // bytes written by the daemon over bytes appended
	// staleLimitSecs: the age of an acknowledged entry not yet in its
	// transcript. sessiond bounds when its compaction starts by
	// --compact-within (30 s); the compaction itself (a slot, the copy,
	// three syncs) and the watcher's reads every 100 ms come on top.
	staleLimitSecs = 35.0
)

// variant is one run of the scenario on a sessiond of its own.
type variant struct {
	id       string
	label    string
	sessions int
	window   time.Duration
	think    time.Duration // mean think time
	size     harness.Sizer
	judged   bool // its figures are judged against the targets
	cpu      bool // and so is its CPU (stated at a mean of 1 s)
	memory   bool // report memory per live session
	// floor runs the load against the echo server (inprocess.GroupEcho)
	// instead of sessiond: the transport's cost on this machine, and with
	// durable a group-committed log's, measured beside sessiond.
	floor, durable bool
	delay          time.Duration // the durable floor's commit delay
}

// variants are the runs at env's scale.
func variants(env *harness.Env) ([]variant, error) {
	agent, err := harness.ParseSize("dist:agent")
	if err != nil {
		return nil, err
	}
	fixed, err := harness.ParseSize(fmt.Sprint(entrySize))
	if err != nil {
		return nil, err
	}
	n := int(env.Scaled(sessions, 4))
	w := time.Duration(env.Scaled(int64(window), int64(3*time.Second)))
	many := int(env.Scaled(manySessions, 8))
	mw := time.Duration(env.Scaled(int64(manyWindow), int64(3*time.Second)))
	return []variant{
		{id: "m1", label: "mean 1 s, 1 KiB", sessions: n, window: w, think: time.Second, size: fixed, judged: true, cpu: true},
		{id: "m1a", label: "mean 1 s, dist:agent (info)", sessions: n, window: w, think: time.Second, size: agent},
		{id: "m5", label: "mean 5 s, 1 KiB", sessions: n, window: w, think: 5 * time.Second, size: fixed, judged: true},
		{id: "live", label: fmt.Sprintf("%d live sessions, mean 1 s, 1 KiB", many), sessions: many, window: mw, think: time.Second, size: fixed, memory: true},
		{id: "floor", label: "floor: mean 1 s, 1 KiB, gRPC + group commit, no wait (baseline)", sessions: n, window: w, think: time.Second, size: fixed, floor: true, durable: true},
		{id: "floor4", label: fmt.Sprintf("floor: mean 1 s, 1 KiB, gRPC + group commit, %v wait (baseline)", journal.DefaultCommitDelay), sessions: n, window: w, think: time.Second, size: fixed, floor: true, durable: true, delay: journal.DefaultCommitDelay},
		{id: "floor5", label: fmt.Sprintf("floor: mean 5 s, 1 KiB, gRPC + group commit, %v wait (baseline)", journal.DefaultCommitDelay), sessions: n, window: w, think: 5 * time.Second, size: fixed, floor: true, durable: true, delay: journal.DefaultCommitDelay},
		{id: "echo", label: "floor: mean 1 s, 1 KiB, gRPC alone, no disk (baseline)", sessions: n, window: w, think: time.Second, size: fixed, floor: true},
	}, nil
}

// Run measures every variant, each on a sessiond of its own started with
// its default flags.
func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sc := &harness.Scenario{Name: Name, Title: Title}
	vs, err := variants(env)
	if err != nil {
		return sc, err
	}
	sc.Title = fmt.Sprintf("agent fleet with random arrival: %d sessions, a batch of %d entries after an exponential think time (mean 1 s and 5 s), %.0f s; %d live sessions for %.0f s",
		vs[0].sessions, batchEntries, vs[0].window.Seconds(), vs[3].sessions, vs[3].window.Seconds())
	sc.Table = &harness.Table{Columns: []string{"run", "measurement", "value", "detail"}}
	by := map[string]*measured{}
	for i, v := range vs {
		seed := env.Seed + uint64(i)*0x9e3779b9
		m, err := measureVariant(ctx, env, v, seed)
		if err != nil {
			return sc, fmt.Errorf("%s: %w", v.label, err)
		}
		by[v.id] = m
		addRows(sc, v, m)
		sc.Checks = append(sc.Checks, checks(v, m)...)
	}
	sc.Notes = notes(vs, env.Verify)
	if own := aboveFloor(by["m1"], by["floor4"]); own != "" {
		sc.Notes = append(sc.Notes, own)
	}
	return sc, nil
}

// measureVariant runs v on a fresh sessiond in its own folder.
func measureVariant(ctx context.Context, env *harness.Env, v variant, seed uint64) (*measured, error) {
	dir := filepath.Join(env.Dir, v.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, v.window+10*time.Minute)
	defer cancel()
	var socket, floorFile string
	if v.floor {
		g, err := inprocess.StartGroupEcho(ctx, dir, v.durable, v.delay)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := g.Stop(); err != nil {
				env.Logf("[%s] stopping the echo server: %v", Name, err)
			}
		}()
		socket, floorFile = g.Socket, g.File
	} else {
		p, err := harness.StartDaemon(ctx, env.Sessiond, dir, env.SessiondArgs)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := p.Stop(60 * time.Second); err != nil {
				env.Logf("[%s] stopping sessiond: %v", Name, err)
			}
		}()
		socket = p.Socket
	}
	env.Logf("[%s] %s: %d sessions, %v", Name, v.label, v.sessions, v.window)
	r, err := newRun(ctx, socket, v, seed)
	if err != nil {
		return nil, err
	}
	r.floorFile = floorFile
	defer r.close()
	return r.measure(ctx, env)
}
