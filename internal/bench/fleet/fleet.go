// Package fleet is the agent fleet at a fixed period: many sessions, each
// appending a batch once a second at its own phase, on a sessiond of its
// own.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// The fleet scenario: what sessiond costs a machine running many agents at
// once, which the throughput scenarios (clients appending as fast as they
// are acknowledged) do not say. 1,000 sessions each append a batch of 3
// entries once a second, each at its own phase, for 60 s: ten times busier
// than a typical agent, and an open-loop load, so a daemon that falls
// behind shows as a backlog rather than as a lower rate. Measured on a
// sessiond the scenario starts itself (so its file descriptors and CPU are
// this load's alone): offered against achieved rate, the latency of each
// append call, appends per journal fsync from the Status counters, the
// daemon's CPU from /proc/<pid>/stat and its open descriptors counted in
// /proc/<pid>/fd every 100 ms.

// Name is the fleet scenario's name.
const Name = "fleet"

// Title describes the scenario in the report.
const Title = "agent fleet: 1,000 sessions, a batch of 3 entries each once a second, 60 s"

const (
	fleetSessions = 1000
	fleetRounds   = 60 // batches per session: the window is fleetRounds periods
	fleetPeriod   = time.Second
	fleetBatch    = 3
	// fleetEntry: 1 KiB, as in the throughput scenarios. dist:agent would
	// put an entry of 256 KiB-1 MiB in about 1% of the batches, right at
	// the p99 the target judges, which would then measure moving that
	// entry rather than sessiond.
	fleetEntry = 1024
	// fleetConns: the sessions share a few connections, as agents run by
	// a few harness processes would. Each connection is a descriptor in
	// the daemon; one per session would put 1,000 descriptors in the
	// count by themselves, and the target would measure the clients.
	fleetConns = 8
	// fleetSample is how often the daemon's descriptors are counted.
	fleetSample = 100 * time.Millisecond
	// fleetWarmConc is how many sessions are created at once before the
	// window.
	fleetWarmConc = 32
)

// The fleet's targets.
const (
	fleetKeepUpPct    = 99.0 // achieved >= this % of offered
	fleetP99MS        = 10.0 // p99 latency of an append call
	fleetPerSync      = 4.0  // appends per journal fsync, on average
	fleetCPUPct       = 15.0 // daemon CPU, % of one core
	fleetFDs          = 100  // open descriptors, gRPC's included
	fleetBacklogLimit = 0    // batches still unacknowledged one period after the window
)

// fleetPlan is when every batch is due: session s sends batch k at
// phases[s] + k*period after the window opens.
type fleetPlan struct {
	sessions, rounds, batch int
	period                  time.Duration
	phases                  []time.Duration
}

func newFleetPlan(sessions, rounds, batch int, period time.Duration, rng *rand.Rand) fleetPlan {
	p := fleetPlan{sessions: sessions, rounds: rounds, batch: batch, period: period, phases: make([]time.Duration, sessions)}
	for s := range p.phases {
		p.phases[s] = time.Duration(rng.Int64N(int64(period)))
	}
	return p
}

func (p fleetPlan) due(s, k int) time.Duration { return p.phases[s] + time.Duration(k)*p.period }
func (p fleetPlan) window() time.Duration      { return time.Duration(p.rounds) * p.period }

// fleetCall is one batch's times, from the window's opening.
type fleetCall struct {
	due, sent, acked time.Duration
	done             bool // acknowledged
}

// fleetTally is what the calls of one run add up to.
type fleetTally struct {
	// offered: the entries due in the window over its length. achieved:
	// the entries acknowledged over the time from the window's opening to
	// the later of its end and the last acknowledgement, so a daemon that
	// keeps up reaches the offered rate whatever the size of the run (an
	// acknowledgement a few ms past the end does not count as a loss), and
	// one that ends X s late reaches offered x window / (window + X).
	offered, achieved float64
	batches           int             // scheduled
	acked             int             // batches acknowledged
	backlog           int             // batches unacknowledged one period after the window closed
	drain             time.Duration   // last acknowledgement after the window closed (0: before)
	latency           harness.Latency // per append call: sent -> acknowledged
	late              harness.Latency // sent - due: how far behind the senders were
}

