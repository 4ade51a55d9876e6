// Package mirror measures sessiond's PostgreSQL mirror: the local
// throughput with it on and off, its catch-up against a plain INSERT loop,
// and the SDK's reference PostgreSQL store as the peer.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/pgtest"
)

// The mirror scenario (issue 16) measures sessiond's PostgreSQL mirror on
// a real, durable PostgreSQL (Debian's server, started in a temp folder
// on the disk the run measures, fsync and synchronous_commit on):
//
//   - the parallel64 load with the mirror off and on: the local
//     throughput must not drop by more than 10 %, and the mirror's lag
//     under that load (entries and age, sampled) and its drain after it
//     are reported;
//   - the mirror's own throughput: a sessiond started on what that load
//     left, mirroring into an empty table, copies every transcript at
//     start; its rows per second against a plain batched INSERT loop of
//     the same rows (the reference adapter's INSERT over unnest, as many
//     loops as the mirror has workers, the same rows per transaction),
//     the ceiling: at least 80 % of it;
//   - the peer users would pick instead of sessiond: the SDK's reference
//     PostgreSQL store, one INSERT per append, durable commit, for one
//     agent appending one entry at a time and for 64 at once.

// Name is the mirror scenario's name.
const Name = "mirror"

const (
	// mirrorLocalShare: local throughput with the mirror on, at least this
	// share (%) of it with the mirror off.
	mirrorLocalShare = 90.0
	// mirrorCeilingShare: the mirror's rows per second, at least this
	// share (%) of the plain INSERT loop's.
	mirrorCeilingShare = 80.0
	mirrorClients      = 64
)

// Title describes the scenario in the report.
const Title = "mirror: sessiond's PostgreSQL mirror under the parallel64 load, its catch-up against a plain batched INSERT loop, and the reference PostgreSQL store"

// refStoreDriver is the reference PostgreSQL SessionStore: each append
// one INSERT of its entries, committed (durably) before it returns.
type refStoreDriver struct {
	dsn, table string
	pool       *pgxpool.Pool
	w          *throughput.Workload
}

func (d *refStoreDriver) Open(ctx context.Context, w *throughput.Workload) error {
	d.w = w
	cfg, err := pgxpool.ParseConfig(d.dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(w.Clients)
	cfg.MinConns = int32(w.Clients)
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, mirror.ReferenceDDL(d.table))
	return err
}

func (d *refStoreDriver) Append(ctx context.Context, _, s int, line []byte) error {
	_, err := d.pool.Exec(ctx, mirror.ReferenceAppendSQL(d.table), d.w.ProjectKey, d.w.SessionIDs[s], "", []string{string(line)})
	return err
}

func (d *refStoreDriver) Counters(context.Context) (throughput.Counters, error) {
	return throughput.Counters{}, nil
}
func (d *refStoreDriver) Settle(context.Context) error { return nil }

func (d *refStoreDriver) Verify(ctx context.Context, t *throughput.Tally) error {
	for s, sid := range d.w.SessionIDs {
		var n uint64
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+d.table+` WHERE project_key = $1 AND session_id = $2`, d.w.ProjectKey, sid).Scan(&n); err != nil {
			return err
		}
		if n != t.PerSession[s].Entries {
			return fmt.Errorf("session %s: %d rows, %d appends acknowledged", sid, n, t.PerSession[s].Entries)
		}
	}
	return nil
}

func (d *refStoreDriver) Close(context.Context) error {
	if d.pool != nil {
		d.pool.Close()
	}
	return nil
}

// mirrorSampler polls sessiond's Status while a load runs: the mirror's
// rows written and its lag.
type mirrorSampler struct {
	maxBehind uint64
	maxAge    time.Duration
	err       error
	stop      chan struct{}
	done      chan struct{}
}

