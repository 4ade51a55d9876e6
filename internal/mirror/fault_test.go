package mirror

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
	"github.com/sessiond/sessiond/internal/pgtest"
)

// TestMirrorRidesOutPostgresDown: while PostgreSQL is stopped appends go
// on, the lag grows and Status says the mirror is not connected; it
// reconnects on its own backoff, paced by its clock (a fake one here:
// nothing happens until it moves, even with the server back), and the lag
// drains to zero with every entry once.
func TestMirrorRidesOutPostgresDown(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{})
	dsn, err := pg.CreateDatabase(bg, "down")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fake := clock.NewFake(t0)
	e := newEnv(t, dsn, fake)
	k := newKey("")
	want := []string{line(0, "")}
	e.append(k, want...)
	e.waitCaughtUp(20 * time.Second)

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		l := line(i, "")
		want = append(want, l)
		e.append(k, l) // fails the test if an append waits or fails
	}
	deadline := time.Now().Add(20 * time.Second)
	var st Status
	for {
		st = e.mr.Status()
		if !st.Connected && st.EntriesBehind == 10 && st.LastError != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with PostgreSQL stopped: %+v, want disconnected, 10 behind and an error", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.BytesBehind == 0 || !st.OldestBehind.Equal(t0) {
		t.Fatalf("lag %d bytes since %v, want some bytes since %v (the fake clock's time of the appends)", st.BytesBehind, st.OldestBehind, t0)
	}

	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The server is back, but the mirror waits for its clock.
	time.Sleep(300 * time.Millisecond)
	if st := e.mr.Status(); st.Connected || st.EntriesBehind != 10 {
		t.Fatalf("the mirror reconnected without its clock moving: %+v", st)
	}
	for {
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fake.WaitArmed(wctx, 1)
		wcancel()
		fake.Advance(200 * time.Millisecond)
		st := e.mr.Status()
		if st.Connected && st.EntriesBehind == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the mirror did not catch up: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.waitCaughtUp(20 * time.Second)
	mirrortest.SameEntries(t, "after the outage", load(t, dsn, k), want)
	if st := e.mr.Status(); !st.OldestBehind.IsZero() {
		t.Fatalf("caught up, and still behind since %v", st.OldestBehind)
	}
}

const secret = "Sup3r-S3cret_pw"