// tallyFleet adds up calls (per session, per batch) against the plan.
func tallyFleet(p fleetPlan, calls [][]fleetCall) fleetTally {
	w := p.window()
	var t fleetTally
	var lat, late []int64
	var last time.Duration
	for _, cs := range calls {
		for _, c := range cs {
			t.batches++
			if !c.done || c.acked > w+p.period {
				t.backlog++
			}
			if !c.done {
				continue
			}
			t.acked++
			last = max(last, c.acked)
			lat = append(lat, int64(c.acked-c.sent))
			late = append(late, int64(max(c.sent-c.due, 0)))
		}
	}
	t.offered = float64(t.batches*p.batch) / w.Seconds()
	t.achieved = float64(t.acked*p.batch) / max(w, last).Seconds()
	t.drain = max(last-w, 0)
	t.latency, t.late = harness.LatencyOf(lat), harness.LatencyOf(late)
	return t
}

// fleetSnap is the daemon's state at one instant.
type fleetSnap struct {
	at                             time.Time
	appends, entries, syncs, comps uint64
	cpu                            time.Duration
	fds                            int
}

func takeFleetSnap(ctx context.Context, c *client.Client, pid int) (fleetSnap, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return fleetSnap{}, err
	}
	s := fleetSnap{at: time.Now(), appends: st.GetAppends(), entries: st.GetEntriesStored(),
		syncs: st.GetJournalSyncs(), comps: st.GetCompactions()}
	if s.cpu, err = harness.ProcCPU(pid); err != nil {
		return s, err
	}
	if s.fds, err = harness.CountFDs(pid); err != nil {
		return s, err
	}
	return s, nil
}

// fleetSession is one agent: its session and the entries it was
// acknowledged.
type fleetSession struct {
	sess    client.Session
	rng     *rand.Rand
	seq     uint64
	acked   harness.Acc
	entries [][]byte // reused
}

func (f *fleetSession) batch(n int) [][]byte {
	f.entries = f.entries[:0]
	for range n {
		f.entries = append(f.entries, harness.AppendEntry(nil, fleetEntry, f.sess.ID, harness.NewUUID(f.rng), f.seq))
		f.seq++
	}
	return f.entries
}

// send appends one batch and checks every entry was stored.
func (f *fleetSession) send(ctx context.Context, c *client.Client, n int) error {
	lines := f.batch(n)
	resp, err := c.Append(ctx, f.sess, lines...)
	if err != nil {
		return fmt.Errorf("append to %s: %w", f.sess.ID, err)
	}
	if len(resp.GetResults()) != len(lines) {
		return fmt.Errorf("append to %s: %d results for %d entries", f.sess.ID, len(resp.GetResults()), len(lines))
	}
	for _, r := range resp.GetResults() {
		if r.GetOutcome() != sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED {
			return fmt.Errorf("append to %s: entry %s %v", f.sess.ID, r.GetUuid(), r.GetOutcome())
		}
	}
	for _, l := range lines {
		f.acked.Entries++
		f.acked.Bytes += uint64(len(l)) + 1
	}
	return nil
}

