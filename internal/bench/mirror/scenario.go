package mirror

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/pgtest"
)

// scenario is the mirror scenario's state from one step to the next.
type scenario struct {
	env     *harness.Env
	sc      *harness.Scenario
	clients int
	dur     time.Duration
	size    harness.Sizer
	rng     *rand.Rand
	dsn     string
	by      map[string]*harness.Result
	on      mirrorRun  // the mirror under the load
	pinned  *mirrorRun // the same with PostgreSQL on a CPU of its own
	catch   catchUp
}

// catchUp is the mirror's own pace copying every transcript at start,
// against plain INSERT loops of the same rows.
type catchUp struct {
	rows, rowsAtConnect uint64
	took, whole         time.Duration
	rate                float64
	fromStart           bool // rate counted from sessiond's start, see catchUp
	perTx               int
	ceiling, rowsOnly   float64
}

// Run measures the scenario on a durable PostgreSQL of its own.
func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	m := &scenario{env: env, clients: int(env.Scaled(mirrorClients, 2)), dur: env.Duration,
		rng: rand.New(rand.NewPCG(env.Seed, 16)), by: map[string]*harness.Result{}}
	if m.dur <= 0 {
		m.dur = 10 * time.Second
	}
	m.sc = &harness.Scenario{Name: Name,
		Title: fmt.Sprintf("mirror: %d clients, 1 KiB entries, durable, on a durable PostgreSQL: the mirror off and on; its catch-up vs a plain batched INSERT loop; the reference PostgreSQL store", m.clients)}
	var err error
	if m.size, err = harness.ParseSize("1KiB"); err != nil {
		return m.sc, err
	}
	pg, err := pgtest.New(pgtest.Options{Durable: true, Settings: map[string]string{"max_connections": "200"}})
	if err != nil {
		return m.sc, fmt.Errorf("PostgreSQL for the mirror scenario: %w (%s)", err, pgtest.InstallHint)
	}
	defer pg.Close()
	if err := pg.Start(ctx); err != nil {
		return m.sc, fmt.Errorf("start PostgreSQL: %w", err)
	}
	if m.dsn, err = pg.CreateDatabase(ctx, "bench"); err != nil {
		return m.sc, err
	}
	if err := harness.SameFS(env.Dir, pg.Dir()); err != nil {
		m.sc.Notes = append(m.sc.Notes, fmt.Sprintf("warning: %v: PostgreSQL and sessiond are not on the same disk", err))
	}
	for _, step := range []func(context.Context) error{m.peer, m.mirrorOff, m.mirrorOn, m.pinnedPair, m.catchUp} {
		if err := step(ctx); err != nil {
			return m.sc, err
		}
	}
	m.report()
	return m.sc, nil
}

// newLoad is a load of c clients over s new sessions.
func (m *scenario) newLoad(c, s int) *throughput.Workload {
	w := &throughput.Workload{Clients: c, Sessions: s, Size: m.size, Duration: m.dur, Seed: m.rng.Uint64(), Verify: m.env.Verify}
	w.ProjectKey = fmt.Sprintf("-sessiond-bench-%08x", m.rng.Uint32())
	for range s {
		w.SessionIDs = append(w.SessionIDs, harness.NewUUID(m.rng))
	}
	return w
}

// measure makes one throughput row of the scenario.
func (m *scenario) measure(ctx context.Context, id, label, target string, d throughput.Driver, w *throughput.Workload) (*harness.Result, error) {
	r := &harness.Result{ID: id, Label: label, Target: target}
	m.env.Logf("[%s] %s ...", Name, label)
	err := throughput.Measure(ctx, d, w, r)
	m.sc.Results = append(m.sc.Results, r)
	m.by[id] = r
	if err != nil {
		return r, fmt.Errorf("%s: %w", label, err)
	}
	m.env.Logf("[%s]   %.0f entries/s, p50 %.0f us", Name, r.EntriesPerSec, r.Latency.P50)
	return r, nil
}

