package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
	"github.com/sessiond/sessiond/internal/pgtest"
)

// The tests of the PostgreSQL mirror: a throwaway PostgreSQL
// (internal/pgtest, Debian's server binaries; never skipped in CI or under
// make test) and the real sessiond with --mirror.

const mirrorProject = "-tmp-mirror-e2e"

// mirrorPassword is in every DSN the tests give sessiond (the server
// trusts the socket and ignores it): it must show in no log line.
const mirrorPassword = "e2e-Secret-pw-42"

// startPostgres starts a server and a database on it; the DSN carries
// mirrorPassword.
func startPostgres(t *testing.T) (*pgtest.Server, string) {
	t.Helper()
	pg := pgtest.Start(t, pgtest.Options{})
	if _, err := pg.CreateDatabase(context.Background(), "mirror"); err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("postgres://postgres:%s@/mirror?host=%s&port=%d&sslmode=disable", mirrorPassword, pg.SocketDir(), pgtest.Port)
	return pg, dsn
}

// mirrorDaemon is a sessiond mirroring to dsn, given through the
// environment as the README advises (the password stays out of ps).
func mirrorDaemon(t *testing.T, dsn string, args ...string) *daemon {
	d := newDaemon(t, args...)
	d.env = append(d.env, "SESSIOND_MIRROR="+dsn)
	t.Cleanup(func() {
		if d.Daemon != nil && strings.Contains(d.Log(), mirrorPassword) {
			t.Errorf("the connection string's password is in sessiond's log")
		}
	})
	return d
}

func mirrorSession(subpath string) client.Session {
	return client.Session{ProjectKey: mirrorProject, ID: uuid.NewString(), Subpath: subpath}
}

func mirrorEntry(n int) []byte {
	return fmt.Appendf(nil, `{"type":"user","uuid":"%s","n":%d,"message":{"role":"user","content":"entry %d"},"zz":true,"aa":[1,2]}`,
		uuid.NewString(), n, n)
}

// refLoad is the reference adapter's load of s from its default table.
func refLoad(t *testing.T, dsn string, s client.Session) []string {
	return mirrortest.Load(t, dsn, "claude_session_store", layout.Key{ProjectKey: s.ProjectKey, SessionID: s.ID, Subpath: s.Subpath})
}

// localEntries reads the session through sessiond: its well-formed lines,
// the ones that get rows.
func localEntries(t *testing.T, d *daemon, s client.Session) []string {
	t.Helper()
	c := d.client()
	defer c.Close()
	var out []string
	err := c.Read(context.Background(), s, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		if !e.GetMalformed() {
			out = append(out, string(e.GetData()))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", s.ID, err)
	}
	return out
}

func mirrorStatus(t *testing.T, d *daemon) *sessiondv1.MirrorStatus {
	t.Helper()
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st.GetMirror()
}

// waitMirrored waits until the mirror is connected, has compared every
// local transcript with PostgreSQL and is behind by nothing.
func waitMirrored(t *testing.T, d *daemon, within time.Duration) *sessiondv1.MirrorStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := mirrorStatus(t, d)
		if m.GetConnected() && m.GetEntriesBehind() == 0 && m.GetUnchecked() == 0 && !m.GetListing() {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror not caught up after %v: %v", within, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMirrorAppendsReachPostgres: entries appended through sessiond, to a
// session and a subagent, are the rows the reference adapter's load
// returns, in order, deep equal; sessionctl status shows the mirror, and
// the password shows nowhere.
func TestMirrorAppendsReachPostgres(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	main := mirrorSession("")
	sub := client.Session{ProjectKey: main.ProjectKey, ID: main.ID, Subpath: "subagents/agent-e2e"}
	acked := map[client.Session][]string{}
	for i := range 30 {
		s := main
		if i%4 == 3 {
			s = sub
		}
		batch := [][]byte{mirrorEntry(i)}
		if i%5 == 0 {
			batch = append(batch, mirrorEntry(1000+i), mirrorEntry(2000+i))
		}
		if _, err := c.Append(ctx, s, batch...); err != nil {
			t.Fatal(err)
		}
		for _, b := range batch {
			acked[s] = append(acked[s], string(b))
		}
	}
	m := waitMirrored(t, d, 30*time.Second)
	for s, want := range acked {
		mirrortest.SameEntries(t, s.Subpath+" rows", refLoad(t, dsn, s), want)
	}
	if m.GetTranscripts() != 2 || m.GetRowsWritten() != uint64(len(acked[main])+len(acked[sub])) || strings.Contains(m.GetTarget(), mirrorPassword) {
		t.Fatalf("mirror status %v: want 2 transcripts, %d rows and no password", m, len(acked[main])+len(acked[sub]))
	}
	out := d.ctlOK("mirror", "status")
	if !strings.Contains(out, "connected to user=postgres database=mirror socket=") || strings.Contains(out, mirrorPassword) {
		t.Fatalf("sessionctl status:\n%s", out)
	}
}

// TestMirrorDrainsAtStop: what the mirror holds back for its pace when
// SIGTERM comes is mirrored before sessiond exits and releases the
// session's lease, so the machine that takes the session over next finds
// it whole in PostgreSQL.
func TestMirrorDrainsAtStop(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	s := mirrorSession("")
	var want []string
	for i := range 5 {
		// One at a time: the first goes at once, the next ones wait for
		// the pace (half a second by default).
		e := mirrorEntry(i)
		if _, err := c.Append(ctx, s, e); err != nil {
			t.Fatal(err)
		}
		want = append(want, string(e))
	}
	d.stop(syscall.SIGTERM, 30*time.Second)
	mirrortest.SameEntries(t, "rows once sessiond stopped", refLoad(t, dsn, s), want)
	if held := mirrortest.Texts(t, dsn, `SELECT holder FROM sessiond_leases WHERE session_id = $1 AND expires_at > now()`, s.ID); len(held) != 0 {
		t.Fatalf("the session's lease is still held after the stop (by %q)", held)
	}
}

// appender appends to its own session until stopped, and keeps what was
// acknowledged, in order. Failed appends are not retried (their entries
// may or may not be stored: a kill -9 cut the answer off).
type appender struct {
	s      client.Session
	mu     sync.Mutex
	acked  []string
	failed atomic.Int64
	n      int
}

func (a *appender) run(ctx context.Context, socket string, pause time.Duration) {
	c, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return
	}
	defer c.Close()
	for ctx.Err() == nil {
		batch := [][]byte{mirrorEntry(a.n)}
		a.n++
		if a.n%7 == 0 {
			batch = append(batch, mirrorEntry(a.n))
			a.n++
		}
		// Not cancelled by stop: once stop returns, no append is in
		// flight, so one the daemon would still store after the status
		// said all was mirrored cannot be.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err := c.Append(actx, a.s, batch...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				a.failed.Add(1)
			}
		} else {
			a.mu.Lock()
			for _, b := range batch {
				a.acked = append(a.acked, string(b))
			}
			a.mu.Unlock()
		}
		time.Sleep(pause)
	}
}