// driveFleet runs the plan from t0: each session sends its batches on its
// own goroutine, each when due or, if the previous one is still in
// flight, as soon as it is acknowledged (an agent waits for its append).
func driveFleet(ctx context.Context, p fleetPlan, sessions []*fleetSession, conns []*client.Client, t0 time.Time) ([][]fleetCall, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := make([][]fleetCall, len(sessions))
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for s, fs := range sessions {
		calls[s] = make([]fleetCall, p.rounds)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conns[s%len(conns)]
			for k := range p.rounds {
				cl := &calls[s][k]
				cl.due = p.due(s, k)
				if d := time.Until(t0.Add(cl.due)); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				cl.sent = time.Since(t0)
				if err := fs.send(ctx, c, p.batch); err != nil {
					errs[s] = err
					cancel()
					return
				}
				cl.acked, cl.done = time.Since(t0), true
			}
		}()
	}
	wg.Wait()
	return calls, errors.Join(errs...)
}

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sc := &harness.Scenario{Name: Name}
	rng := rand.New(rand.NewPCG(env.Seed, 0x666c656574))
	plan := newFleetPlan(int(env.Scaled(fleetSessions, 4)), int(env.Scaled(fleetRounds, 3)), fleetBatch, fleetPeriod, rng)
	f := &fleetRun{env: env, plan: plan, nConns: min(fleetConns, plan.sessions)}
	sc.Title = fmt.Sprintf("agent fleet: %d sessions, each a batch of %d x 1 KiB entries once a second at its own phase, for %.0f s, over %d connections",
		plan.sessions, plan.batch, plan.window().Seconds(), f.nConns)
	ctx, cancel := context.WithTimeout(ctx, plan.window()+5*time.Minute)
	defer cancel()

	ddir := filepath.Join(env.Dir, "daemon")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		return sc, err
	}
	// The daemon's defaults: what a user runs.
	p, err := harness.StartDaemon(ctx, env.Sessiond, ddir, env.SessiondArgs)
	if err != nil {
		return sc, err
	}
	defer func() {
		if err := p.Stop(30 * time.Second); err != nil {
			env.Logf("[fleet] stopping sessiond: %v", err)
		}
	}()
	defer f.close()
	if err := f.dial(ctx, p); err != nil {
		return sc, err
	}
	f.newSessions(rng)
	if err := f.warmUp(ctx); err != nil {
		return sc, fmt.Errorf("warm-up: %w", err)
	}
	res, err := f.window(ctx)
	if err != nil {
		return sc, err
	}
	// Every acknowledged entry is in its session's transcript, once.
	verified := "not asked (--verify)"
	if env.Verify {
		if err := fleetVerify(ctx, f.conns, f.root, f.sessions); err != nil {
			return sc, fmt.Errorf("verify: %w", err)
		}
		verified = fmt.Sprintf("yes: %d sessions, each transcript holds exactly the %d entries acknowledged to it (warm-up included), whole lines",
			plan.sessions, (plan.rounds+1)*plan.batch)
	}
	f.report(sc, res, verified)
	return sc, nil
}

// fleetRun is the fleet on its sessiond: the connections, the sessions and
// the daemon's process.
type fleetRun struct {
	env      *harness.Env
	plan     fleetPlan
	nConns   int
	conns    []*client.Client
	pid      int
	root     string
	idleFDs  int // before any session existed
	sessions []*fleetSession
}

func (f *fleetRun) dial(ctx context.Context, p *harness.Daemon) error {
	for range f.nConns {
		c, err := client.Dial(p.Socket, client.WithRetry(1, 0))
		if err != nil {
			return err
		}
		f.conns = append(f.conns, c)
	}
	st, err := f.conns[0].Status(ctx)
	if err != nil {
		return err
	}
	f.pid, f.root = int(st.GetPid()), st.GetRoot()
	f.idleFDs, err = harness.CountFDs(f.pid)
	return err
}

func (f *fleetRun) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *fleetRun) newSessions(rng *rand.Rand) {
	projectKey := fmt.Sprintf("-sessiond-bench-fleet-%08x", uint32(f.env.Seed))
	f.sessions = make([]*fleetSession, f.plan.sessions)
	for s := range f.sessions {
		f.sessions[s] = &fleetSession{sess: client.Session{ProjectKey: projectKey, ID: harness.NewUUID(rng)},
			rng: rand.New(rand.NewPCG(f.env.Seed, uint64(s)+1))}
	}
}

