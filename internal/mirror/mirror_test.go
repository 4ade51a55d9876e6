package mirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
	"github.com/sessiond/sessiond/internal/pgtest"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/writer"
)

const project = "-tmp-mirror"

var bg = context.Background()

// shared is one server for the tests that do not stop it; each test has
// its own database.
var (
	sharedOnce sync.Once
	shared     *pgtest.Server
	sharedErr  error
	dbSeq      int
	dbMu       sync.Mutex
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

// database returns the DSN of a fresh database on the shared server.
func database(t *testing.T) string {
	t.Helper()
	pgtest.Need(t)
	sharedOnce.Do(func() {
		shared, sharedErr = pgtest.New(pgtest.Options{})
		if sharedErr == nil {
			ctx, cancel := context.WithTimeout(bg, 90*time.Second)
			defer cancel()
			sharedErr = shared.Start(ctx)
		}
	})
	if sharedErr != nil {
		t.Fatalf("pgtest: %v", sharedErr)
	}
	dbMu.Lock()
	dbSeq++
	name := fmt.Sprintf("t%d", dbSeq)
	dbMu.Unlock()
	dsn, err := shared.CreateDatabase(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// env is a writer.Manager on a temp root with a mirror to dsn.
type env struct {
	t     *testing.T
	dsn   string
	lay   layout.Layout
	m     *writer.Manager
	mr    *Mirror
	clock clock.Clock
	// machine and ttl: the lease holder's name and lease duration
	// (defaults when empty).
	machine string
	ttl     time.Duration
	pace    time.Duration // Config.Pace (0: the default)
}

func newEnv(t *testing.T, dsn string, clk clock.Clock) *env {
	return newEnvAs(t, dsn, clk, "", 0)
}

// newEnvAs is newEnv for a machine of that name with leases of ttl.
func newEnvAs(t *testing.T, dsn string, clk clock.Clock, machine string, ttl time.Duration) *env {
	return newEnvWith(t, &env{dsn: dsn, clock: clk, machine: machine, ttl: ttl})
}

// newEnvWith starts e's mirror and writer in a new folder.
func newEnvWith(t *testing.T, e *env) *env {
	dir := t.TempDir()
	e.t = t
	e.lay = layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	e.t.Helper()
	mr, err := New(Config{DSN: e.dsn, Logger: zaptest.NewLogger(e.t), Clock: e.clock, BatchEntries: 7,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, MachineID: e.machine, LeaseTTL: e.ttl, Pace: e.pace})
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := writer.New(writer.Config{Layout: e.lay, Logger: zaptest.NewLogger(e.t), Changed: mr.Notify, AppendGate: mr.Leases().CheckAppend,
		IdleCompact: 50 * time.Millisecond, CompactWithin: 50 * time.Millisecond, IdleRetire: 200 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	c := m.Config()
	cat := catalog.New(catalog.Config{FS: c.FS, Layout: c.Layout, Index: c.Index}, m)
	if err := mr.Start(bg, struct {
		*reader.Reader
		*catalog.Catalog
	}{reader.New(writer.NewSnapshots(m)), cat}); err != nil {
		e.t.Fatal(err)
	}
	e.m, e.mr = m, mr
}

func (e *env) stop() {
	if e.m == nil {
		return
	}
	e.mr.Close()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		e.t.Errorf("close: %v", err)
	}
	e.m, e.mr = nil, nil
}

// waitRows waits (up to 20 s) until the mirror has written n rows since
// its start: what, and the status, say otherwise.
func (e *env) waitRows(n uint64, what string) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); e.mr.Status().RowsWritten != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("want %s (%d rows): status %+v", what, n, e.mr.Status())
		}
	}
}

// drain is Mirror.Drain within 20 s, failing e's test on an error.
func (e *env) drain() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	if err := e.mr.Drain(ctx); err != nil {
		e.t.Fatalf("drain: %v", err)
	}
}

func newKey(subpath string) layout.Key {
	return layout.Key{ProjectKey: project, SessionID: uuid.NewString(), Subpath: subpath}
}

func line(i int, extra string) string {
	return fmt.Sprintf(`{"type":"user","uuid":"%s","n":%d,"zeta":1,"alpha":{"b":2,"a":[1,"x"]}%s}`, uuid.NewString(), i, extra)
}

func (e *env) append(k layout.Key, lines ...string) {
	e.t.Helper()
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	if _, err := e.m.Append(bg, k, raw); err != nil {
		e.t.Fatalf("append to %s: %v", k, err)
	}
}

