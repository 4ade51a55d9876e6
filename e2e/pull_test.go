package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
	"github.com/sessiond/sessiond/internal/sdkcheck"
)

// The fleet: a session mirrored to PostgreSQL by one
// machine, or written there by a program using the SDK's reference
// adapter, is pulled down by another machine's sessiond and read there by
// the official SDK from disk.

const (
	pullMainFixture = "marot__spotter__tool_heavy.jsonl"
	pullSubFixture  = "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20__subagents__agent-a7be2f0.jsonl"
	pullSub         = "subagents/agent-a7be2f0"
	pullMeta        = `{"type":"agent_metadata","agentType":"Explore","toolUseId":"toolu_01pull","description":"look around"}`
)

// parseAll decodes the SDK's messages, for a comparison that does not
// depend on key order.
func parseAll(t *testing.T, msgs []json.RawMessage) []any {
	t.Helper()
	var out []any
	for _, m := range msgs {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// sdkView is what the official SDK reads of a session from a config dir.
func sdkView(t *testing.T, sdk *sdkcheck.SDK, root, sid, cwd string) map[string]any {
	t.Helper()
	ctx := context.Background()
	r := map[string]any{}
	msgs, err := sdk.GetSessionMessages(ctx, root, sid, cwd)
	if err != nil || len(msgs) < 10 {
		t.Fatalf("getSessionMessages in %s: %d messages, %v", root, len(msgs), err)
	}
	r["messages"] = parseAll(t, msgs)
	agents, err := sdk.ListSubagents(ctx, root, sid, cwd)
	if err != nil || fmt.Sprint(agents) != "[a7be2f0]" {
		t.Fatalf("listSubagents in %s: %v, %v", root, agents, err)
	}
	sub, err := sdk.GetSubagentMessages(ctx, root, sid, "a7be2f0", cwd)
	if err != nil || len(sub) == 0 {
		t.Fatalf("getSubagentMessages in %s: %d messages, %v", root, len(sub), err)
	}
	r["subagent"] = parseAll(t, sub)
	list, err := sdk.ListSessions(ctx, root, cwd)
	if err != nil || len(list) != 1 {
		t.Fatalf("listSessions in %s: %v, %v", root, list, err)
	}
	r["summary"], r["firstPrompt"] = list[0].Summary, list[0].FirstPrompt
	return r
}

// waitRows waits until PostgreSQL holds n rows of s: waitMirrored alone
// may look before the mirror heard of an append just acknowledged. The
// table must exist (a mirror connected once, or the test made it).
func waitRows(t *testing.T, dsn string, s client.Session, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(refLoad(t, dsn, s)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL holds %d rows of %s after a minute, want %d", len(refLoad(t, dsn, s)), s.ID, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMirrorPullTwoMachines: two sessiond processes (two roots) on one
// PostgreSQL. A session written on A is pulled on B byte for byte, with
// its subagent and .meta.json, and the SDK reads the same there; B's
// appends mirror back after A's rows, each once; a session B never saw
// is pulled by a plain Read.
func TestMirrorPullTwoMachines(t *testing.T) {
	t.Parallel()
	sdk := sdkcheck.Require(t)
	_, dsn := startPostgres(t)
	// A's writers retire (and give up their sessions' leases) soon after
	// its last append, so that B may take the sessions over.
	a := mirrorDaemon(t, dsn, "--machine-id", "A", "--idle-retire", "2s")
	a.start()
	ca := a.client()
	defer ca.Close()
	ctx := context.Background()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	main := fixture(t, pullMainFixture)
	sid := sessionIDOf(t, main)
	s := client.Session{Cwd: cwd, ID: sid}
	appendAll(t, ca, s, main)
	appendAll(t, ca, client.Session{Cwd: cwd, ID: sid, Subpath: pullSub}, append(fixture(t, pullSubFixture), pullMeta+"\n"...))
	if _, err := ca.Rename(ctx, s, "Pulled elsewhere"); err != nil {
		t.Fatal(err)
	}
	a.ctlOK("", "flush", "--all") // A's file holds the title line too
	waitMirrored(t, a, 60*time.Second)

	b := mirrorDaemon(t, dsn, "--machine-id", "B")
	b.start()
	cb := b.client()
	defer cb.Close()
	// B lists A's session from PostgreSQL with the columns A lists it
	// with (but the time: the rows' mtime, not the file's).
	noTime := func(out string) string {
		var keep []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			keep = append(keep, strings.Join(f[:len(f)-2], " "))
		}
		return strings.Join(keep, "\n")
	}
	local := noTime(a.ctlOK("Pulled elsewhere", "list", "--cwd", cwd))
	if fleet := noTime(b.ctlOK(sid, "list", "--fleet", "--cwd", cwd)); fleet != local {
		t.Errorf("B's fleet listing:\n%s\nA's local listing:\n%s", fleet, local)
	}
	if out := b.ctlOK("", "list", "--cwd", cwd); strings.Contains(out, sid) {
		t.Errorf("B lists the session locally before pulling it:\n%s", out)
	}
	out := b.ctlOK("pulled "+sid, "pull", sid)
	if !strings.Contains(out, "main: pulled") || !strings.Contains(out, pullSub+": pulled") {
		t.Fatalf("sessionctl pull:\n%s", out)
	}
	subRel := filepath.Join("projects", pk, sid, pullSub)
	if !bytes.Equal(readFile(t, b.transcript(pk, sid)), readFile(t, a.transcript(pk, sid))) {
		t.Error("B's main transcript is not A's, byte for byte")
	}
	if !bytes.Equal(readFile(t, filepath.Join(b.root, subRel+".jsonl")), readFile(t, filepath.Join(a.root, subRel+".jsonl"))) {
		t.Error("B's subagent transcript is not A's, byte for byte")
	}
	if meta := readFile(t, filepath.Join(b.root, subRel+".meta.json")); string(meta) != `{"agentType":"Explore","toolUseId":"toolu_01pull","description":"look around"}` {
		t.Errorf("B's .meta.json: %s", meta)
	}
	if va, vb := sdkView(t, sdk, a.root, sid, cwd), sdkView(t, sdk, b.root, sid, cwd); !reflect.DeepEqual(va, vb) {
		t.Errorf("the SDK reads on B:\n%v\nnot what it reads on A:\n%v", vb, va)
	}
	// Pulled again: nothing to do.
	if out := b.ctlOK("pulled "+sid, "pull", sid); !strings.Contains(out, "main: identical") {
		t.Errorf("second pull:\n%s", out)
	}

	// B goes on with the session: its entries follow A's rows, once.
	acked := localEntries(t, a, s)
	more := [][]byte{mirrorEntry(1), mirrorEntry(2)}
	waitLeasesReleased(t, a)
	if _, err := cb.Append(ctx, s, more...); err != nil {
		t.Fatal(err)
	}
	// A then sees B's lease: its next append is refused, naming B.
	if _, err := ca.Append(ctx, s, mirrorEntry(3)); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `machine "B"`) {
		t.Errorf("A's append to the session B took over: %v, want FailedPrecondition naming B", err)
	}
	for _, m := range more {
		acked = append(acked, string(m))
	}
	waitRows(t, dsn, client.Session{ProjectKey: pk, ID: sid}, len(acked))
	waitMirrored(t, b, 60*time.Second)
	mirrortest.SameEntries(t, "rows after B's appends", refLoad(t, dsn, client.Session{ProjectKey: pk, ID: sid}), acked)
	if st := mirrorStatus(t, b); st.GetLastError() != "" {
		t.Errorf("B's mirror: %v", st)
	}

	// A session B never saw: a Read by id alone pulls it.
	s2 := mirrorSession("")
	if _, err := ca.Append(ctx, s2, mirrorEntry(10), mirrorEntry(11), mirrorEntry(12)); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dsn, s2, 3)
	var got []string
	err := cb.Read(ctx, client.Session{ID: s2.ID}, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		got = append(got, string(e.GetData()))
		return nil
	})
	if err != nil || !reflect.DeepEqual(got, localEntries(t, a, s2)) {
		t.Fatalf("B's read of a session only PostgreSQL had: %d entries, %v", len(got), err)
	}
	// An append to a session B never saw, naming its project, pulls it
	// first: its entries go after A's (not a new session replacing them).
	s3 := mirrorSession("")
	if _, err := ca.Append(ctx, s3, mirrorEntry(20), mirrorEntry(21)); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dsn, s3, 2)
	e22 := mirrorEntry(22)
	want3 := append(localEntries(t, a, s3), string(e22))
	waitLeasesReleased(t, a)
	if _, err := cb.Append(ctx, s3, e22); err != nil {
		t.Fatal(err)
	}
	if got := localEntries(t, b, s3); len(got) != 3 || got[0] != want3[0] {
		t.Fatalf("B's copy after an append to a session it never saw: %d entries", len(got))
	}
	waitRows(t, dsn, s3, 3)
	waitMirrored(t, b, 60*time.Second)
	mirrortest.SameEntries(t, "rows of a session B appended to without pulling (A's 2 then B's 1)", refLoad(t, dsn, s3), want3)
	// A copy here that differs from PostgreSQL's is refused; one that is
	// behind gets the rest.
	s4, s5 := mirrorSession(""), mirrorSession("")
	for _, x := range []client.Session{s4, s5} {
		if _, err := ca.Append(ctx, x, mirrorEntry(30), mirrorEntry(31), mirrorEntry(32)); err != nil {
			t.Fatal(err)
		}
		waitRows(t, dsn, x, 3)
	}
	if err := os.MkdirAll(filepath.Dir(b.transcript(mirrorProject, s4.ID)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.transcript(mirrorProject, s4.ID), append(mirrorEntry(33), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	a5 := localEntries(t, a, s5)
	if err := os.WriteFile(b.transcript(mirrorProject, s5.ID), []byte(a5[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := b.ctl("", "pull", s4.ID); code == 0 || !strings.Contains(errOut, "differs from PostgreSQL's copy from line 1 on") {
		t.Errorf("pull over a copy that differs: exit %d, %s", code, errOut)
	}
	if got := lines(readFile(t, b.transcript(mirrorProject, s4.ID))); len(got) != 1 {
		t.Errorf("a refused pull changed the copy here: %d lines", len(got))
	}
	waitLeasesReleased(t, a) // appending the rest of s5 here takes its lease
	b.ctlOK("main: appended (3 entries)", "pull", s5.ID)
	if got := localEntries(t, b, s5); !reflect.DeepEqual(got, a5) {
		t.Errorf("B's copy that was behind, after the pull: %d entries, want A's %d", len(got), len(a5))
	}
	// A session nobody has is still not found, and says so.
	_, errOut, code := b.ctl("", "show", "00000000-0000-4000-8000-000000000000")
	if code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("show of a session nowhere: exit %d, %s", code, errOut)
	}
}

// refAppend is the reference adapter's append (its SQL, word for word).
func refAppend(t *testing.T, conn *pgx.Conn, key layout.Key, entries []string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `INSERT INTO claude_session_store (project_key, session_id, subpath, entry, mtime)
SELECT $1, $2, $3, e, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
FROM unnest($4::jsonb[]) WITH ORDINALITY AS t(e, ord) ORDER BY ord`, key.ProjectKey, key.SessionID, key.Subpath, entries)
	if err != nil {
		t.Fatal(err)
	}
}

// TestMirrorPullReferenceAdapterRows: rows a program following the
// reference adapter's SQL wrote (jsonb: keys reordered, no exact lines
// beside them) are pulled by sessiond and read by the official SDK from
// disk as the same session written straight to disk; sessiond then goes
// on after them, and what it mirrored loads through the adapter's SQL
// deep equal to the acknowledged entries.
func TestMirrorPullReferenceAdapterRows(t *testing.T) {
	t.Parallel()
	sdk := sdkcheck.Require(t)
	_, dsn := startPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The adapter's schema, as it creates it.
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS claude_session_store (
    project_key text NOT NULL, session_id text NOT NULL, subpath text NOT NULL DEFAULT '',
    seq bigserial, entry jsonb NOT NULL, mtime bigint NOT NULL,
    PRIMARY KEY (project_key, session_id, subpath, seq));
CREATE INDEX IF NOT EXISTS claude_session_store_list_idx ON claude_session_store (project_key, session_id) WHERE subpath = ''`); err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	main := fixture(t, pullMainFixture)
	sid := sessionIDOf(t, main)
	sub := append(fixture(t, pullSubFixture), pullMeta+"\n"...)
	texts := func(b []byte) []string {
		var out []string
		for _, l := range lines(b) {
			out = append(out, string(l))
		}
		return out
	}
	mainKey := layout.Key{ProjectKey: pk, SessionID: sid}
	// Two appends, as the SDK's batches come.
	ml := texts(main)
	refAppend(t, conn, mainKey, ml[:len(ml)/2])
	refAppend(t, conn, mainKey, ml[len(ml)/2:])
	refAppend(t, conn, layout.Key{ProjectKey: pk, SessionID: sid, Subpath: pullSub}, texts(sub))

	// The same session written to disk as the CLI writes it.
	disk := t.TempDir()
	subRel := filepath.Join("projects", pk, sid, pullSub)
	if err := os.MkdirAll(filepath.Join(disk, filepath.Dir(subRel)), 0o700); err != nil {
		t.Fatal(err)
	}
	var subLines []byte
	for _, l := range lines(sub) {
		if !bytes.Contains(l, []byte(`"agent_metadata"`)) {
			subLines = append(append(subLines, l...), '\n')
		}
	}
	for path, b := range map[string][]byte{
		filepath.Join(disk, "projects", pk, sid+".jsonl"): main,
		filepath.Join(disk, subRel+".jsonl"):              subLines,
		filepath.Join(disk, subRel+".meta.json"):          []byte(`{"agentType":"Explore","toolUseId":"toolu_01pull","description":"look around"}`),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	d := mirrorDaemon(t, dsn)
	d.start()
	c := d.client()
	defer c.Close()
	d.ctlOK("main: pulled", "pull", sid, "--cwd", cwd)
	pulled := lines(readFile(t, d.transcript(pk, sid)))
	if len(pulled) != len(ml) || !bytes.HasPrefix(pulled[0], []byte(`{"type":`)) {
		t.Fatalf("pulled %d lines (want %d), the first: %.80s", len(pulled), len(ml), pulled[0])
	}
	if va, vb := sdkView(t, sdk, disk, sid, cwd), sdkView(t, sdk, d.root, sid, cwd); !reflect.DeepEqual(va, vb) {
		t.Errorf("the SDK reads the pulled session as:\n%v\nnot as the one on disk:\n%v", vb, va)
	}

	// sessiond goes on after the adapter's rows.
	s := client.Session{Cwd: cwd, ID: sid}
	more := [][]byte{mirrorEntry(1), mirrorEntry(2), mirrorEntry(3)}
	if _, err := c.Append(ctx, s, more...); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dsn, client.Session{ProjectKey: pk, ID: sid}, len(ml)+len(more))
	waitMirrored(t, d, 60*time.Second)
	want := ml
	for _, m := range more {
		want = append(want, string(m))
	}
	mirrortest.SameEntries(t, "rows after sessiond's appends", refLoad(t, dsn, client.Session{ProjectKey: pk, ID: sid}), want)
	if st := mirrorStatus(t, d); st.GetLastError() != "" || st.GetTranscripts() != 2 {
		t.Errorf("mirror status after the pull: %v", st)
	}
}

// waitLeasesReleased waits until d holds no session's lease (its writers
// retired): only then may another machine append to its sessions.
func waitLeasesReleased(t *testing.T, d *daemon) {
	t.Helper()
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		// Status stops counting a lease when the release is decided; the
		// release reaches PostgreSQL just after: wait for that too, or
		// another machine's append may still find the lease there.
		if st.GetLeases().GetHeld() == 0 && leasesInPostgres(t, d, st.GetLeases().GetMachineId()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d leases after 30 s", st.GetLeases().GetMachineId(), st.GetLeases().GetHeld())
		}
	}
}

// leasesInPostgres counts the unexpired leases machine holds in the
// daemon's mirror database.
func leasesInPostgres(t *testing.T, d *daemon, machine string) int {
	t.Helper()
	dsn := ""
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, "SESSIOND_MIRROR="); ok {
			dsn = v
		}
	}
	if dsn == "" {
		t.Fatal("the daemon has no mirror")
	}
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM sessiond_leases WHERE holder = $1 AND expires_at > now()`, machine).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseTakeoverPullsFirst: B holds a copy of a session that A then
// went on with. B's next append takes the lease over from A and first
// brings down A's later lines (main and subagent), so B's entry follows
// them, here and in PostgreSQL, each once. A copy that differs from
// PostgreSQL's instead has the append refused, saying so, and the lease
// given back at once: A goes on.
func TestLeaseTakeoverPullsFirst(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	a, b := twoMachines(t, dsn)
	s := mirrorSession("")
	sub := client.Session{ProjectKey: s.ProjectKey, ID: s.ID, Subpath: "subagents/agent-take1"}
	acked := appendN(t, a, s, 1, 2)
	subAcked := appendN(t, a, sub, 100, 1)
	waitRows(t, dsn, s, 2)
	waitRows(t, dsn, sub, 1)
	b.ctlOK("main: pulled", "pull", s.ID)

	// A goes on after B's pull: B's copy is behind.
	waitLeasesReleased(t, b)
	acked = append(acked, appendN(t, a, s, 3, 2)...)
	subAcked = append(subAcked, appendN(t, a, sub, 101, 1)...)
	waitRows(t, dsn, s, 4)
	waitRows(t, dsn, sub, 2)
	waitLeasesReleased(t, a)

	acked = append(acked, appendN(t, b, s, 5, 1)...)
	if holder, _ := leaseHolder(t, dsn, s); holder != "B" {
		t.Fatalf("lease after B's append: %s, want B", holder)
	}
	if got := localEntries(t, b, s); !reflect.DeepEqual(got, acked) {
		t.Fatalf("B's copy after taking the session over: %d entries\n%q\nwant A's 4 then B's 1:\n%q", len(got), got, acked)
	}
	if got := localEntries(t, b, sub); !reflect.DeepEqual(got, subAcked) {
		t.Fatalf("B's copy of the subagent after the takeover: %q, want %q", got, subAcked)
	}
	waitRows(t, dsn, s, 5)
	waitMirrored(t, b, 60*time.Second)
	mirrortest.SameEntries(t, "rows after B's takeover", refLoad(t, dsn, s), acked)
	mirrortest.SameEntries(t, "subagent rows after B's takeover", refLoad(t, dsn, sub), subAcked)
	if st := mirrorStatus(t, b); st.GetLastError() != "" {
		t.Errorf("B's mirror after the takeover: %v", st)
	}
	if !strings.Contains(b.Log(), "brought down what another machine wrote before taking the session over") {
		t.Errorf("B's log does not say it brought A's lines down first")
	}

	// Now A's copy is behind, and differs besides: its last line is not
	// PostgreSQL's. Its append is refused, nothing is appended, and the
	// lease goes back at once.
	waitLeasesReleased(t, b)
	a.ctlOK("", "flush", "--all")
	path := a.transcript(s.ProjectKey, s.ID)
	old := lines(readFile(t, path))
	if code := a.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("A stopped with %d", code)
	}
	changed := append(old[:len(old)-1:len(old)-1], mirrorEntry(66))
	if err := os.WriteFile(path, append(bytes.Join(changed, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	a.start()
	ca := a.client()
	defer ca.Close()
	// Once A reaches PostgreSQL (before, an append goes on locally
	// without asking: appends never wait for PostgreSQL).
	for deadline := time.Now().Add(30 * time.Second); !mirrorStatus(t, a).GetConnected(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A's mirror did not connect in 30 s")
		}
	}
	_, err := ca.Append(context.Background(), s, mirrorEntry(7))
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition ||
		!strings.Contains(st.Message(), `last written by machine "B"`) || !strings.Contains(st.Message(), "differs from PostgreSQL's copy from line 4 on") {
		t.Fatalf("A's append over a copy that differs: %v, want FailedPrecondition saying the copy differs from line 4", err)
	}
	if got := lines(readFile(t, path)); !reflect.DeepEqual(got, changed) {
		t.Errorf("the refused append changed A's copy: %d lines", len(got))
	}
	if st, err := ca.Status(context.Background()); err != nil || st.GetLeases().GetHeld() != 0 {
		t.Errorf("A kept the lease of a session it refused to append to: %v, %v", st.GetLeases(), err)
	}
	// Said by the refused append's catch-up, or by the mirror's own turn
	// at the copy, whichever came last: both say why nothing is written.
	if st := mirrorStatus(t, a); !strings.Contains(st.GetLastError(), "could not be brought here") &&
		!strings.Contains(st.GetLastError(), `the local copy differs from the rows the former holder wrote (machine "B")`) {
		t.Errorf("A's mirror does not say why it writes nothing of the session: %v", st)
	}
	// B, which has everything, goes on at once (A gave the lease back).
	acked = append(acked, appendN(t, b, s, 8, 1)...)
	waitRows(t, dsn, s, len(acked))
	mirrortest.SameEntries(t, "rows after A's refused append and B's next", refLoad(t, dsn, s), acked)
}

// twoMachines starts sessiond A and B on dsn, each giving up a session's
// lease 2 s after its last append (--idle-retire), and waits until both
// mirrors are connected: the tables exist, and appends ask for leases.
func twoMachines(t *testing.T, dsn string) (a, b *daemon) {
	t.Helper()
	a = mirrorDaemon(t, dsn, "--machine-id", "A", "--idle-retire", "2s")
	b = mirrorDaemon(t, dsn, "--machine-id", "B", "--idle-retire", "2s")
	a.start()
	b.start()
	waitMirrored(t, a, 60*time.Second)
	waitMirrored(t, b, 60*time.Second)
	return a, b
}