// warmUp, untimed: every session is created with one batch and flushed,
// so the window sees running agents, not 1,000 new sessions (and no idle
// compaction of the warm-up's entries).
func (f *fleetRun) warmUp(ctx context.Context) error {
	f.env.Logf("[fleet] creating %d sessions", f.plan.sessions)
	return harness.ForEach(ctx, f.plan.sessions, fleetWarmConc, func(s int) error {
		c := f.conns[s%f.nConns]
		if err := f.sessions[s].send(ctx, c, f.plan.batch); err != nil {
			return err
		}
		_, err := c.Flush(ctx, f.sessions[s].sess)
		return err
	})
}

// fleetResult is what the window measured.
type fleetResult struct {
	t                          fleetTally
	before, after              fleetSnap
	maxFDs, samples            int
	rss, hwm                   int64
	memOK                      bool
	dAppends, dEntries, dSyncs uint64
}

func (r *fleetResult) wall() time.Duration { return r.after.at.Sub(r.before.at) }
func (r *fleetResult) cpu() time.Duration  { return r.after.cpu - r.before.cpu }
func (r *fleetResult) cpuPct() float64     { return r.cpu().Seconds() / r.wall().Seconds() * 100 }
func (r *fleetResult) perSync() float64    { return float64(r.dAppends) / float64(r.dSyncs) }

// window runs the plan with the daemon's counters read around it, and
// checks they count what the sessions were acknowledged.
func (f *fleetRun) window(ctx context.Context) (*fleetResult, error) {
	plan := f.plan
	var r fleetResult
	var err error
	if r.before, err = takeFleetSnap(ctx, f.conns[0], f.pid); err != nil {
		return nil, err
	}
	f.env.Logf("[fleet] %d sessions x %d batches of %d entries, one per %v each, over %d connections",
		plan.sessions, plan.rounds, plan.batch, plan.period, f.nConns)
	sampler := harness.SampleFDs(f.pid, fleetSample)
	t0 := time.Now().Add(20 * time.Millisecond)
	calls, derr := driveFleet(ctx, plan, f.sessions, f.conns, t0)
	maxFDs, samples, serr := sampler.Finish()
	if derr != nil {
		return nil, derr
	}
	if serr != nil {
		return nil, serr
	}
	if r.after, err = takeFleetSnap(ctx, f.conns[0], f.pid); err != nil {
		return nil, err
	}
	r.maxFDs, r.samples = max(maxFDs, r.after.fds), samples
	rss, hwm, memErr := harness.ProcMem(f.pid)
	r.rss, r.hwm, r.memOK = rss, hwm, memErr == nil

	r.t = tallyFleet(plan, calls)
	r.dAppends, r.dEntries, r.dSyncs = r.after.appends-r.before.appends, r.after.entries-r.before.entries, r.after.syncs-r.before.syncs
	// The counters must tell this load's story, or the ratios drawn from
	// them mean nothing.
	if want := uint64(r.t.batches); r.dAppends != want || r.dEntries != want*uint64(plan.batch) {
		return nil, fmt.Errorf("Status counted %d appends storing %d entries over the window; %d batches of %d were acknowledged",
			r.dAppends, r.dEntries, r.t.batches, plan.batch)
	}
	if r.dSyncs == 0 {
		return nil, fmt.Errorf("Status counted no journal sync for %d appends", r.dAppends)
	}
	return &r, nil
}

// fleetVerify flushes every session and checks its canonical file holds
// exactly what was acknowledged to it.
func fleetVerify(ctx context.Context, conns []*client.Client, root string, sessions []*fleetSession) error {
	if err := harness.ForEach(ctx, len(sessions), fleetWarmConc, func(s int) error {
		_, err := conns[s%len(conns)].Flush(ctx, sessions[s].sess)
		return err
	}); err != nil {
		return err
	}
	for _, fs := range sessions {
		path := harness.TranscriptPath(root, fs.sess)
		n, err := harness.CountLines(path)
		if err != nil {
			return err
		}
		if n != fs.acked {
			return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) acknowledged", path, n.Entries, n.Bytes, fs.acked.Entries, fs.acked.Bytes)
		}
	}
	return nil
}