// load is the reference adapter's load of k.
func load(t *testing.T, dsn string, k layout.Key) []string {
	return mirrortest.Load(t, dsn, DefaultTable, k)
}

// exactLines are sessiond's own copies of k's rows, in seq order.
func exactLines(t *testing.T, dsn string, k layout.Key) []string {
	return mirrortest.ExactLines(t, dsn, DefaultTable, k)
}

// waitCaughtUp waits until the mirror reports nothing behind and every
// listed transcript checked.
func (e *env) waitCaughtUp(within time.Duration) Status {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := e.mr.Status()
		if st.Connected && st.EntriesBehind == 0 && st.Unchecked == 0 && !st.Listing {
			e.mr.mu.Lock()
			idle := len(e.mr.queue) == 0
			for _, ts := range e.mr.keys {
				idle = idle && !ts.busy
			}
			e.mr.mu.Unlock()
			if idle {
				return st
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("mirror not caught up after %v: %+v", within, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) local(k layout.Key) []string {
	e.t.Helper()
	var out []string
	_, _, err := reader.New(writer.NewSnapshots(e.m)).ReadLines(bg, k, 0, 0, func(es []reader.Entry) error {
		for _, x := range es {
			out = append(out, string(x.Data))
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestMirrorAppends: what is appended, to main sessions and subagents,
// lands in the reference table in order, equal as JSON (loaded with the
// reference adapter's SQL), with each row's exact line beside it, a
// \u0000 escape and lone surrogate escapes included (jsonb refuses them:
// they are \ufffd in the row), in several transactions per transcript.
func TestMirrorAppends(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	main := newKey("")
	sub := layout.Key{ProjectKey: main.ProjectKey, SessionID: main.SessionID, Subpath: "subagents/agent-a1"}
	other := newKey("")
	var wantMain, wantSub []string
	for i := range 20 {
		l := line(i, "")
		if i == 3 {
			l = line(i, `,"nul":"a\u0000b","esc":"\\u0000","cut":"emoji \ud83d","pair":"\ud83d\ude00"`)
		}
		wantMain = append(wantMain, l)
		e.append(main, l)
		if i%3 == 0 {
			s := line(i, `,"sub":true`)
			wantSub = append(wantSub, s)
			e.append(sub, s)
		}
	}
	batch := []string{line(100, ""), line(101, ""), line(102, "")}
	e.append(other, batch...)
	st := e.waitCaughtUp(20 * time.Second)
	if st.Transcripts != 3 || st.RowsWritten != uint64(len(wantMain)+len(wantSub)+len(batch)) {
		t.Fatalf("status %+v: want 3 transcripts and %d rows", st, len(wantMain)+len(wantSub)+len(batch))
	}
	gotMain := load(t, dsn, main)
	want3 := strings.NewReplacer(`a\u0000b`, `a\ufffdb`, `emoji \ud83d`, `emoji \ufffd`).Replace(wantMain[3])
	mirrortest.SameEntries(t, "main", gotMain, append(append(append([]string{}, wantMain[:3]...), want3), wantMain[4:]...))
	mirrortest.SameEntries(t, "subagent", load(t, dsn, sub), wantSub)
	mirrortest.SameEntries(t, "other", load(t, dsn, other), batch)
	if got := exactLines(t, dsn, main); !reflect.DeepEqual(got, wantMain) {
		t.Fatalf("sessiond_lines differ from the appended lines:\n got %q\nwant %q", got, wantMain)
	}
}

// TestMirrorPaceAndDrain: a transcript's first change after a quiet spell
// is mirrored at once; what follows within the pace waits for it (and
// then goes in one transaction); Drain mirrors it without waiting.
func TestMirrorPaceAndDrain(t *testing.T) {
	dsn := database(t)
	e := newEnvWith(t, &env{dsn: dsn, pace: time.Hour})
	k := newKey("")
	want := []string{line(0, ""), line(1, ""), line(2, "")}
	e.append(k, want[0])
	// Not waitCaughtUp: a compaction's change may queue the transcript
	// again, for the next turn an hour away.
	e.waitRows(1, "the first entry mirrored at once")
	e.append(k, want[1])
	e.append(k, want[2])
	time.Sleep(300 * time.Millisecond)
	if st := e.mr.Status(); st.EntriesBehind != 2 || st.RowsWritten != 1 {
		t.Fatalf("status %+v: want the two entries appended within the pace held back", st)
	}
	e.drain()
	if st := e.mr.Status(); st.EntriesBehind != 0 || st.RowsWritten != 3 {
		t.Fatalf("status after the drain %+v: want all 3 rows", st)
	}
	mirrortest.SameEntries(t, "after the drain", load(t, dsn, k), want)
}

// TestMirrorWithoutPace: with a negative Pace (sessiond's --mirror-pace
// 0), an entry appended right after another is mirrored in a turn of its
// own, with no drain: under an hour's pace it would wait for the hour.
func TestMirrorWithoutPace(t *testing.T) {
	dsn := database(t)
	e := newEnvWith(t, &env{dsn: dsn, pace: -1})
	k := newKey("")
	want := []string{line(0, ""), line(1, "")}
	for i, l := range want {
		e.append(k, l)
		e.waitRows(uint64(i+1), fmt.Sprintf("entry %d mirrored without a pace", i))
	}
	mirrortest.SameEntries(t, "without a pace", load(t, dsn, k), want)
}

// TestMirrorDrainGivesUpWhenPostgresDoesNotAnswer: Drain at shutdown with
// PostgreSQL unreachable returns once a connection attempt has failed,
// saying so and how many entries stay behind, rather than wait for its
// context.
func TestMirrorDrainGivesUpWhenPostgresDoesNotAnswer(t *testing.T) {
	sock := t.TempDir() // no server listens there
	e := newEnvWith(t, &env{dsn: "host=" + sock + " port=5432 user=nobody dbname=none connect_timeout=2", pace: time.Hour})
	k := newKey("")
	e.append(k, line(0, ""), line(1, ""))
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	err := e.mr.Drain(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "PostgreSQL does not answer") || !strings.Contains(err.Error(), "2 entries stay behind") {
		t.Fatalf("drain with PostgreSQL unreachable = %v (context: %v); want it to give up at once, saying 2 entries stay behind", err, ctx.Err())
	}
}

// TestMirrorScanAtStart: a mirror started over transcripts appended
// without one mirrors them all; one started again after more appends
// writes only the new ones (none twice).
func TestMirrorScanAtStart(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	k := newKey("")
	var want []string
	for i := range 5 {
		want = append(want, line(i, ""))
	}
	e.append(k, want...)
	e.waitCaughtUp(20 * time.Second)
	e.stop()

	// Appends with no mirror at all.
	m, err := writer.New(writer.Config{Layout: e.lay, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	more := []string{line(5, ""), line(6, "")}
	if _, err := m.Append(bg, k, [][]byte{[]byte(more[0]), []byte(more[1])}); err != nil {
		t.Fatal(err)
	}
	k2 := newKey("")
	if _, err := m.Append(bg, k2, [][]byte{[]byte(more[0])}); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(bg); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)

	e.start()
	st := e.waitCaughtUp(20 * time.Second)
	mirrortest.SameEntries(t, "after restart", load(t, dsn, k), want)
	mirrortest.SameEntries(t, "new session", load(t, dsn, k2), more[:1])
	if st.RowsWritten != 3 {
		t.Fatalf("the mirror started again wrote %d rows, want the 3 new ones", st.RowsWritten)
	}
}

// TestMirrorStatusShowsAMoveKeepingTheCount: another program drops a
// line while the writer is retired, and an append brings the count back
// to what PostgreSQL holds. Under an hour's pace the change waits for its
// turn; the status must not say all is mirrored meanwhile: the transcript
// counts as unchecked until a turn compared it, and the drain mirrors it.
func TestMirrorStatusShowsAMoveKeepingTheCount(t *testing.T) {
	dsn := database(t)
	e := newEnvWith(t, &env{dsn: dsn, pace: time.Hour})
	k := newKey("")
	first := []string{line(0, ""), line(1, "")}
	e.append(k, first...)
	e.waitRows(2, "the first entries mirrored at once")
	for deadline := time.Now().Add(20 * time.Second); e.m.IsActive(k); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not retire")
		}
	}
	if err := os.WriteFile(e.lay.TranscriptPath(k), []byte(first[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := line(2, "")
	e.append(k, extra)
	st := e.mr.Status()
	if st.Unchecked == 0 && st.EntriesBehind == 0 {
		t.Fatalf("status %+v after a move that kept the count: says nothing is left to mirror", st)
	}
	if st.RowsWritten != 2 {
		t.Fatalf("status %+v: the change was mirrored before its pace (the test needs it held back)", st)
	}
	e.drain()
	if st := e.mr.Status(); st.Unchecked != 0 || st.EntriesBehind != 0 {
		t.Fatalf("status after the drain: %+v", st)
	}
	mirrortest.SameEntries(t, "after the drain", load(t, dsn, k), []string{first[1], extra})
}

// TestMirrorFollowsRewriteAndDelete: a transcript rewritten while
// sessiond was away (another program dropped and changed lines) is
// replaced as a whole at the next start; deleting a session removes its
// rows and its subagents'.
func TestMirrorFollowsRewriteAndDelete(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	k := newKey("")
	sub := layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID, Subpath: "subagents/agent-x"}
	var lines []string
	for i := range 10 {
		lines = append(lines, line(i, ""))
	}
	e.append(k, lines...)
	e.append(sub, line(50, ""))
	e.waitCaughtUp(20 * time.Second)
	e.stop()

	// Another program rewrites the file: a line changed, two dropped;
	// the count differs from the cursor's and so do the bytes.
	rewritten := append([]string{lines[0], strings.Replace(lines[1], `"n":1`, `"n":1001`, 1)}, lines[4:]...)
	if err := os.WriteFile(e.lay.TranscriptPath(k), []byte(strings.Join(rewritten, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(20 * time.Second)
	mirrortest.SameEntries(t, "after the rewrite", load(t, dsn, k), rewritten)
	if got := exactLines(t, dsn, k); !reflect.DeepEqual(got, rewritten) {
		t.Fatalf("sessiond_lines after the rewrite: %d lines, want %d", len(got), len(rewritten))
	}
	var gen int64
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if err := c.QueryRow(bg, `SELECT generation FROM sessiond_cursors WHERE session_id = $1 AND subpath = ''`, k.SessionID).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	if gen != 2 {
		t.Fatalf("generation %d after one rewrite, want 2", gen)
	}
	// Same count, same last line, a middle line changed: still found.
	rewritten[2] = strings.Replace(rewritten[2], `"zeta":1`, `"zeta":2`, 1)
	e.stop()
	if err := os.WriteFile(e.lay.TranscriptPath(k), []byte(strings.Join(rewritten, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(20 * time.Second)
	mirrortest.SameEntries(t, "after a rewrite of a middle line", load(t, dsn, k), rewritten)

	if _, err := e.m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(load(t, dsn, k))+len(load(t, dsn, sub)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("rows of a deleted session still there: %d main, %d subagent", len(load(t, dsn, k)), len(load(t, dsn, sub)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	var n int
	if err := c.QueryRow(bg, `SELECT (SELECT count(*) FROM sessiond_cursors WHERE session_id = $1) + (SELECT count(*) FROM sessiond_lines WHERE session_id = $1)`, k.SessionID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d cursors and lines of a deleted session left", n)
	}
	// Restored: mirrored again.
	if err := e.m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(20 * time.Second)
	mirrortest.SameEntries(t, "after the restore", load(t, dsn, k), rewritten)
	if got := load(t, dsn, sub); len(got) != 1 {
		t.Fatalf("subagent after the restore: %d rows, want 1", len(got))
	}
}

// TestMirrorLeavesForeignRows: rows another program wrote for a
// transcript sessiond has no cursor of are neither deleted nor added to;
// Status says why.
func TestMirrorLeavesForeignRows(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	k := newKey("")
	e.append(newKey(""), line(0, "")) // makes the table
	e.waitCaughtUp(20 * time.Second)
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	foreign := []string{`{"type":"user","uuid":"f1"}`}
	if _, err := c.Exec(bg, `INSERT INTO claude_session_store (project_key, session_id, subpath, entry, mtime)
SELECT $1, $2, $3, e, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
FROM unnest($4::jsonb[]) WITH ORDINALITY AS t(e, ord) ORDER BY ord`, k.ProjectKey, k.SessionID, k.Subpath, foreign); err != nil {
		t.Fatal(err)
	}
	e.append(k, line(1, ""))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(e.mr.Status().LastError, "did not write") {
		if time.Now().After(deadline) {
			t.Fatalf("no error about the foreign rows: %+v", e.mr.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mirrortest.SameEntries(t, "foreign rows", load(t, dsn, k), foreign)
	if st := e.mr.Status(); st.EntriesBehind != 1 {
		t.Fatalf("entries behind %d, want the 1 not mirrored", st.EntriesBehind)
	}
}
