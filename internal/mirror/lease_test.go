package mirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/writer"
)

// leaseRow reads k's session's lease as PostgreSQL holds it.
func leaseRow(t *testing.T, dsn string, k layout.Key) lease.Row {
	t.Helper()
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	l, ok, err := lease.Read(bg, c, DefaultTable, k, false)
	if err != nil || !ok {
		t.Fatalf("lease of %s: %v (exists %v)", k, err, ok)
	}
	return l
}

func (e *env) appendErr(k layout.Key, lines ...string) error {
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	_, err := e.m.Append(bg, k, raw)
	return err
}

// copyTo gives other e's copy of k, as a pull would (the takeover's
// machine must hold what the former holder mirrored).
func (e *env) copyTo(other *env, k layout.Key) {
	e.t.Helper()
	path := other.lay.TranscriptPath(k)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(e.local(k), "\n")+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func wantLeased(t *testing.T, err error, holder string, expires time.Time, takenOver bool) {
	t.Helper()
	var le *lease.LeasedError
	if !errors.As(err, &le) || !errors.Is(err, errdefs.ErrLeased) {
		t.Fatalf("got %v, want a refusal: leased by %s", err, holder)
	}
	msg := err.Error()
	if le.Holder != holder || !strings.Contains(msg, holder) || !strings.Contains(msg, expires.UTC().Format(time.RFC3339)) || le.TakenOver != takenOver {
		t.Fatalf("refusal %q (taken over %v) does not name holder %s and expiry %s (taken over %v)", msg, le.TakenOver, holder, expires.UTC().Format(time.RFC3339), takenOver)
	}
	if takenOver && !strings.Contains(msg, "taken over by") {
		t.Fatalf("refusal %q does not say the session was taken over", msg)
	}
}

// TestLeaseAcquireRenewExpireTakeoverFence: two machines on one
// database, each on its own fake clock (A's stands still: it is paused).
// A's append takes the lease; B's is refused naming A and the expiry; a
// renewal moves the expiry and keeps the token; past the expiry B takes
// over under a larger token; A, still believing it holds the lease,
// appends locally, but its mirror is fenced: none of those rows reach
// PostgreSQL, and A's next append is refused, naming B.
func TestLeaseAcquireRenewExpireTakeoverFence(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ttl := 30 * time.Second
	dsn, ca, cb, a, b := clockedMachines(t, t0, ttl)

	k := newKey("")
	first := []string{line(1, ""), line(2, "")}
	a.append(k, first...)
	a.waitCaughtUp(30 * time.Second)
	l := leaseRow(t, dsn, k)
	if l.Holder != "machine-A" || !l.Expires.Equal(t0.Add(ttl)) {
		t.Fatalf("lease after A's append: %+v, want machine-A until %v", l, t0.Add(ttl))
	}
	tokenA := l.Token

	// A subagent of the session is the same session: refused too.
	wantLeased(t, b.appendErr(k, line(9, "")), "machine-A", t0.Add(ttl), false)
	wantLeased(t, b.appendErr(layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID, Subpath: "subagents/agent-x"}, line(9, "")),
		"machine-A", t0.Add(ttl), false)

	// A renews: a later expiry, the same token. A's renewer runs on the
	// same Advance; the test waits until it has re-armed its timer, so
	// that it cannot renew late, after B's takeover below, and fence A
	// before A's late append (what a paused A does first on waking,
	// renew or append, is a race the test does not mean to run).
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := ca.WaitArmed(ctx, 1); err != nil {
		t.Fatalf("A's renewer never armed its timer: %v", err)
	}
	ca.Advance(20 * time.Second)
	if err := ca.WaitArmed(ctx, 1); err != nil {
		t.Fatalf("A's renewer never came back to sleep after renewing: %v", err)
	}
	a.mr.leases.Renew(bg)
	l = leaseRow(t, dsn, k)
	if l.Holder != "machine-A" || l.Token != tokenA || !l.Expires.Equal(t0.Add(50*time.Second)) {
		t.Fatalf("lease after renewal: %+v, want machine-A token %d until %v", l, tokenA, t0.Add(50*time.Second))
	}
	// Past the first expiry, before the renewed one: B asks again and is
	// refused with the new expiry.
	cb.Advance(45 * time.Second)
	wantLeased(t, b.appendErr(k, line(9, "")), "machine-A", t0.Add(50*time.Second), false)

	// Past it: B takes over (having A's lines, as a pull brings them).
	a.copyTo(b, k)
	cb.Advance(15 * time.Second)
	bLines := []string{line(3, ""), line(4, "")}
	b.append(k, bLines...)
	b.waitCaughtUp(30 * time.Second)
	l = leaseRow(t, dsn, k)
	if l.Holder != "machine-B" || l.Token <= tokenA {
		t.Fatalf("lease after takeover: %+v, want machine-B with a token above %d", l, tokenA)
	}

	// A was paused: its clock says its lease runs, so it appends locally.
	late := line(5, "")
	a.append(k, late)
	// The fencing and its last error are recorded together: the first
	// status that shows one shows the other (CI once read a status
	// between the two).
	deadline := time.Now().Add(30 * time.Second)
	st := a.mr.Status()
	for len(st.Fenced) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("A's mirror was not fenced: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
		st = a.mr.Status()
	}
	if !strings.Contains(st.Fenced[0], "taken over by machine-B") || !strings.Contains(st.LastError, "machine-B") {
		t.Fatalf("A's status does not say who took over: %+v", st)
	}
	// A's late line never reached PostgreSQL: the rows are A's first
	// lines and B's, in order.
	mirrortest.SameEntries(t, "rows after the fencing", load(t, dsn, k), append(append([]string{}, first...), bLines...))
	// A's local entries are kept.
	if got := a.local(k); len(got) != 3 || got[2] != late {
		t.Fatalf("A's local copy: %q, want its 3 lines", got)
	}
	// And A's clients are told.
	wantLeased(t, a.appendErr(k, line(6, "")), "machine-B", l.Expires, true)
}

