package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
)

// The tests of one writer per session across machines:
// two real sessiond processes (two roots) sharing one PostgreSQL, as
// machines A and B, with short leases.

const leaseTTL = 2 * time.Second

func leaseDaemon(t *testing.T, dsn, machine string) *daemon {
	return mirrorDaemon(t, dsn, "--machine-id", machine, "--lease-ttl", leaseTTL.String())
}

// wantRefused checks err is FailedPrecondition naming holder (and, with
// takenOver, saying the session was taken over).
func wantRefused(t *testing.T, err error, holder string, takenOver bool) string {
	t.Helper()
	st, _ := status.FromError(err) // a wrapped status too
	if err == nil || st.Code() != codes.FailedPrecondition {
		t.Fatalf("append: got %v, want FailedPrecondition naming machine %s", err, holder)
	}
	msg := st.Message()
	if !strings.Contains(msg, `machine "`+holder+`"`) || !strings.Contains(msg, time.Now().UTC().Format("2006-01-02T")) {
		t.Fatalf("refusal %q does not name machine %q and the lease's expiry", msg, holder)
	}
	if takenOver != strings.Contains(msg, "taken over by") {
		t.Fatalf("refusal %q: taken over %v expected", msg, takenOver)
	}
	return msg
}

// exactRows are the exact lines of s's rows in PostgreSQL, in order.
func exactRows(t *testing.T, dsn string, s client.Session) []string {
	return mirrortest.ExactLines(t, dsn, "claude_session_store", layout.Key{ProjectKey: s.ProjectKey, SessionID: s.ID, Subpath: s.Subpath})
}

func leaseHolder(t *testing.T, dsn string, s client.Session) (string, int64) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var holder string
	var token int64
	if err := c.QueryRow(context.Background(), `SELECT holder, token FROM sessiond_leases WHERE project_key = $1 AND session_id = $2`,
		s.ProjectKey, s.ID).Scan(&holder, &token); err != nil {
		t.Fatal(err)
	}
	return holder, token
}

func appendN(t *testing.T, d *daemon, s client.Session, from, n int) []string {
	t.Helper()
	c := d.client()
	defer c.Close()
	var out []string
	for i := from; i < from+n; i++ {
		e := mirrorEntry(i)
		if _, err := c.Append(context.Background(), s, e); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		out = append(out, string(e))
	}
	return out
}

// TestLeaseRefusesSecondMachine: A appends to S; B's append to S (or to
// one of its subagents) is refused with FailedPrecondition naming A and
// the lease's expiry, and nothing of B's reaches PostgreSQL.
func TestLeaseRefusesSecondMachine(t *testing.T) {
	_, dsn := startPostgres(t)
	// Leases of a minute: with leaseTTL's 2 s, a loaded CI machine once
	// renewed A's too late, and B then took the session lawfully.
	a := mirrorDaemon(t, dsn, "--machine-id", "A", "--lease-ttl", "1m")
	b := mirrorDaemon(t, dsn, "--machine-id", "B", "--lease-ttl", "1m")
	a.start()
	b.start()
	s := mirrorSession("")
	want := appendN(t, a, s, 0, 3)
	waitMirrored(t, a, 30*time.Second)
	// B must reach PostgreSQL first: a machine that has not (yet) appends
	// locally, by design (a loaded CI once got there before B connected).
	waitMirrored(t, b, 30*time.Second)
	cb := b.client()
	defer cb.Close()
	for _, target := range []client.Session{s, {ProjectKey: s.ProjectKey, ID: s.ID, Subpath: "subagents/agent-b"}} {
		_, err := cb.Append(context.Background(), target, mirrorEntry(99))
		wantRefused(t, err, "A", false)
	}
	if holder, _ := leaseHolder(t, dsn, s); holder != "A" {
		t.Fatalf("lease holder %q, want A", holder)
	}
	mirrortest.SameEntries(t, "rows", refLoad(t, dsn, s), want)
	// sessionctl says it too, and exits non-zero.
	_, errOut, code := b.ctl(string(mirrorEntry(100))+"\n", "append", "--project", s.ProjectKey, "--session", s.ID)
	if code == 0 || !strings.Contains(errOut, `machine "A"`) {
		t.Fatalf("sessionctl append on B: exit %d, stderr %q: want a refusal naming A", code, errOut)
	}
}