func (a *appender) ackedSoFar() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.acked...)
}

// runLoad runs appenders on n sessions until the returned stop is called.
func runLoad(d *daemon, sessions []*appender, pause time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, a := range sessions {
		wg.Add(1)
		go func() { defer wg.Done(); a.run(ctx, d.socket, pause) }()
	}
	return func() { cancel(); wg.Wait() }
}

func newAppenders(n int) []*appender {
	var out []*appender
	for range n {
		out = append(out, &appender{s: mirrorSession("")})
	}
	return out
}

// checkMirrored fails unless each session's rows are its transcript's
// entries (deep equal, in order) and the transcript holds every
// acknowledged entry once, in order.
func checkMirrored(t *testing.T, d *daemon, dsn string, sessions []*appender, what string) {
	t.Helper()
	for _, a := range sessions {
		local := localEntries(t, d, a.s)
		mirrortest.SameEntries(t, what, refLoad(t, dsn, a.s), local)
		seen := map[string]bool{}
		for _, l := range local {
			var e struct{ UUID string }
			json.Unmarshal([]byte(l), &e)
			if seen[e.UUID] {
				t.Fatalf("%s: entry %s twice in the transcript", what, e.UUID)
			}
			seen[e.UUID] = true
		}
		i := 0
		for _, l := range local {
			if acked := a.ackedSoFar(); i < len(acked) && l == acked[i] {
				i++
			}
		}
		if acked := a.ackedSoFar(); i != len(acked) {
			t.Fatalf("%s: only %d of %d acknowledged entries are in the transcript, in order", what, i, len(acked))
		}
	}
}

// outage is how long TestMirrorPostgresOutage keeps PostgreSQL down: a
// minute (an outage long enough for appends to pile up under load), unless
// SESSIOND_MIRROR_OUTAGE (a duration) says otherwise (a quicker run while
// working on the mirror).
func outage(t *testing.T) time.Duration {
	v := os.Getenv("SESSIOND_MIRROR_OUTAGE")
	if v == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SESSIOND_MIRROR_OUTAGE=%q: want a duration such as 1m", v)
	}
	return d
}