// TestMirrorNeverShowsPassword: the connection string's password appears
// in no error, log line or Status, whichever way it is written, whether
// the server cannot be reached or the string cannot be parsed.
func TestMirrorNeverShowsPassword(t *testing.T) {
	dir := t.TempDir() // no server listens here
	for _, dsn := range []string{
		"postgres://sessiond:" + secret + "@/db?host=" + dir + "&port=5432&connect_timeout=1",
		"postgres://sessiond@/db?host=" + dir + "&password=" + secret,
		"host=" + dir + " user=sessiond password='" + secret + "' dbname=db",
		"host=" + dir + " user=sessiond password=" + secret + " dbname=db",
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		fake := clock.NewFake(time.Now())
		mr, err := New(Config{DSN: dsn, Logger: zap.New(core), Clock: fake, ConnectTimeout: time.Second})
		if err != nil {
			t.Fatalf("New(%q): %v", dsn, err)
		}
		if err := mr.Start(bg, emptySource{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for mr.Status().LastError == "" {
			if time.Now().After(deadline) {
				t.Fatal("no error reported for a server that is not there")
			}
			time.Sleep(10 * time.Millisecond)
		}
		mr.Close()
		st := mr.Status()
		var all strings.Builder
		all.WriteString(st.LastError + "\n" + st.Target + "\n")
		for _, e := range logs.All() {
			all.WriteString(e.Message)
			for _, f := range e.Context {
				all.WriteString(" " + f.String)
			}
			all.WriteString("\n")
		}
		if strings.Contains(all.String(), secret) {
			t.Fatalf("DSN %q: the password shows:\n%s", dsn, all.String())
		}
		if !strings.Contains(st.LastError, "postgresql") || !strings.Contains(st.Target, "sessiond") {
			t.Fatalf("status says too little: error %q, target %q", st.LastError, st.Target)
		}
	}
	for _, bad := range []string{
		"postgres://sessiond:" + secret + "@host:notaport/db",
		"host=x password=" + secret + " port=notaport",
	} {
		_, err := New(Config{DSN: bad})
		if err == nil {
			t.Fatalf("New(%q) accepted a bad connection string", bad)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the parse error shows the password: %v", err)
		}
	}
}

// emptySource holds no transcripts.
type emptySource struct{ Source }

func (emptySource) AllKeys(string, bool) ([]layout.Key, error) { return nil, nil }

// TestCheckTable: the reference adapter's identifier rule, and a length
// PostgreSQL keeps whole.
func TestCheckTable(t *testing.T) {
	for _, ok := range []string{"claude_session_store", "_x", "T1", strings.Repeat("a", maxTable)} {
		if err := CheckTable(ok); err != nil {
			t.Errorf("CheckTable(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1x", "a-b", "a b", "x;drop table y", `"q"`, "schema.t", strings.Repeat("a", maxTable+1)} {
		if err := CheckTable(bad); err == nil {
			t.Errorf("CheckTable(%q) accepted it", bad)
		}
	}
}

// TestForJSONB: \u0000 escapes and lone surrogate escapes (both refused
// by jsonb) become \ufffd; pairs and escaped backslashes are left alone.
func TestForJSONB(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x"}`:                  `{"a":"x"}`,
		`{"a":"\u0000"}`:             `{"a":"\ufffd"}`,
		`{"a":"\\u0000"}`:            `{"a":"\\u0000"}`,
		`{"a":"\\\u0000\u0000"}`:     `{"a":"\\\ufffd\ufffd"}`,
		`{"\u0000":1}`:               `{"\ufffd":1}`,
		`{"a":"\u001b[0m"}`:          `{"a":"\u001b[0m"}`,
		`{"a":"\ud83d\ude00"}`:       `{"a":"\ud83d\ude00"}`,
		`{"a":"\uD83D\uDE00"}`:       `{"a":"\uD83D\uDE00"}`,
		`{"a":"x\ud83d"}`:            `{"a":"x\ufffd"}`,
		`{"a":"\ude00y"}`:            `{"a":"\ufffdy"}`,
		`{"a":"\ud83d\u0041"}`:       `{"a":"\ufffd\u0041"}`,
		`{"a":"\ud83d\ud83d\ude00"}`: `{"a":"\ufffd\ud83d\ude00"}`,
		`{"a":"\\ud83d"}`:            `{"a":"\\ud83d"}`,
		`{"a":"\ud83d"}`:             `{"a":"\ufffd"}`,
	} {
		if got := string(forJSONB([]byte(in))); got != want {
			t.Errorf("forJSONB(%s) = %s, want %s", in, got, want)
		}
	}
	for _, l := range []string{`[1]`, `"x"`, `{"a":`, ``, "{\"a\":\"\xff\"}"} {
		if isObject([]byte(l)) {
			t.Errorf("isObject(%q) took a line that is not a JSON object", l)
		}
	}
}

// TestRedactor: the password is cut out of any text that quotes the
// connection string (pgx's own errors do not today; a driver or a
// wrapper that does must not leak it through sessiond).
func TestRedactor(t *testing.T) {
	for _, dsn := range []string{
		"postgres://sessiond:" + secret + "@db.example:5432/db",
		"postgresql://sessiond:" + strings.ReplaceAll(secret, "-", "%2D") + "@db.example/db",
		"host=db.example user=sessiond password=" + secret,
		"host=db.example user=sessiond password='" + secret + "'",
		"postgres://sessiond@db.example/db?sslmode=disable&password=" + secret,
	} {
		_, r, err := poolConfig(dsn, 1, time.Second)
		if err != nil {
			t.Fatalf("poolConfig(%q): %v", dsn, err)
		}
		for _, text := range []string{dsn, "cannot connect to `" + dsn + "`: refused", "password " + secret + " rejected"} {
			got := r.clean(text)
			if strings.Contains(got, secret) || strings.Contains(got, "S3cret") {
				t.Errorf("clean(%q) = %q: the password shows", text, got)
			}
		}
	}
	// Without a parsed password (a string that does not parse) the
	// patterns alone cut it.
	r := &redactor{}
	for _, text := range []string{"postgres://u:" + secret + "@h:x/db", "password=" + secret + " port=x"} {
		if got := r.clean(text); strings.Contains(got, secret) {
			t.Errorf("clean(%q) = %q: the password shows", text, got)
		}
	}
}

// TestBatchKeepsTheExactLine: a line whose \u0000 escape is replaced for
// jsonb keeps its exact bytes among the lines, its jsonb text beside it;
// any other line is sent once (its jsonb made from it).
func TestBatchKeepsTheExactLine(t *testing.T) {
	var b batch
	b.add([]byte(`{"a":"\u0000"}`), false)
	b.add([]byte(`{"b":1}`), true)
	b.add([]byte(`not json`), false)
	if b.rows != 2 || len(b.entries) != 2 || b.entries[0] == nil || *b.entries[0] != `{"a":"\ufffd"}` ||
		b.entries[1] != nil || string(b.lines) != `{"a":"\u0000"}`+"\n"+`{"b":1}` || b.n != 3 {
		t.Fatalf("entries %v, lines %q, rows %d, n %d", b.entries, b.lines, b.rows, b.n)
	}
	// No line differs from its jsonb: no entries at all.
	b.reset()
	b.add([]byte(`{"c":1}`), false)
	b.add([]byte(`{"d":2}`), true)
	if b.rows != 2 || b.entries != nil || string(b.lines) != `{"c":1}`+"\n"+`{"d":2}` {
		t.Fatalf("entries %v, lines %q, rows %d", b.entries, b.lines, b.rows)
	}
}