// TestLeaseFencing: A holds S's lease, its mirror is in the middle of a
// transaction (held up on S's cursor lock, which the test takes) with
// entries acknowledged locally, and A is paused (SIGSTOP) past its
// lease's expiry. B, holding what PostgreSQL holds (as a pull brings it),
// takes over and appends. A resumes (SIGCONT): its transaction is fenced,
// none of A's later rows reach PostgreSQL (the rows are what it held at
// the takeover, then B's), A keeps its entries locally, its status says
// who took over, and its clients' next append is refused naming B.
func TestLeaseFencing(t *testing.T) {
	_, dsn := startPostgres(t)
	a, b := leaseDaemon(t, dsn, "A"), leaseDaemon(t, dsn, "B")
	a.start()
	b.start()
	ctx := context.Background()
	s := mirrorSession("")
	first := appendN(t, a, s, 0, 5)
	waitMirrored(t, a, 30*time.Second)
	_, tokenA := leaseHolder(t, dsn, s)

	// Hold S's cursor: A's next transaction waits for it.
	lockConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(ctx)
	lockTx, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback(ctx)
	if _, err := lockTx.Exec(ctx, `SELECT 1 FROM sessiond_cursors WHERE project_key = $1 AND session_id = $2 AND subpath = '' FOR UPDATE`,
		s.ProjectKey, s.ID); err != nil {
		t.Fatal(err)
	}
	later := appendN(t, a, s, 5, 3) // acknowledged on A, not mirrored
	time.Sleep(300 * time.Millisecond)
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			a.Signal(syscall.SIGCONT)
		}
	}()
	time.Sleep(leaseTTL + 500*time.Millisecond)

	// B gets what PostgreSQL holds (what a pull brings down), then takes
	// over.
	held := exactRows(t, dsn, s)
	mirrortest.SameEntries(t, "rows at the takeover", held, first)
	path := filepath.Join(b.root, "projects", s.ProjectKey, s.ID+".jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(held, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bEntries := appendN(t, b, s, 100, 3)
	holder, tokenB := leaseHolder(t, dsn, s)
	if holder != "B" || tokenB <= tokenA {
		t.Fatalf("after the takeover the lease is %s's with token %d; want B's above A's %d", holder, tokenB, tokenA)
	}
	// Let the transactions go: A's (waiting first, on the paused
	// process's connection) holds the cursor until A runs again.
	if err := lockTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitMirrored(t, b, 30*time.Second)

	// A is fenced: its status says by whom.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(mirrorStatus(t, a).GetLastError(), `taken over by machine "B"`) {
		if time.Now().After(deadline) {
			t.Fatalf("A's mirror status does not say it was fenced: %v\n%s", mirrorStatus(t, a), a.LogTail(logTail))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// None of A's later rows reached PostgreSQL: the rows are A's first
	// entries and B's, exactly.
	want := append(append([]string{}, first...), bEntries...)
	mirrortest.SameEntries(t, "rows after the fencing", refLoad(t, dsn, s), want)
	if got := exactRows(t, dsn, s); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("exact rows after the fencing:\n got %q\nwant %q", got, want)
	}
	// And never got there for a moment: had A's transaction gone
	// through, B would have found the rows ahead of its copy and replaced
	// them all (a rewrite, counted in the cursor's generation).
	if gen := cursorGeneration(t, dsn, s); gen != 1 || strings.Contains(b.Log(), "replacing its rows") {
		t.Fatalf("the cursor's generation is %d (want 1: no rewrite), or B replaced the rows: A's rows reached PostgreSQL", gen)
	}
	// A kept its entries.
	if got := localEntries(t, a, s); strings.Join(got, "\n") != strings.Join(append(append([]string{}, first...), later...), "\n") {
		t.Fatalf("A's local entries: %q", got)
	}
	// A's clients are told on their next append.
	ca := a.client()
	defer ca.Close()
	_, err = ca.Append(ctx, s, mirrorEntry(200))
	msg := wantRefused(t, err, "B", true)
	if !strings.Contains(a.Log(), "fenced") {
		t.Fatalf("A's log does not say it was fenced")
	}
	t.Logf("A's refusal: %s", msg)
	// Status and sessionctl status name the fenced session and the
	// machine that took it over.
	if out := a.ctlOK("fenced", "status"); !strings.Contains(out, s.ID+": fenced, taken over by B") || !strings.Contains(out, `machine "A" holds`) {
		t.Fatalf("sessionctl status on A:\n%s", out)
	}
	if out := b.ctlOK("leases", "status"); !strings.Contains(out, `machine "B" holds 1 session`) {
		t.Fatalf("sessionctl status on B:\n%s", out)
	}
	// Still none of A's rows.
	time.Sleep(500 * time.Millisecond)
	mirrortest.SameEntries(t, "rows at the end", refLoad(t, dsn, s), want)
}

func cursorGeneration(t *testing.T, dsn string, s client.Session) int64 {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var gen int64
	if err := c.QueryRow(context.Background(), `SELECT generation FROM sessiond_cursors WHERE store_table = 'claude_session_store'
AND project_key = $1 AND session_id = $2 AND subpath = ''`, s.ProjectKey, s.ID).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	return gen
}