// TestLeaseReleasedWhenIdleAndAtStop: a session idle for LeaseIdle has
// its lease released (another machine takes it at once, under a larger
// token), and a sessiond that stops releases the leases it holds.
func TestLeaseReleasedWhenIdleAndAtStop(t *testing.T) {
	dsn := database(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := newEnvAs(t, dsn, clk, "machine-A", time.Minute)
	b := newEnvAs(t, dsn, clk, "machine-B", time.Minute)
	// Both connected first: an append made before the mirror reaches
	// PostgreSQL is stored locally without asking (and leased later).
	a.waitCaughtUp(30 * time.Second)
	b.waitCaughtUp(30 * time.Second)
	k := newKey("")
	a.append(k, line(1, ""))
	a.waitCaughtUp(30 * time.Second)
	la := leaseRow(t, dsn, k)
	if err := b.appendErr(k, line(2, "")); !errors.Is(err, errdefs.ErrLeased) {
		t.Fatalf("B's append while A holds the lease: %v", err)
	}
	// Idle past LeaseIdle (the default, the writer's idle retirement):
	// released, though its minute is not over.
	// (letGo waits for the release to reach PostgreSQL: the leases' own
	// renewer may be the one releasing, just after Renew returns.)
	a.letGo(clk, k)
	if l := leaseRow(t, dsn, k); l.Holder != "machine-A" || l.Token != la.Token || l.Expires.After(clk.Now()) {
		t.Fatalf("lease after A went idle: %+v, want A's token %d expired by %v", l, la.Token, clk.Now())
	}
	if st := a.mr.Status(); st.Leases != 0 {
		t.Fatalf("A still counts %d leases", st.Leases)
	}
	a.copyTo(b, k)
	b.append(k, line(3, ""))
	lb := leaseRow(t, dsn, k)
	if lb.Holder != "machine-B" || lb.Token <= la.Token {
		t.Fatalf("lease after B's append: %+v, want B's above %d", lb, la.Token)
	}
	// B stops: released.
	b.stop()
	if l := leaseRow(t, dsn, k); l.Holder != "machine-B" || l.Expires.After(clk.Now()) {
		t.Fatalf("lease after B stopped: %+v, want expired by %v", l, clk.Now())
	}
}

// TestLeaseBoundedWait: an append that must ask PostgreSQL whether the
// session is leased elsewhere waits at most LeaseWait; when no answer
// comes, it is stored locally, and the mirror, finding the session
// another machine's later, is fenced and says so, the entry kept.
func TestLeaseBoundedWait(t *testing.T) {
	dsn := database(t)
	a := newEnvAs(t, dsn, clock.Real, "machine-A", time.Minute)
	b := newEnvAs(t, dsn, clock.Real, "machine-B", time.Minute)
	a.waitCaughtUp(30 * time.Second)
	k := newKey("")
	b.append(k, line(1, ""))
	b.waitCaughtUp(30 * time.Second)
	// PostgreSQL "slow": the lease row is locked, so A's question hangs.
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	tx, err := c.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, "SELECT 1 FROM sessiond_leases WHERE session_id = $1 FOR UPDATE", k.SessionID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	late := line(2, "")
	if err := a.appendErr(k, late); err != nil {
		t.Fatalf("A's append while PostgreSQL does not answer: %v", err)
	}
	if took := time.Since(start); took > DefaultLeaseWait+time.Second {
		t.Fatalf("the append waited %v for PostgreSQL (bound %v)", took, DefaultLeaseWait)
	}
	tx.Rollback(bg)
	deadline := time.Now().Add(30 * time.Second)
	for len(a.mr.Status().Fenced) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("A's mirror was not fenced: %+v", a.mr.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := a.local(k); len(got) != 1 || got[0] != late {
		t.Fatalf("A's local copy %q: the entry must be kept", got)
	}
	if rows := load(t, dsn, k); len(rows) != 1 {
		t.Fatalf("rows %q: A's entry must not reach PostgreSQL", rows)
	}
	wantLeased(t, a.appendErr(k, line(3, "")), "machine-B", leaseRow(t, dsn, k).Expires, true)
}

// TestLeaseTakeoverKeepsFormerRows: a machine that takes a session over
// with a local copy lacking the rows the former holder wrote (it did not
// pull first) does not replace them with its copy: nothing is written,
// and its status says to pull.
func TestLeaseTakeoverKeepsFormerRows(t *testing.T) {
	dsn := database(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := newEnvAs(t, dsn, clk, "machine-A", time.Minute)
	b := newEnvAs(t, dsn, clk, "machine-B", time.Minute)
	k := newKey("")
	rows := []string{line(1, ""), line(2, "")}
	a.append(k, rows...)
	a.waitCaughtUp(30 * time.Second)
	clk.Advance(2 * time.Minute)
	a.mr.leases.Renew(bg) // idle: released
	b.append(k, line(3, ""))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.mr.Status().LastError, "pull the session") {
		if time.Now().After(deadline) {
			t.Fatalf("B's mirror does not say to pull: %+v", b.mr.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := leaseRow(t, dsn, k); l.Holder != "machine-B" {
		t.Fatalf("lease %+v, want B's", l)
	}
	mirrortest.SameEntries(t, "A's rows", load(t, dsn, k), rows)
}

// clockedMachines starts machines A and B on one new database, each on
// its own fake clock at t0 (so that a test can leave one standing, as if
// paused), with leases of ttl, and waits until both mirrors caught up.
func clockedMachines(t *testing.T, t0 time.Time, ttl time.Duration) (dsn string, ca, cb *clock.Fake, a, b *env) {
	t.Helper()
	dsn = database(t)
	ca, cb = clock.NewFake(t0), clock.NewFake(t0)
	a = newEnvAs(t, dsn, ca, "machine-A", ttl)
	b = newEnvAs(t, dsn, cb, "machine-B", ttl)
	a.waitCaughtUp(30 * time.Second)
	b.waitCaughtUp(30 * time.Second)
	return dsn, ca, cb, a, b
}

// TestPulledCopyBehindWritesNothing: B pulled a session (main and
// subagent) that A goes on writing, and B's mirror first looks at the
// pulled copy once A's later lines are in PostgreSQL. B's copy is behind
// PostgreSQL's, not rewritten: its mirror writes nothing, takes no lease
// and is not fenced, so that once A lets the session go B's append takes
// it over, brings A's later lines down first, and goes on after them.
func TestPulledCopyBehindWritesNothing(t *testing.T) {
	dsn := database(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := newEnvAs(t, dsn, clk, "machine-A", time.Minute)
	b := newEnvAs(t, dsn, clk, "machine-B", time.Minute)
	a.waitCaughtUp(30 * time.Second)
	b.waitCaughtUp(30 * time.Second)
	newTestPuller(t, b)

	k := newKey("")
	sub := layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID, Subpath: "subagents/agent-behind"}
	mainLines := []string{line(1, ""), line(2, "")}
	subLines := []string{line(100, `,"sub":true`)}
	a.append(k, mainLines...)
	a.append(sub, subLines...)
	a.waitCaughtUp(30 * time.Second)
	// What B's pull read from PostgreSQL (its snapshot)...
	remote, err := b.mr.Fetch(bg, k.ProjectKey, k.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	// ...then A goes on before B's mirror gets its turn at the pulled
	// transcripts, holding the lease meanwhile.
	mainLines = append(mainLines, line(3, ""))
	subLines = append(subLines, line(101, `,"sub":true`))
	a.append(k, mainLines[2])
	a.append(sub, subLines[1])
	a.waitCaughtUp(30 * time.Second)
	tokenA := leaseRow(t, dsn, k).Token
	for i := len(remote.Transcripts) - 1; i >= 0; i-- { // subagents first, as a pull writes them
		rt := remote.Transcripts[i]
		kk := k
		kk.Subpath = rt.Subpath
		if err := b.m.Import(bg, kk, rt.Lines, rt.Meta); err != nil {
			t.Fatal(err)
		}
	}
	st := b.waitCaughtUp(30 * time.Second)
	if len(st.Fenced) != 0 || st.LastError != "" || st.RowsWritten != 0 || st.Leases != 0 {
		t.Fatalf("B's mirror after pulling a copy that is behind: %+v; want nothing written, no lease, no fencing", st)
	}
	if l := leaseRow(t, dsn, k); l.Holder != "machine-A" || l.Token != tokenA {
		t.Fatalf("lease after B's pull: %+v, want A's under token %d", l, tokenA)
	}
	mirrortest.SameEntries(t, "main rows after B's pull", load(t, dsn, k), mainLines)
	mirrortest.SameEntries(t, "subagent rows after B's pull", load(t, dsn, sub), subLines)
	if gen := generation(t, dsn, k); gen != 1 {
		t.Fatalf("the main cursor's generation is %d after B's pull, want 1 (no rewrite)", gen)
	}

	// A goes idle and lets the session go: B's append takes it over,
	// A's later lines first.
	a.letGo(clk, k)
	mine := line(4, "")
	b.append(k, mine)
	mainLines = append(mainLines, mine)
	if got := b.local(k); !reflect.DeepEqual(got, mainLines) {
		t.Fatalf("B's copy after the takeover: %q, want %q", got, mainLines)
	}
	if got := b.local(sub); !reflect.DeepEqual(got, subLines) {
		t.Fatalf("B's subagent after the takeover: %q, want %q", got, subLines)
	}
	st = b.waitCaughtUp(30 * time.Second)
	if len(st.Fenced) != 0 || st.LastError != "" {
		t.Fatalf("B's mirror after the takeover: %+v", st)
	}
	mirrortest.SameEntries(t, "main rows after B's takeover", load(t, dsn, k), mainLines)
	mirrortest.SameEntries(t, "subagent rows after B's takeover", load(t, dsn, sub), subLines)
	if l := leaseRow(t, dsn, k); l.Holder != "machine-B" || l.Token <= tokenA {
		t.Fatalf("lease after B's append: %+v, want B's above %d", l, tokenA)
	}
}

// generation is k's cursor's generation.
func generation(t *testing.T, dsn string, k layout.Key) int64 {
	t.Helper()
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	cur, err := loadCursor(bg, c, DefaultTable, k, false)
	if err != nil || !cur.exists {
		t.Fatalf("cursor of %s: %v (exists %v)", k, err, cur.exists)
	}
	return cur.generation
}

// TestStaleCursorPulledLinesNotNew: B's mirror holds a cursor read before
// a pull brought later lines here, and gets its turn only once B let the
// session go and A went on with it. The pulled lines are PostgreSQL's,
// not new: B's mirror reads the cursor again before it would take the
// lease (which A holds), finds its copy behind, and writes nothing: B is
// not fenced.
func TestStaleCursorPulledLinesNotNew(t *testing.T) {
	dsn := database(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := newEnvAs(t, dsn, clk, "machine-A", time.Minute)
	// B's turns after the first wait for the pace, until the test drains.
	b := newEnvWith(t, &env{dsn: dsn, clock: clk, machine: "machine-B", ttl: time.Minute, pace: time.Hour})
	a.waitCaughtUp(30 * time.Second)
	b.waitCaughtUp(30 * time.Second)
	p := newTestPuller(t, b)

	k := newKey("")
	lines := []string{line(1, ""), line(2, "")}
	a.append(k, lines...)
	a.waitCaughtUp(30 * time.Second)
	a.letGo(clk, k)
	// B pulls the session whole; its mirror checks it at once (the first
	// turn is not paced) and knows the cursor: 2 lines.
	if _, err := p.Pull(bg, k.ProjectKey, k.SessionID); err != nil {
		t.Fatal(err)
	}
	b.waitChecked(k, 2)
	// A goes on and lets go; B pulls the rest (taking the lease, then
	// letting it go), its mirror's turn held back by the pace.
	lines = append(lines, line(3, ""))
	a.append(k, lines[2])
	a.waitCaughtUp(30 * time.Second)
	a.letGo(clk, k)
	if _, err := p.Pull(bg, k.ProjectKey, k.SessionID); err != nil {
		t.Fatal(err)
	}
	b.letGo(clk, k)
	// A goes on again, holding the lease.
	lines = append(lines, line(4, ""))
	a.append(k, lines[3])
	a.waitCaughtUp(30 * time.Second)
	tokenA := leaseRow(t, dsn, k).Token
	// Now B's turn: line 3 is past its cursor, but not new.
	b.drain()
	if st := b.mr.Status(); len(st.Fenced) != 0 || st.LastError != "" || st.Leases != 0 {
		t.Fatalf("B's mirror after its turn at pulled lines: %+v; want no lease, no fencing", st)
	}
	if l := leaseRow(t, dsn, k); l.Holder != "machine-A" || l.Token != tokenA {
		t.Fatalf("lease after B's turn: %+v, want A's under token %d", l, tokenA)
	}
	mirrortest.SameEntries(t, "rows after B's turn", load(t, dsn, k), lines)
	if gen := generation(t, dsn, k); gen != 1 {
		t.Fatalf("the cursor's generation is %d, want 1 (no rewrite)", gen)
	}
}

// newTestPuller is e's Puller, made as sessiond makes it (the pull reads
// transcripts through the reader and sidecars through the catalog), and
// e's leases' takeover hook.
func newTestPuller(t *testing.T, e *env) *Puller {
	c := e.m.Config()
	store := struct {
		*writer.Manager
		*reader.Reader
		*catalog.Catalog
	}{e.m, reader.New(writer.NewSnapshots(e.m)), catalog.New(catalog.Config{FS: c.FS, Layout: c.Layout, Index: c.Index}, e.m)}
	return NewPuller(e.mr, store, e.lay, zaptest.NewLogger(t))
}

// waitChecked waits until e's mirror compared k with its cursor, and the
// cursor covers entries lines.
func (e *env) waitChecked(k layout.Key, entries uint64) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		e.mr.mu.Lock()
		ts := e.mr.keys[k]
		done := ts != nil && ts.checked && !ts.busy && ts.known && ts.cur.entries == entries
		e.mr.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s not checked with a cursor of %d lines: %+v", k, entries, e.mr.Status())
		}
	}
}

// letGo has e's lease of k's session released as idle, and waits until
// PostgreSQL has the release (the leases' own renewer, woken by the same
// Advance, may be the one releasing it, after Renew here returned).
func (e *env) letGo(clk *clock.Fake, k layout.Key) {
	e.t.Helper()
	clk.Advance(DefaultLeaseIdle + time.Second)
	e.mr.leases.Renew(bg)
	for deadline := time.Now().Add(20 * time.Second); leaseRow(e.t, e.dsn, k).Expires.After(clk.Now()); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s's lease of %s not released: %+v", e.machine, k, leaseRow(e.t, e.dsn, k))
		}
	}
}
