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

// The mirror scenario measures sessiond's PostgreSQL mirror on
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
