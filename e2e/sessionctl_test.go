package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/testharness"
)

func TestSessionctlWalkthrough(t *testing.T) {
	t.Parallel()
	// No idle compaction: the test flushes by hand and checks the count.
	d := newDaemon(t, "--idle-compact", "1h")
	d.start()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	sid := uuid.NewString()
	u1, u2 := uuid.NewString(), uuid.NewString()

	out, _, code := d.ctl("", "status")
	if code != 0 || !strings.Contains(out, d.socket) || !strings.Contains(out, "open sessions") {
		t.Fatalf("status (%d):\n%s", code, out)
	}
	out, _, code = d.ctl("", "status", "--json")
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["root"] != d.root {
		t.Fatalf("status --json (%d): %s", code, out)
	}

	in := `{ "type": "user", "uuid": "` + u1 + `", "cwd": "` + cwd + `", "message": {"role":"user","content":"hello sessiond"}, "timestamp":"2026-11-21T10:00:00.000Z" }
{"type":"assistant","uuid":"` + u2 + `","parentUuid":"` + u1 + `"}

{"type":"user","uuid":"` + u1 + `"}
`
	out, errOut, code := d.ctl(in, "append", "--cwd", cwd, "--session", sid)
	if code != 0 {
		t.Fatalf("append (%d): %s %s", code, out, errOut)
	}
	if strings.Count(out, "stored") != 2 || strings.Count(out, "duplicate") != 1 || !strings.Contains(out, "now holds 2 entries") {
		t.Fatalf("append output:\n%s", out)
	}

	want := `{"type":"user","uuid":"` + u1 + `","cwd":"` + cwd + `","message":{"role":"user","content":"hello sessiond"},"timestamp":"2026-11-21T10:00:00.000Z"}` + "\n" +
		`{"type":"assistant","uuid":"` + u2 + `","parentUuid":"` + u1 + `"}` + "\n"
	out, errOut, code = d.ctl("", "show", sid) // the id alone is enough
	if code != 0 || out != want {
		t.Fatalf("show (%d) %s:\n%q\nwant\n%q", code, errOut, out, want)
	}
	out, _, code = d.ctl("", "show", sid, "--json", "--from", "1")
	if code != 0 || !strings.HasPrefix(out, `{"index":1,"entry":{"type":"assistant"`) {
		t.Fatalf("show --json: %s", out)
	}

	out, _, code = d.ctl("", "list", "--cwd", cwd)
	if code != 0 || !strings.Contains(out, sid) || !strings.Contains(out, "hello sessiond") {
		t.Fatalf("list (%d):\n%s", code, out)
	}
	out, _, code = d.ctl("", "list", "--json")
	var ls struct {
		Sessions []struct {
			Session struct{ SessionID string } `json:"session"`
			Entries uint64                     `json:"entries"`
		} `json:"sessions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Sessions) != 1 || ls.Sessions[0].Entries != 2 {
		t.Fatalf("list --json (%d): %s", code, out)
	}

	out, _, code = d.ctl("", "flush", sid)
	if code != 0 || !strings.Contains(out, "2 entries compacted") {
		t.Fatalf("flush (%d): %s", code, out)
	}
	b, err := os.ReadFile(d.transcript(pk, sid))
	if err != nil || string(b) != want {
		t.Fatalf("canonical file after flush: %v\n%s", err, b)
	}
	out, _, code = d.ctl("", "flush", "--all")
	if code != 0 || !strings.Contains(out, "nothing to flush") {
		t.Fatalf("flush --all (%d): %s", code, out)
	}

	// tail -f prints the last entry, then each new one.
	tail := exec.Command(bins.Sessionctl(), "--socket", d.socket, "tail", "-f", "-n", "1", sid)
	pipe, _ := tail.StdoutPipe()
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer tail.Process.Kill()
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expectLine := func(sub string) {
		t.Helper()
		select {
		case l := <-lines:
			if !strings.Contains(l, sub) {
				t.Fatalf("tail -f printed %q, want it to contain %q", l, sub)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("tail -f printed nothing (want %q)", sub)
		}
	}
	expectLine(u2)
	u3 := uuid.NewString()
	if _, errOut, code := d.ctl(`{"type":"user","uuid":"`+u3+`"}`, "append", "--cwd", cwd, "--session", sid); code != 0 {
		t.Fatal(errOut)
	}
	expectLine(u3)
	tail.Process.Signal(os.Interrupt)
	tail.Wait()

	// Bad inputs get a clear message and a non-zero exit.
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{`{"a":`, []string{"append", "--cwd", cwd, "--session", sid}, "stdin line 1: entry is not valid JSON"},
		{`[1]`, []string{"append", "--cwd", cwd, "--session", sid}, "not an object"},
		{`{}`, []string{"append", "--session", sid}, "--cwd"},
		{`{}`, []string{"append", "--cwd", cwd, "--session", "Not/a-uuid"}, "want a UUID such as"},
		{``, []string{"show", uuid.NewString()}, "not found"},
		{``, []string{"show", "../etc/passwd"}, "is not a transcript under sessiond's root"},
		{``, []string{"show", sid, "--subpath", "../escape"}, "--subpath: subpath \"../escape\" has a \"..\" component"},
		{``, []string{"flush"}, "session id or --all"},
	} {
		_, errOut, code := d.ctl(c.stdin, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("sessionctl %v: exit %d, stderr %q; want non-zero and %q", c.args, code, errOut, c.want)
		}
	}

	// The same id in a second project makes the id alone ambiguous.
	other := t.TempDir()
	if _, errOut, code := d.ctl(`{"type":"user"}`, "append", "--cwd", other, "--session", sid); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := d.ctl("", "show", sid); code == 0 || !strings.Contains(errOut, "several projects") {
		t.Fatalf("ambiguous show: %d %s", code, errOut)
	}
	if out, _, code := d.ctl("", "show", sid, "--cwd", other); code != 0 || out != "{\"type\":\"user\"}\n" {
		t.Fatalf("show --cwd: %d %q", code, out)
	}
	if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

func TestGoClient(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	cwd := t.TempDir()
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	sub := client.Session{Cwd: cwd, ID: s.ID, Subpath: "subagents/agent-a1"}

	resp, err := c.Append(ctx, s, []byte(`{"type":"user","uuid":"`+uuid.NewString()+`"}`), []byte(`{"type":"summary"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetEntries() != 2 || resp.GetResults()[1].GetIndex() != 1 {
		t.Fatalf("append: %v", resp)
	}
	if _, err := c.Append(ctx, sub, []byte(`{"type":"user","isSidechain":true}`)); err != nil {
		t.Fatal(err)
	}
	// Follow sees entries appended afterwards.
	fctx, cancel := context.WithCancel(ctx)
	got := make(chan *sessiondv1.Entry, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(fctx, s, client.ReadOptions{From: 2}, func(e *sessiondv1.Entry) error { got <- e; return nil })
	}()
	if _, err := c.Append(ctx, s, []byte(`{"type":"user","n":3}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.GetIndex() != 2 || string(e.GetData()) != `{"type":"user","n":3}` {
			t.Fatalf("followed %v", e)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("follow got nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow: %v", err)
	}
	var n int
	if err := c.Read(ctx, sub, client.ReadOptions{}, func(*sessiondv1.Entry) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("read subagent: %d %v", n, err)
	}
	info, err := c.Info(ctx, s)
	if err != nil || info.GetEntries() != 3 {
		t.Fatalf("info: %v %v", info, err)
	}
	if _, err := c.Flush(ctx, sub); err != nil {
		t.Fatal(err)
	}
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	if b, err := os.ReadFile(filepath.Join(d.root, "projects", pk, s.ID, "subagents", "agent-a1.jsonl")); err != nil || string(b) != "{\"type\":\"user\",\"isSidechain\":true}\n" {
		t.Fatalf("subagent file: %v %q", err, b)
	}
	st, err := c.Status(ctx)
	if err != nil || st.GetEntriesStored() != 4 || st.GetJournalSyncs() == 0 {
		t.Fatalf("status: %v %v", st, err)
	}
	_, err = c.Append(ctx, client.Session{Cwd: cwd, ID: s.ID, Subpath: "/abs"}, []byte(`{}`))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("absolute subpath: %v", err)
	}
	// A lone surrogate escape is valid JSON the CLI writes: stored as
	// sent, byte for byte.
	if _, err = c.Append(ctx, s, []byte(`{"a":"\ud83d"}`)); err != nil {
		t.Fatalf("lone surrogate refused: %v", err)
	}
	var last []byte
	if err := c.Read(ctx, s, client.ReadOptions{Tail: 1}, func(e *sessiondv1.Entry) error { last = e.GetData(); return nil }); err != nil || string(last) != `{"a":"\ud83d"}` {
		t.Fatalf("lone surrogate read back as %q, %v", last, err)
	}
	big := make([]byte, 33<<20)
	copy(big, `{"a":"`)
	for i := 6; i < len(big)-2; i++ {
		big[i] = 'x'
	}
	copy(big[len(big)-2:], `"}`)
	_, err = c.Append(ctx, s, big)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized entry: %v", err)
	}
}

func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	hc, err := grpc_health_v1.NewHealthClient(c.Conn()).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "sessiond.v1.Sessiond"})
	if err != nil || hc.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	stream, err := rpb.NewServerReflectionClient(c.Conn()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "sessiond.v1.Sessiond") {
		t.Fatalf("reflection lists %v", names)
	}
	stream.CloseSend()
}

func TestSecondDaemonAndStaleSocket(t *testing.T) {
	t.Parallel()
	a := newDaemon(t)
	a.start()
	b := newDaemon(t)
	b.socket = a.socket
	if err := b.startNoWait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("second daemon did not refuse to start")
	}
	if b.ExitCode() == 0 || !strings.Contains(b.Log(), "already serving") {
		t.Fatalf("second daemon: exit %d\n%s", b.ExitCode(), b.LogTail(logTail))
	}
	// After a kill -9 the socket file is stale: the next daemon removes it.
	a.stop(syscall.SIGKILL, 10*time.Second)
	if _, err := os.Stat(a.socket); err != nil {
		t.Fatalf("expected a stale socket file after kill -9: %v", err)
	}
	c := newDaemon(t)
	c.socket = a.socket
	c.start()
	fi, err := os.Stat(c.socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	di, err := os.Stat(filepath.Dir(c.socket))
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket folder mode: %v %v", di.Mode(), err)
	}
	c.stop(syscall.SIGTERM, 30*time.Second)
}

// TestSystemdProtocol: sd_notify READY once serving and STOPPING on
// SIGTERM, and socket activation with a listener passed as fd 3.
func TestSystemdProtocol(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	notify := filepath.Join(d.dir, "notify.sock")
	nconn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nconn.Close()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: d.socket + ".act", Net: "unix"})
	if err != nil {
		os.MkdirAll(filepath.Dir(d.socket), 0o700)
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: d.socket + ".act", Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
	}
	lf, _ := ln.File()
	ln.SetUnlinkOnClose(false) // the daemon now owns the socket
	ln.Close()
	// LISTEN_PID must be the daemon's own pid: a shell sets it and execs.
	d.Daemon, err = testharness.Start(testharness.Config{
		Sessiond: bins.Sessiond(), Socket: d.socket, Root: d.root, StateDir: d.state,
		Wrapper:    []string{"/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`},
		Env:        append(os.Environ(), "NOTIFY_SOCKET="+notify),
		ExtraFiles: []*os.File{lf},
	})
	if err != nil {
		t.Fatal(err)
	}
	lf.Close()

	readNotify := func() string {
		nconn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		n, _, err := nconn.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("no sd_notify message: %v\n%s", err, d.LogTail(logTail))
		}
		return string(buf[:n])
	}
	if m := readNotify(); !strings.Contains(m, "READY=1") {
		t.Fatalf("first notify %q", m)
	}
	// It serves on the activated socket, not on --socket.
	c, err := client.Dial(d.socket + ".act")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("status over the activated socket: %v", err)
	}
	if _, err := os.Stat(d.socket); err == nil {
		t.Fatal("a socket-activated daemon must not open its own socket")
	}
	d.Signal(syscall.SIGTERM)
	if m := readNotify(); !strings.Contains(m, "STOPPING=1") {
		t.Fatalf("notify on SIGTERM %q", m)
	}
	if code := d.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestDamagedJournalAtStart: a write-ahead log segment whose middle is