// TestMirrorPostgresOutage: PostgreSQL stopped under load: no append
// fails, the lag grows (entries, bytes, age) while it is down and drains
// to zero once it is back, and the rows are the entries, once each.
func TestMirrorPostgresOutage(t *testing.T) {
	t.Parallel()
	pg, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn)
	d.start()
	apps := newAppenders(3)
	stop := runLoad(d, apps, 5*time.Millisecond)
	defer stop()
	time.Sleep(500 * time.Millisecond)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	down := outage(t)
	t.Logf("PostgreSQL stopped for %v under load", down)
	time.Sleep(down / 2)
	m1 := mirrorStatus(t, d)
	time.Sleep(down / 2)
	m2 := mirrorStatus(t, d)
	if m1.GetConnected() || m2.GetConnected() || m2.GetEntriesBehind() <= m1.GetEntriesBehind() || m1.GetEntriesBehind() == 0 ||
		m2.GetBytesBehind() <= m1.GetBytesBehind() || m2.GetOldestBehindMs() == 0 || m2.GetLastError() == "" {
		t.Fatalf("while PostgreSQL is down the lag must grow:\n at %v: %v\n at %v: %v", down/2, m1, down, m2)
	}
	if age := time.Since(time.UnixMilli(m2.GetOldestBehindMs())); age < down/2 {
		t.Fatalf("the oldest entry not mirrored is %v old after %v down", age, down)
	}
	out := d.ctlOK("NOT CONNECTED", "status")
	if !strings.Contains(out, "mirror behind") {
		t.Fatalf("sessionctl status during the outage:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	for _, a := range apps {
		if n := a.failed.Load(); n > 0 {
			t.Fatalf("%d appends failed while PostgreSQL was down", n)
		}
	}
	m := waitMirrored(t, d, 60*time.Second)
	if m.GetOldestBehindMs() != 0 || m.GetBytesBehind() != 0 {
		t.Fatalf("caught up, yet %v", m)
	}
	checkMirrored(t, d, dsn, apps, "after the outage")
}

// TestMirrorCrashSweep: kill -9 of sessiond, of the postmaster (with its
// backends) or of both, at random points under load, for
// SESSIOND_MIRROR_CRASH_CYCLES cycles (6 by default); after each recovery
// the rows are the transcripts' entries, in order, none twice, and every
// acknowledged entry is there.
func TestMirrorCrashSweep(t *testing.T) {
	t.Parallel()
	cycles := tortureEnv(t, "SESSIOND_MIRROR_CRASH_CYCLES", 6)
	pg, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn)
	d.start()
	apps := newAppenders(3)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	for cycle := range cycles {
		stop := runLoad(d, apps, 2*time.Millisecond)
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		what := []string{"sessiond", "postgres", "both"}[rng.IntN(3)]
		if what != "sessiond" {
			pg.Kill()
		}
		if what != "postgres" {
			d.Kill()
		}
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		if what != "sessiond" {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if err := pg.Start(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			cancel()
		}
		if what != "postgres" {
			d.start()
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		stop()
		waitMirrored(t, d, 60*time.Second)
		checkMirrored(t, d, dsn, apps, fmt.Sprintf("cycle %d (killed %s)", cycle, what))
		t.Logf("cycle %d: killed %s; rows match", cycle, what)
	}
	d.stop(syscall.SIGTERM, 30*time.Second)
}

// TestMirrorFollowsRepairAndDelete: a repair that rewrites a transcript
// is followed (the rows become the repaired entries, in one
// transaction), another program's rewrite too, and a delete takes the
// session's rows, its subagents' included.
func TestMirrorFollowsRepairAndDelete(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn, "--idle-retire", "200ms", "--idle-compact", "50ms", "--compact-within", "50ms")
	s := mirrorSession("")
	sub := client.Session{ProjectKey: s.ProjectKey, ID: s.ID, Subpath: "subagents/agent-r"}
	// Written before sessiond by another program: the second line holds
	// two records, which only a repair splits.
	e := [][]byte{mirrorEntry(0), mirrorEntry(1), mirrorEntry(2), mirrorEntry(3)}
	path := d.transcript(s.ProjectKey, s.ID)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	content := string(e[0]) + "\n" + string(e[1]) + string(e[2]) + "\n" + string(e[3]) + "\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Append(ctx, sub, mirrorEntry(9)); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, d, 30*time.Second)
	mirrortest.SameEntries(t, "before the repair", refLoad(t, dsn, s), []string{string(e[0]), string(e[3])})

	if err := c.Repair(ctx, s, false, func(*sessiondv1.RepairResponse) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, d, 30*time.Second)
	want := []string{string(e[0]), string(e[1]), string(e[2]), string(e[3])}
	mirrortest.SameEntries(t, "local after the repair", localEntries(t, d, s), want)
	mirrortest.SameEntries(t, "rows after the repair", refLoad(t, dsn, s), want)

	// Another program drops a line while the writer is retired; the next
	// append (a writer opening the file anew) has the mirror check it.
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(path, []byte(want[0]+"\n"+want[2]+"\n"+want[3]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := mirrorEntry(4)
	if _, err := c.Append(ctx, s, extra); err != nil {
		t.Fatal(err)
	}
	want = []string{want[0], want[2], want[3], string(extra)}
	// As many lines as before: the status tells the rewrite is not
	// mirrored yet all the same (the transcript is unchecked until a turn
	// compared it), and the rows become the new lines.
	waitMirrored(t, d, 30*time.Second)
	mirrortest.SameEntries(t, "rows after another program's rewrite", refLoad(t, dsn, s), want)

	if _, err := c.Delete(ctx, s, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(refLoad(t, dsn, s))+len(refLoad(t, dsn, sub)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a deleted session's rows are still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