// start starts a sessiond in a folder of its own, with args after the
// scenario's.
func (m *scenario) start(ctx context.Context, name string, args ...string) (*harness.Daemon, error) {
	dir := filepath.Join(m.env.Dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return harness.StartDaemon(ctx, m.env.Sessiond, dir, append(append([]string{}, m.env.SessiondArgs...), args...))
}

// peer measures the reference store, one agent, then many.
func (m *scenario) peer(ctx context.Context) error {
	if _, err := m.measure(ctx, "p1", "(p) reference PG store, 1 client", "refstore",
		&refStoreDriver{dsn: m.dsn, table: "ref_one"}, m.newLoad(1, 1)); err != nil {
		return err
	}
	_, err := m.measure(ctx, "p64", fmt.Sprintf("(p) reference PG store, %d -> %d sessions", m.clients, m.clients), "refstore",
		&refStoreDriver{dsn: m.dsn, table: "ref_many"}, m.newLoad(m.clients, m.clients))
	return err
}

// mirrorOff measures sessiond without the mirror.
func (m *scenario) mirrorOff(ctx context.Context) error {
	off, err := m.start(ctx, "off")
	if err != nil {
		return err
	}
	_, err1 := m.measure(ctx, "d1", "sessiond, 1 client (no mirror)", harness.TargetDaemon, &throughput.DaemonDriver{Socket: off.Socket, ResetHWM: true}, m.newLoad(1, 1))
	var err2 error
	if err1 == nil {
		_, err2 = m.measure(ctx, "d64", fmt.Sprintf("sessiond, %d -> %d sessions, no mirror", m.clients, m.clients), harness.TargetDaemon,
			&throughput.DaemonDriver{Socket: off.Socket, ResetHWM: true}, m.newLoad(m.clients, m.clients))
	}
	return errors.Join(err1, err2, off.Stop(60*time.Second))
}

// mirrorOn measures sessiond with the mirror, under the same load.
func (m *scenario) mirrorOn(ctx context.Context) error {
	var err error
	m.on, err = m.load(ctx, "on", "m64", fmt.Sprintf("sessiond, %d -> %d sessions, mirror on", m.clients, m.clients), m.dsn, m.newLoad(m.clients, m.clients))
	return err
}

// pinnedPair measures the same pair with PostgreSQL as on a server of its
// own: a second PostgreSQL on a CPU of its own (sessiond and the load on
// CPU 0, PostgreSQL on CPU 1) and on a disk of its own (memory: /dev/shm).
// Beside sessiond on this machine's two cores and one disk, a PostgreSQL
// takes the CPU the local load needs (the ceiling says how much of the
// machine its inserts take) and slows sessiond's own syncs with its
// writes, which a fleet's database elsewhere does not.
func (m *scenario) pinnedPair(ctx context.Context) error {
	if runtime.NumCPU() < 2 {
		return nil
	}
	far, farDSN, err := farPostgres(ctx)
	if err != nil {
		return err
	}
	defer far.Close()
	pr, err := pinnedPair(far, func() (mirrorRun, error) {
		poff, err := m.start(ctx, "pinned-off")
		if err != nil {
			return mirrorRun{}, err
		}
		_, err = m.measure(ctx, "d64p", fmt.Sprintf("sessiond on 1 CPU, %d -> %d, no mirror", m.clients, m.clients), harness.TargetDaemon,
			&throughput.DaemonDriver{Socket: poff.Socket, ResetHWM: true}, m.newLoad(m.clients, m.clients))
		if err := errors.Join(err, poff.Stop(60*time.Second)); err != nil {
			return mirrorRun{}, err
		}
		return m.load(ctx, "pinned-on", "m64p", fmt.Sprintf("sessiond on 1 CPU, %d -> %d, mirror on", m.clients, m.clients),
			farDSN, m.newLoad(m.clients, m.clients))
	})
	if err != nil {
		return err
	}
	m.pinned = &pr
	return nil
}

// load runs w on a sessiond mirroring into dsn and measures the mirror's
// lag over it and its drain after it.
func (m *scenario) load(ctx context.Context, name, id, label, dsn string, w *throughput.Workload) (out mirrorRun, err error) {
	on, err := m.start(ctx, name, "--mirror", dsn)
	if err != nil {
		return out, err
	}
	defer func() { err = errors.Join(err, on.Stop(60*time.Second)) }()
	ctl, err := client.Dial(on.Socket)
	if err != nil {
		return out, err
	}
	defer ctl.Close()
	m0, err := waitCaughtUp(ctx, ctl, 30*time.Second)
	if err != nil {
		return out, err
	}
	smp := sampleMirror(ctx, ctl, 100*time.Millisecond)
	t0 := time.Now()
	out.res, err = m.measure(ctx, id, label, harness.TargetDaemon, &throughput.DaemonDriver{Socket: on.Socket, ResetHWM: true}, w)
	loadEnd := time.Now()
	var drained *sessiondv1.MirrorStatus
	if err == nil {
		drained, err = waitCaughtUp(ctx, ctl, 10*time.Minute)
	}
	out.drain = time.Since(loadEnd)
	if err := errors.Join(err, smp.finish()); err != nil {
		return out, err
	}
	out.maxBehind, out.maxAge = smp.maxBehind, smp.maxAge
	out.rows, out.secs = drained.GetRowsWritten()-m0.GetRowsWritten(), loadEnd.Sub(t0).Seconds()
	// Every acknowledged entry is a row, once.
	n, err := countRows(ctx, dsn, mirror.DefaultTable, w.ProjectKey)
	if err == nil && n != out.res.TotalAcked {
		err = fmt.Errorf("the mirror left %d rows of the load's sessions in PostgreSQL, %d entries were acknowledged", n, out.res.TotalAcked)
	}
	return out, err
}

// catchUp measures the mirror's own pace: a sessiond on what the load
// left, mirroring into an empty table, copies every transcript at start.
// Its rate is counted from the moment its mirror is connected, as the
// INSERT loop's is from when its connections are open: what sessiond does
// before (start, recovery) is not the mirror's work. The time from
// sessiond's start is reported beside it.
func (m *scenario) catchUp(ctx context.Context) error {
	catchStart := time.Now()
	again, err := m.start(ctx, "on", "--mirror", m.dsn, "--mirror-table", "catchup_store")
	if err != nil {
		return err
	}
	var drained *sessiondv1.MirrorStatus
	var connectedAt time.Time
	ctl2, err := client.Dial(again.Socket)
	if err == nil {
		defer ctl2.Close()
		connectedAt, m.catch.rowsAtConnect, err = waitConnected(ctx, ctl2, time.Minute)
		if err == nil {
			drained, err = waitCaughtUp(ctx, ctl2, 10*time.Minute)
		}
	}
	caughtUp := time.Now()
	if err := errors.Join(err, again.Stop(60*time.Second)); err != nil {
		return err
	}
	c := &m.catch
	c.rows = drained.GetRowsWritten()
	if c.rows != m.on.res.TotalAcked {
		return fmt.Errorf("the catch-up wrote %d rows, the load acknowledged %d entries", c.rows, m.on.res.TotalAcked)
	}
	c.took, c.whole = caughtUp.Sub(connectedAt), caughtUp.Sub(catchStart)
	c.rate = float64(c.rows-c.rowsAtConnect) / c.took.Seconds()
	if c.rowsAtConnect >= c.rows {
		// The whole catch-up ended before a poll saw the mirror connected
		// (small runs): no row falls in the window from the connection, so
		// the rate is taken over the time from sessiond's start, which
		// understates it rather than reporting nothing.
		c.fromStart = true
		c.rate = float64(c.rows) / c.whole.Seconds()
	}
	c.perTx = min(mirror.DefaultBatchEntries, max(int(c.rows)/m.clients, 1))
	if c.ceiling, err = insertLoop(ctx, m.dsn, "ceiling_store", true, int(c.rows), m.clients, c.perTx, mirror.DefaultWorkers, m.size, m.env.Seed); err != nil {
		return fmt.Errorf("the plain INSERT loop: %w", err)
	}
	if c.rowsOnly, err = insertLoop(ctx, m.dsn, "ceiling_rows", false, int(c.rows), m.clients, c.perTx, mirror.DefaultWorkers, m.size, m.env.Seed+1); err != nil {
		return fmt.Errorf("the plain INSERT loop (rows alone): %w", err)
	}
	return nil
}

// report adds the notes and the targets.
func (m *scenario) report() {
	c, sc, by := m.catch, m.sc, m.by
	sc.Notes = append(sc.Notes,
		"mirror under the load: "+m.on.String(),
		fmt.Sprintf("mirror catch-up: %d rows (every transcript on disk) into an empty table, %d of them in the %.2f s from its connection to the last row: %s rows/s (%.2f s from sessiond's start: %s rows/s)",
			c.rows, c.rows-c.rowsAtConnect, c.took.Seconds(), harness.FmtNum(c.rate), c.whole.Seconds(), harness.FmtNum(float64(c.rows)/c.whole.Seconds())),
		fmt.Sprintf("ceiling: a plain INSERT loop of as many entries, %d connections as the mirror's %d workers, %d entries per committed transaction, "+
			"each transaction the reference adapter's INSERT of the jsonb rows and an INSERT of the same lines into a table laid out as sessiond_lines (the data the mirror writes): %s rows/s",
			mirror.DefaultWorkers, mirror.DefaultWorkers, c.perTx, harness.FmtNum(c.ceiling)),
		fmt.Sprintf("the same loop writing the jsonb rows alone (the reference adapter's data, without sessiond's exact lines): %s rows/s; the mirror reaches %.0f %% of it",
			harness.FmtNum(c.rowsOnly), c.rate/c.rowsOnly*100))
	if m.pinned != nil {
		sc.Notes = append(sc.Notes, "mirror under the load, PostgreSQL on a CPU and a (memory) disk of its own: "+m.pinned.String())
		if off, on := by["d64p"], by["m64p"]; harness.Measured(off, on) {
			ch := harness.NewCheck("local throughput, mirror on >= 90% of off, PostgreSQL on a CPU and disk of its own", on.EntriesPerSec/off.EntriesPerSec*100, mirrorLocalShare, "%", true)
			ch.Note = fmt.Sprintf("%s vs %s entries/s", harness.FmtNum(on.EntriesPerSec), harness.FmtNum(off.EntriesPerSec))
			sc.Checks = append(sc.Checks, ch)
		}
	}
	on := m.on.res
	if d64 := by["d64"]; harness.Measured(d64, on) {
		ch := harness.NewCheck("local throughput, mirror on >= 90% of off, PostgreSQL sharing the CPUs (info)", on.EntriesPerSec/d64.EntriesPerSec*100, mirrorLocalShare, "%", true)
		ch.Note = fmt.Sprintf("%s vs %s entries/s; PostgreSQL's inserts take the CPU the load needs: its ceiling below is what the whole machine gives them", harness.FmtNum(on.EntriesPerSec), harness.FmtNum(d64.EntriesPerSec))
		sc.Checks = append(sc.Checks, ch)
	}
	ch := harness.NewCheck("mirror rows/s >= 80% of a plain batched INSERT loop of the same data", c.rate/c.ceiling*100, mirrorCeilingShare, "%", true)
	ch.Note = fmt.Sprintf("%s vs %s rows/s", harness.FmtNum(c.rate), harness.FmtNum(c.ceiling))
	if c.fromStart {
		ch.Note += "; every row was written before the mirror was seen connected, so the mirror's rate is counted from sessiond's start"
	}
	sc.Checks = append(sc.Checks, ch)
	if d1, p1 := by["d1"], by["p1"]; harness.Measured(d1, p1) {
		ch := harness.NewCheck("one agent's p50: sessiond <= the reference PostgreSQL store", d1.Latency.P50, p1.Latency.P50, "us", false)
		ch.Note = "peer (info): sessiond durable on this disk vs one durable INSERT per append"
		sc.Checks = append(sc.Checks, ch)
	}
	if d64, p64 := by["d64"], by["p64"]; harness.Measured(d64, p64) {
		ch := harness.NewCheck("64 agents: sessiond >= the reference PostgreSQL store", d64.EntriesPerSec/p64.EntriesPerSec, 1, "x", true)
		ch.Note = fmt.Sprintf("%s vs %s entries/s", harness.FmtNum(d64.EntriesPerSec), harness.FmtNum(p64.EntriesPerSec))
		sc.Checks = append(sc.Checks, ch)
	}
}