// damaged is not guessed at: sessiond starts, keeps a copy aside, cuts the
// segment at the damage, says so in status, and the sessions work again.
func TestDamagedJournalAtStart(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "1h")
	d.start()
	c := d.client()
	cwd := t.TempDir()
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	for i := 0; i < 3; i++ {
		if _, err := c.Append(context.Background(), s, []byte(`{"type":"user","marker":"entry-`+string(rune('a'+i))+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	d.stop(syscall.SIGKILL, 10*time.Second)
	segs, _ := filepath.Glob(filepath.Join(d.state, "journal", "*.wal"))
	var jpath string
	var b []byte
	for _, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "entry-a") {
			jpath, b = p, data
		}
	}
	if jpath == "" {
		t.Fatalf("entry not found in the log's segments %v", segs)
	}
	b[strings.Index(string(b), "entry-a")] ^= 0xff
	if err := os.WriteFile(jpath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// An acknowledged entry is gone: sessiond refuses to start over it,
	// changing nothing, and says how to go on.
	d.startRefused("1 acknowledged entries lost", "--accept-journal-loss")
	if kept, _ := filepath.Glob(jpath + ".corrupt-*"); len(kept) != 0 {
		t.Fatalf("the refused start changed the state folder: %v", kept)
	}
	d.args = append(d.args, "--accept-journal-loss")
	d.start()
	c = d.client()
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The damage (with where its copy was kept) and the loss it caused.
	if all := strings.Join(st.GetRecoveryErrors(), "\n"); len(st.GetRecoveryErrors()) != 2 || !strings.Contains(all, ".corrupt-") || !strings.Contains(all, "1 acknowledged entries lost") {
		t.Fatalf("status should report the damaged segment, where its copy was kept, and the entry lost: %v", st.GetRecoveryErrors())
	}
	kept, _ := filepath.Glob(jpath + ".corrupt-*")
	if len(kept) != 1 {
		t.Fatalf("damaged segment not kept aside: %v", kept)
	}
	if out, _, _ := d.ctl("", "status"); !strings.Contains(out, "RECOVERY FAILED") {
		t.Fatalf("sessionctl status does not show the failure:\n%s", out)
	}
	if _, err := c.Append(context.Background(), s, []byte(`{"type":"user"}`)); err != nil {
		t.Fatalf("session unusable after the damage: %v", err)
	}
	if !strings.Contains(d.Log(), "damaged") {
		t.Fatal("the log does not mention the damage")
	}
}

// TestReadBigLinesOverGRPC: the daemon sends lines of 256 KiB and more
// straight from its read buffer, which it then reuses; that is only right
// if each message is fully encoded before Send returns. Big and small
// lines, from the canonical file and from the journal, must come back
// byte for byte through the real daemon.
func TestReadBigLinesOverGRPC(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	s := client.Session{Cwd: t.TempDir(), ID: uuid.NewString()}
	var want []string
	add := func(n int, fill string) {
		line := `{"type":"user","uuid":"` + uuid.NewString() + `","pad":"` + strings.Repeat(fill, n) + `"}`
		want = append(want, line)
		if _, err := c.Append(ctx, s, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	for i, fill := range []string{"a", "b", "c", "d"} {
		add(300<<10+i, fill)
		add(50, fill)
		add(2<<20, fill)
		add(1000, fill)
	}
	if _, err := c.Flush(ctx, s); err != nil { // the above now come from the canonical file
		t.Fatal(err)
	}
	for _, fill := range []string{"e", "f"} {
		add(1<<20, fill)
		add(10, fill)
	}
	var got []string
	err := c.Read(ctx, s, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		got = append(got, string(e.GetData()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("entry %d: %d bytes starting %.40q, want %d bytes starting %.40q", i, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
}

// TestSessionctlUsageErrors: a mistake in the command line exits 2 with a
// message, whichever part of it is wrong, so that a script never reads a
// typo as a result (check's 1 means "damaged"). Nothing needs a daemon:
// the mistake is found before sessionctl dials.
func TestSessionctlUsageErrors(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"check"}, "give a session id or --all"},
		{[]string{"check", "--all", uuid.NewString()}, "give a session id or --all"},
		{[]string{"check", uuid.NewString(), uuid.NewString()}, "accepts at most 1 arg"},
		{[]string{"show"}, "accepts 1 arg"},
		{[]string{"list", "--limit", "-1"}, "--limit"},
		{[]string{"list", "--no-such-flag"}, "unknown flag"},
		{[]string{"no-such-command"}, `unknown command "no-such-command"`},
		{[]string{"flush"}, "give a session id or --all"},
		{[]string{"tag", uuid.NewString(), " "}, "the tag is empty; to remove a session's tag, use tag --clear"},
		{[]string{"flush", "--all", "--cwd", "/tmp"}, "--all flushes every session of every project"},
	} {
		cmd := exec.Command(bins.Sessionctl(), append([]string{"--socket", sock}, tc.args...)...)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("sessionctl %v: %v, stderr %q; want exit 2 saying %q", tc.args, err, errOut.String(), tc.msg)
		}
	}
	// Without arguments it shows its help, successfully.
	out, err := exec.Command(bins.Sessionctl(), "--socket", sock).Output()
	if err != nil || !bytes.Contains(out, []byte("Available Commands")) {
		t.Errorf("sessionctl alone: %v, %q", err, out)
	}
}

// TestSessiondRefusesNonPositiveFlags: a size or duration of zero or less
// is refused with the flag's name, and nothing starts (quietly using the
// default instead would hide the mistake).
func TestSessiondRefusesNonPositiveFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range [][]string{
		{"--max-entry-bytes", "-5"}, {"--max-message-bytes", "0"}, {"--idle-compact", "-1s"},
		{"--idle-retire", "0s"}, {"--shutdown-timeout", "-3s"}, {"--min-compact-bytes", "0"},
		{"--journal-retention-size", "0"},
		// 0 is a valid retention (keep nothing); less is not.
		{"--journal-retention", "-1h", "must not be negative"},
		{"--commit-delay", "-1ms", "must not be negative"},
		{"--compact-within", "0s"},
		{"--trash-retention", "0s"},
		{"--lease-ttl", "0s"},
		{"--machine-id", "a b", `"a b" is refused`},
		{"--mirror-pace", "-1s", "-1s: give a duration from 0 (none) to 1m"},
	} {
		want := " must be greater than zero"
		if len(tc) > 2 {
			want, tc = " "+tc[2], tc[:2]
		}
		dir := t.TempDir()
		sock := filepath.Join(dir, "s.sock")
		cmd := exec.Command(bins.Sessiond(), append([]string{"--socket", sock,
			"--root", filepath.Join(dir, "root"), "--state-dir", filepath.Join(dir, "state")}, tc...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(string(out), tc[0]+want) {
			t.Errorf("sessiond %v: %v, %q; want a refusal naming %s", tc, err, out, tc[0])
		}
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sessiond %v left a socket: %v", tc, err)
		}
	}
}

// TestVersions: sessiond --version, sessionctl --version and sessionctl
// version name the commit the binaries were built from, and version also
// asks the running daemon.
func TestVersions(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the tests run from a checkout): %v", err)
	}
	commit := "(commit " + string(head[:12])
	out, err := exec.Command(bins.Sessiond(), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sessiond ") || !strings.Contains(string(out), commit) {
		t.Errorf("sessiond --version = %q, %v; want the commit %s", out, err, commit)
	}
	d := newDaemon(t)
	d.start()
	out2, _, code := d.ctl("", "--version")
	if code != 0 || !strings.HasPrefix(out2, "sessionctl ") || !strings.Contains(out2, commit) {
		t.Errorf("sessionctl --version = %q (exit %d); want the commit", out2, code)
	}
	out3, _, code := d.ctl("", "version")
	if code != 0 || strings.Count(out3, commit) != 2 || !strings.Contains(out3, "sessiond   ") {
		t.Errorf("sessionctl version = %q (exit %d); want both programs with the commit", out3, code)
	}
}

// TestStatusShowsOperations: while a long check runs, Status lists it with
// how far it is (what sessionctl status prints, and what the --progress
// bar follows), under the id the caller gave it; it is gone once done.
func TestStatusShowsOperations(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	// Enough transcripts on disk that checking them all takes a while.
	proj := filepath.Join(d.root, "projects", "-ops")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	line := `{"type":"user","uuid":"%s","parentUuid":null,"message":{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}}` + "\n"
	for i := 0; i < 1500; i++ {
		var b strings.Builder
		for j := 0; j < 20; j++ {
			fmt.Fprintf(&b, line, uuid.NewString())
		}
		if err := os.WriteFile(filepath.Join(proj, uuid.NewString()+".jsonl"), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.start()
	c := d.client()
	defer c.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), progress.MetadataKey, "my-check")
	done := make(chan error, 1)
	go func() {
		done <- c.CheckAll(ctx, client.Session{ProjectKey: "-ops"}, func(*sessiondv1.CheckResponse) error { return nil })
	}()
	var seen []*sessiondv1.Operation
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
			st, err := c.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range st.GetOperations() {
				if op.GetId() == "my-check" {
					seen = append(seen, op)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if len(seen) == 0 {
		t.Fatal("Status never listed the running check")
	}
	first, last := seen[0], seen[len(seen)-1]
	if first.GetKind() != "check" || first.GetUnit() != "transcripts" || first.GetTotal() != 1500 || last.GetDone() < first.GetDone() || last.GetDone() > 1500 {
		t.Fatalf("operation seen as %v ... %v", first, last)
	}
	st, _ := c.Status(context.Background())
	for _, op := range st.GetOperations() {
		if op.GetId() == "my-check" {
			t.Fatalf("the check is still listed after it returned: %v", op)
		}
	}
}