func sampleMirror(ctx context.Context, c *client.Client, every time.Duration) *mirrorSampler {
	s := &mirrorSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			st, err := c.Status(ctx)
			if err != nil {
				s.err = err
				return
			}
			m := st.GetMirror()
			s.maxBehind = max(s.maxBehind, m.GetEntriesBehind())
			if ms := m.GetOldestBehindMs(); ms > 0 {
				s.maxAge = max(s.maxAge, time.Since(time.UnixMilli(ms)))
			}
			select {
			case <-t.C:
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

func (s *mirrorSampler) finish() error {
	close(s.stop)
	<-s.done
	return s.err
}

// mirrorStatus is Status.mirror.
func mirrorStatus(ctx context.Context, c *client.Client) (*sessiondv1.MirrorStatus, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	return st.GetMirror(), nil
}

// waitConnected waits until the mirror is connected to PostgreSQL, and
// returns when it saw it and the rows written by then.
func waitConnected(ctx context.Context, c *client.Client, within time.Duration) (time.Time, uint64, error) {
	deadline := time.Now().Add(within)
	for {
		m, err := mirrorStatus(ctx, c)
		if err != nil {
			return time.Time{}, 0, err
		}
		if m.GetConnected() {
			return time.Now(), m.GetRowsWritten(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, 0, fmt.Errorf("the mirror did not connect in %v: last error %q", within, m.GetLastError())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitCaughtUp waits until the mirror has compared every transcript and
// holds nothing behind, and returns its status then.
func waitCaughtUp(ctx context.Context, c *client.Client, within time.Duration) (*sessiondv1.MirrorStatus, error) {
	deadline := time.Now().Add(within)
	for {
		m, err := mirrorStatus(ctx, c)
		if err != nil {
			return nil, err
		}
		if m.GetConnected() && !m.GetListing() && m.GetUnchecked() == 0 && m.GetEntriesBehind() == 0 {
			return m, nil
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("the mirror did not catch up in %v: %d entries behind, %d transcripts unchecked, last error %q",
				within, m.GetEntriesBehind(), m.GetUnchecked(), m.GetLastError())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countRows counts table's rows of projectKey.
func countRows(ctx context.Context, dsn, table, projectKey string) (uint64, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var n uint64
	err = c.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE project_key = $1`, projectKey).Scan(&n)
	return n, err
}

// ceilingLinesDDL is a table laid out as sessiond_lines.
func ceilingLinesDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + `_lines (store_table text NOT NULL, project_key text NOT NULL, session_id text NOT NULL,
    subpath text NOT NULL DEFAULT '', seq bigint NOT NULL, line text NOT NULL, PRIMARY KEY (store_table, project_key, session_id, subpath, seq))`
}

// insertLoop is the ceiling: loops connections inserting rows rows
// (sessions sessions, perTx rows per transaction, each committed) into a
// fresh table with the reference adapter's SQL, as fast as PostgreSQL
// takes them; withLines, each transaction also inserts the same lines
// into a table laid out as sessiond_lines (the same data the mirror
// writes). It returns the rows per second.
func insertLoop(ctx context.Context, dsn, table string, withLines bool, rows, sessions, perTx, loops int, size harness.Sizer, seed uint64) (float64, error) {
	setup, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	_, err = setup.Exec(ctx, mirror.ReferenceDDL(table))
	if err == nil && withLines {
		_, err = setup.Exec(ctx, ceilingLinesDDL(table))
	}
	setup.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	project := fmt.Sprintf("-sessiond-bench-ceiling-%08x", rng.Uint32())
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = harness.NewUUID(rng)
	}
	// The rows, made before the clock starts: session s gets its share,
	// in transactions of perTx.
	type txn struct {
		sid   string
		first int // the seq of its first line (withLines)
		lines []string
	}
	var txns []txn
	per := (rows + sessions - 1) / sessions
	made := 0
	for s := 0; s < sessions && made < rows; s++ {
		n := min(per, rows-made)
		for i := 0; i < n; i += perTx {
			t := txn{sid: ids[s], first: i}
			for j := i; j < min(i+perTx, n); j++ {
				t.lines = append(t.lines, string(harness.AppendEntry(nil, size.Size(rng), ids[s], harness.NewUUID(rng), uint64(j))))
			}
			txns = append(txns, t)
		}
		made += n
	}
	conns := make([]*pgx.Conn, loops)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, dsn); err != nil {
			return 0, err
		}
		defer conns[i].Close(context.WithoutCancel(ctx))
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, loops)
	sql := mirror.ReferenceAppendSQL(table)
	start := time.Now()
	for i := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(txns) || ctx.Err() != nil {
					return
				}
				t := txns[k]
				if !withLines {
					if _, err := conns[i].Exec(ctx, sql, project, t.sid, "", t.lines); err != nil {
						errs[i] = err
						return
					}
					continue
				}
				err := pgx.BeginFunc(ctx, conns[i], func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, sql, project, t.sid, "", t.lines); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO `+table+`_lines (store_table, project_key, session_id, subpath, seq, line)
SELECT $1, $2, $3, '', $4 + ord, l FROM unnest($5::text[]) WITH ORDINALITY AS t(l, ord)`, table, project, t.sid, t.first, t.lines)
					return err
				})
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	n, err := countRows(ctx, dsn, table, project)
	if err != nil {
		return 0, err
	}
	if n != uint64(made) {
		return 0, fmt.Errorf("the INSERT loop left %d rows, want %d", n, made)
	}
	return float64(made) / took.Seconds(), nil
}

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	clients := int(env.Scaled(mirrorClients, 2))
	dur := env.Duration
	if dur <= 0 {
		dur = 10 * time.Second
	}
	sc := &harness.Scenario{Name: Name,
		Title: fmt.Sprintf("mirror: %d clients, 1 KiB entries, durable, on a durable PostgreSQL: the mirror off and on; its catch-up vs a plain batched INSERT loop; the reference PostgreSQL store", clients)}
	size, err := harness.ParseSize("1KiB")
	if err != nil {
		return sc, err
	}
	pg, err := pgtest.New(pgtest.Options{Durable: true, Settings: map[string]string{"max_connections": "200"}})
	if err != nil {
		return sc, fmt.Errorf("PostgreSQL for the mirror scenario: %w (%s)", err, pgtest.InstallHint)
	}
	defer pg.Close()
	if err := pg.Start(ctx); err != nil {
		return sc, fmt.Errorf("start PostgreSQL: %w", err)
	}
	dsn, err := pg.CreateDatabase(ctx, "bench")
	if err != nil {
		return sc, err
	}
	if err := harness.SameFS(env.Dir, pg.Dir()); err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("warning: %v: PostgreSQL and sessiond are not on the same disk", err))
	}
	rng := rand.New(rand.NewPCG(env.Seed, 16))
	newLoad := func(c, s int) *throughput.Workload {
		w := &throughput.Workload{Clients: c, Sessions: s, Size: size, Duration: dur, Seed: rng.Uint64(), Verify: env.Verify}
		w.ProjectKey = fmt.Sprintf("-sessiond-bench-%08x", rng.Uint32())
		for range s {
			w.SessionIDs = append(w.SessionIDs, harness.NewUUID(rng))
		}
		return w
	}
	by := map[string]*harness.Result{}
	measure := func(id, label, target string, d throughput.Driver, w *throughput.Workload) (*harness.Result, error) {
		r := &harness.Result{ID: id, Label: label, Target: target}
		env.Logf("[%s] %s ...", Name, label)
		err := throughput.Measure(ctx, d, w, r)
		sc.Results = append(sc.Results, r)
		by[id] = r
		if err != nil {
			return r, fmt.Errorf("%s: %w", label, err)
		}
		env.Logf("[%s]   %.0f entries/s, p50 %.0f us", Name, r.EntriesPerSec, r.Latency.P50)
		return r, nil
	}
	start := func(name string, args ...string) (*harness.Daemon, error) {
		dir := filepath.Join(env.Dir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return harness.StartDaemon(ctx, env.Sessiond, dir, append(append([]string{}, env.SessiondArgs...), args...))
	}

	// The peer: the reference store, one agent, then 64.
	if _, err := measure("p1", "(p) reference PG store, 1 client", "refstore",
		&refStoreDriver{dsn: dsn, table: "ref_one"}, newLoad(1, 1)); err != nil {
		return sc, err
	}
	if _, err := measure("p64", fmt.Sprintf("(p) reference PG store, %d -> %d sessions", clients, clients), "refstore",
		&refStoreDriver{dsn: dsn, table: "ref_many"}, newLoad(clients, clients)); err != nil {
		return sc, err
	}

	// sessiond without the mirror.
	off, err := start("off")
	if err != nil {
		return sc, err
	}
	_, err1 := measure("d1", "sessiond, 1 client (no mirror)", harness.TargetDaemon, &throughput.DaemonDriver{Socket: off.Socket, ResetHWM: true}, newLoad(1, 1))
	var err2 error
	if err1 == nil {
		_, err2 = measure("d64", fmt.Sprintf("sessiond, %d -> %d sessions, no mirror", clients, clients), harness.TargetDaemon,
			&throughput.DaemonDriver{Socket: off.Socket, ResetHWM: true}, newLoad(clients, clients))
	}
	if err := errors.Join(err1, err2, off.Stop(60*time.Second)); err != nil {
		return sc, err
	}

	// sessiond with the mirror, under the same load.
	mr, err := mirrorLoad(ctx, start, measure, "on", "m64", fmt.Sprintf("sessiond, %d -> %d sessions, mirror on", clients, clients), dsn, newLoad(clients, clients))
	if err != nil {
		return sc, err
	}
	m := mr.res

	// The same pair with PostgreSQL as on a server of its own: a second
	// PostgreSQL on a CPU of its own (sessiond and the load on CPU 0,
	// PostgreSQL on CPU 1) and on a disk of its own (memory: /dev/shm).
	// Beside sessiond on this machine's two cores and one disk, a
	// PostgreSQL takes the CPU the local load needs (the ceiling below
	// says how much of the machine its inserts take) and slows
	// sessiond's own syncs with its writes, which a fleet's database
	// elsewhere does not.
	var pinned *mirrorRun
	if runtime.NumCPU() >= 2 {
		far, farDSN, err := farPostgres(ctx)
		if err != nil {
			return sc, err
		}
		defer far.Close()
		pr, err := pinnedPair(far, func() (mirrorRun, error) {
			poff, err := start("pinned-off")
			if err != nil {
				return mirrorRun{}, err
			}
			_, err = measure("d64p", fmt.Sprintf("sessiond on 1 CPU, %d -> %d, no mirror", clients, clients), harness.TargetDaemon,
				&throughput.DaemonDriver{Socket: poff.Socket, ResetHWM: true}, newLoad(clients, clients))
			if err := errors.Join(err, poff.Stop(60*time.Second)); err != nil {
				return mirrorRun{}, err
			}
			return mirrorLoad(ctx, start, measure, "pinned-on", "m64p", fmt.Sprintf("sessiond on 1 CPU, %d -> %d, mirror on", clients, clients),
				farDSN, newLoad(clients, clients))
		})
		if err != nil {
			return sc, err
		}
		pinned = &pr
	}

	// The mirror's own pace: a sessiond on what the load left, mirroring
	// into an empty table, copies every transcript at start. Its rate is
	// counted from the moment its mirror is connected, as the INSERT
	// loop's is from when its connections are open: what sessiond does
	// before (start, recovery) is not the mirror's work. The time from
	// sessiond's start is reported beside it.
	catchStart := time.Now()
	again, err := start("on", "--mirror", dsn, "--mirror-table", "catchup_store")
	if err != nil {
		return sc, err
	}
	var drained *sessiondv1.MirrorStatus
	var connectedAt time.Time
	var rowsAtConnect uint64
	ctl2, err := client.Dial(again.Socket)
	if err == nil {
		defer ctl2.Close()
		connectedAt, rowsAtConnect, err = waitConnected(ctx, ctl2, time.Minute)
		if err == nil {
			drained, err = waitCaughtUp(ctx, ctl2, 10*time.Minute)
		}
	}
	caughtUp := time.Now()
	if err := errors.Join(err, again.Stop(60*time.Second)); err != nil {
		return sc, err
	}
	catchRows := drained.GetRowsWritten()
	if catchRows != m.TotalAcked {
		return sc, fmt.Errorf("the catch-up wrote %d rows, the load acknowledged %d entries", catchRows, m.TotalAcked)
	}
	catchTook, catchWhole := caughtUp.Sub(connectedAt), caughtUp.Sub(catchStart)
	catchRate := float64(catchRows-rowsAtConnect) / catchTook.Seconds()
	perTx := min(mirror.DefaultBatchEntries, max(int(catchRows)/clients, 1))
	ceiling, err := insertLoop(ctx, dsn, "ceiling_store", true, int(catchRows), clients, perTx, mirror.DefaultWorkers, size, env.Seed)
	if err != nil {
		return sc, fmt.Errorf("the plain INSERT loop: %w", err)
	}
	rowsOnly, err := insertLoop(ctx, dsn, "ceiling_rows", false, int(catchRows), clients, perTx, mirror.DefaultWorkers, size, env.Seed+1)
	if err != nil {
		return sc, fmt.Errorf("the plain INSERT loop (rows alone): %w", err)
	}

	sc.Notes = append(sc.Notes,
		"mirror under the load: "+mr.String(),
		fmt.Sprintf("mirror catch-up: %d rows (every transcript on disk) into an empty table, %d of them in the %.2f s from its connection to the last row: %s rows/s (%.2f s from sessiond's start: %s rows/s)",
			catchRows, catchRows-rowsAtConnect, catchTook.Seconds(), harness.FmtNum(catchRate), catchWhole.Seconds(), harness.FmtNum(float64(catchRows)/catchWhole.Seconds())),
		fmt.Sprintf("ceiling: a plain INSERT loop of as many entries, %d connections as the mirror's %d workers, %d entries per committed transaction, "+
			"each transaction the reference adapter's INSERT of the jsonb rows and an INSERT of the same lines into a table laid out as sessiond_lines (the data the mirror writes): %s rows/s",
			mirror.DefaultWorkers, mirror.DefaultWorkers, perTx, harness.FmtNum(ceiling)),
		fmt.Sprintf("the same loop writing the jsonb rows alone (the reference adapter's data, without sessiond's exact lines): %s rows/s; the mirror reaches %.0f %% of it",
			harness.FmtNum(rowsOnly), catchRate/rowsOnly*100))

	if pinned != nil {
		sc.Notes = append(sc.Notes, "mirror under the load, PostgreSQL on a CPU and a (memory) disk of its own: "+pinned.String())
		if off, on := by["d64p"], by["m64p"]; harness.Measured(off, on) {
			ch := harness.NewCheck("local throughput, mirror on >= 90% of off, PostgreSQL on a CPU and disk of its own", on.EntriesPerSec/off.EntriesPerSec*100, mirrorLocalShare, "%", true)
			ch.Note = fmt.Sprintf("%s vs %s entries/s", harness.FmtNum(on.EntriesPerSec), harness.FmtNum(off.EntriesPerSec))
			sc.Checks = append(sc.Checks, ch)
		}
	}
	if d64 := by["d64"]; harness.Measured(d64, m) {
		ch := harness.NewCheck("local throughput, mirror on >= 90% of off, PostgreSQL sharing the CPUs (info)", m.EntriesPerSec/d64.EntriesPerSec*100, mirrorLocalShare, "%", true)
		ch.Note = fmt.Sprintf("%s vs %s entries/s; PostgreSQL's inserts take the CPU the load needs: its ceiling below is what the whole machine gives them", harness.FmtNum(m.EntriesPerSec), harness.FmtNum(d64.EntriesPerSec))
		sc.Checks = append(sc.Checks, ch)
	}
	ch := harness.NewCheck("mirror rows/s >= 80% of a plain batched INSERT loop of the same data", catchRate/ceiling*100, mirrorCeilingShare, "%", true)
	ch.Note = fmt.Sprintf("%s vs %s rows/s", harness.FmtNum(catchRate), harness.FmtNum(ceiling))
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
	return sc, nil
}

// mirrorRun is what a load against a sessiond that mirrors measured of
// the mirror.
type mirrorRun struct {
	res       *harness.Result
	rows      uint64        // rows the mirror wrote over the load
	secs      float64       // the load's wall time
	maxBehind uint64        // most entries not mirrored yet, sampled
	maxAge    time.Duration // oldest unmirrored entry's greatest age, sampled
	drain     time.Duration // from the load's end until nothing was behind
}

func (m mirrorRun) String() string {
	return fmt.Sprintf("%s rows/s written over the %.1f s load (%s entries/s acknowledged locally); "+
		"most entries behind %d, oldest unmirrored entry at most %.0f ms old; drained %.0f ms after the load ended",
		harness.FmtNum(float64(m.rows)/m.secs), m.secs, harness.FmtNum(m.res.EntriesPerSec), m.maxBehind, float64(m.maxAge)/float64(time.Millisecond),
		float64(m.drain)/float64(time.Millisecond))
}

// mirrorLoad starts a sessiond mirroring into dsn in folder name, runs w
// against it (measured as id), samples the mirror's lag meanwhile, waits
// until it drained, and checks that PostgreSQL holds every acknowledged
// entry once.
func mirrorLoad(ctx context.Context, start func(string, ...string) (*harness.Daemon, error),
	measure func(id, label, target string, d throughput.Driver, w *throughput.Workload) (*harness.Result, error),
	name, id, label, dsn string, w *throughput.Workload) (out mirrorRun, err error) {
	on, err := start(name, "--mirror", dsn)
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
	out.res, err = measure(id, label, harness.TargetDaemon, &throughput.DaemonDriver{Socket: on.Socket, ResetHWM: true}, w)
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

// farPostgres starts a PostgreSQL standing in for one on a server of its
// own: its data in memory (/dev/shm when there is one), so that its
// writes do not slow this disk's syncs.
func farPostgres(ctx context.Context) (*pgtest.Server, string, error) {
	parent := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		parent = "/dev/shm"
	}
	pg, err := pgtest.New(pgtest.Options{Durable: true, Parent: parent, Settings: map[string]string{"max_connections": "200"}})
	if err != nil {
		return nil, "", err
	}
	if err := pg.Start(ctx); err != nil {
		pg.Close()
		return nil, "", err
	}
	dsn, err := pg.CreateDatabase(ctx, "bench")
	if err != nil {
		pg.Close()
		return nil, "", err
	}
	return pg, dsn, nil
}
