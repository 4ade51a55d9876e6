package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/testharness"
)

// second is one start of a second sessiond beside a running one.
type second struct {
	name                string
	socket, root, state string // "" leaves sessiond its default
	want                string // what its refusal must say
	env                 []string
	activated           bool // given a listening socket as systemd does
	// freeSocket: no one serves on socket, so the refused process must
	// not leave one there.
	freeSocket bool
}

// startSecond runs a second sessiond and checks it was refused at once,
// with exit status 3, a message naming the running one's pid and want,
// and without ever serving.
func startSecond(t *testing.T, s second, holderPid int) {
	t.Helper()
	cfg := testharness.Config{Sessiond: bins.Sessiond(), Socket: s.socket, Root: s.root, StateDir: s.state,
		Args: []string{"--log-level", "debug"}, Env: s.env}
	var lf *os.File
	if s.activated {
		// What systemd's socket unit does: the socket is made and held
		// by the manager, passed as fd 3 with LISTEN_PID and LISTEN_FDS.
		path := filepath.Join(t.TempDir(), "act.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if lf, err = ln.File(); err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		cfg.Wrapper = []string{"/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`}
		cfg.ExtraFiles = []*os.File{lf}
	}
	p, err := testharness.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		p.Kill()
		t.Fatalf("%s: the second sessiond still runs after 20 s:\n%s", s.name, p.LogTail(50))
	}
	log := p.Log()
	if code := p.ExitCode(); code != 3 {
		t.Fatalf("%s: exit status %d, want 3:\n%s", s.name, code, log)
	}
	for _, want := range []string{s.want, fmt.Sprintf("pid %d", holderPid)} {
		if !strings.Contains(log, want) {
			t.Errorf("%s: the refusal does not say %q:\n%s", s.name, want, log)
		}
	}
	if strings.Contains(log, "sessiond serving") || strings.Contains(log, "recover") {
		t.Errorf("%s: the refused sessiond went on to recover or serve:\n%s", s.name, log)
	}
	if s.freeSocket {
		if _, err := os.Stat(s.socket); err == nil {
			t.Errorf("%s: the refused sessiond left a socket at %s", s.name, s.socket)
		}
	}
}

// TestSecondDaemonNeverServes: while one sessiond serves four appending
// clients, second ones are started on the same socket, on the same state
// folder, on the same root (by its path and through a link), and on the
// socket alone, three times each; every one is refused. Then the first is
// killed -9 and restarted: every acknowledged entry is in its transcript
// exactly once.
func TestSecondDaemonNeverServes(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	l := newLoad(t, 4)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { l.run(t, d, 4, 0, stop); close(done) }()
	waitAcked(t, l, 200)

	other := filepath.Join(d.dir, "other")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(other, "claude-link")
	if err := os.Symlink(d.root, link); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	seconds := []second{
		{name: "same socket and folders", socket: d.socket, root: d.root, state: d.state,
			want: "already owns the state folder " + d.state},
		{name: "another socket, same folders", socket: filepath.Join(other, "b.sock"), freeSocket: true, root: d.root, state: d.state,
			want: "already owns the state folder " + d.state},
		{name: "another socket and state folder, same root", socket: filepath.Join(other, "c.sock"), freeSocket: true, root: d.root,
			state: filepath.Join(other, "state-c"), want: "already owns the transcripts root " + d.root},
		{name: "the same root through a link", socket: filepath.Join(other, "d.sock"), freeSocket: true, root: link,
			state: filepath.Join(other, "state-d"), want: "already owns the transcripts root " + link},
		{name: "same socket, other folders", socket: d.socket, root: filepath.Join(other, "root-e"),
			state: filepath.Join(other, "state-e"), want: "already serving on " + d.socket},
		{name: "socket-activated, same folders", root: d.root, state: d.state, activated: true,
			want: "already owns the state folder " + d.state},
	}
	for round := 0; round < 3; round++ {
		for _, s := range seconds {
			s.env = env
			startSecond(t, s, d.Pid())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	before := ackedCount(l)
	waitAcked(t, l, before+100) // the first one still serves
	d.stop(syscall.SIGKILL, 10*time.Second)
	close(stop)
	<-done
	d.start()
	d.waitReplayed()
	l.verify(t, d)
	if moved, _ := filepath.Glob(filepath.Join(d.state, "journal", "*corrupt*")); len(moved) > 0 {
		t.Fatalf("log segments moved aside: %v", moved)
	}
}

// TestSecondDaemonOnDefaults: two sessionds on their embedded defaults
// (one HOME, one runtime folder, nothing set), as a user running it in a
// second terminal, or a manual run beside the socket-activated service,
// gets: the second is refused.
func TestSecondDaemonOnDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	home, rt := filepath.Join(dir, "home"), filepath.Join(dir, "rt")
	for _, p := range []string{home, rt} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "CLAUDE_CONFIG_DIR", "SESSIOND_SOCKET", "SESSIOND_ROOT", "SESSIOND_STATE_DIR":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "XDG_RUNTIME_DIR="+rt)
	first, err := testharness.Start(testharness.Config{Sessiond: bins.Sessiond(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Kill)
	// The default socket in that environment.
	sock := filepath.Join(rt, "sessiond", "sessiond.sock")
	waitStatus(t, first, sock)
	state := filepath.Join(home, ".local", "state", "sessiond")
	// The first start on a new state folder says where it is and what it
	// keeps there (a user on defaults never chose it).
	if log := first.Log(); !strings.Contains(log, "first start on this state folder") || !strings.Contains(log, filepath.Join(state, "ballast")) {
		t.Errorf("the first start on a new state folder does not announce it and its ballast:\n%s", first.LogTail(logTail))
	}
	for _, s := range []second{
		{name: "a second terminal", want: "already owns the state folder " + state},
		{name: "the socket-activated service", activated: true, want: "already owns the state folder " + state},
		{name: "another socket", socket: filepath.Join(dir, "x.sock"), freeSocket: true, want: "already owns the state folder " + state},
	} {
		s.env = env
		startSecond(t, s, first.Pid())
	}
	waitStatus(t, first, sock)
}

// waitStatus waits until p answers a status call on socket.
func waitStatus(t *testing.T, p *testharness.Daemon, socket string) {
	t.Helper()
	if err := testharness.WaitStatus(socket, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, p.LogTail(logTail))
	}
}

func ackedCount(l *load) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func waitAcked(t *testing.T, l *load, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for ackedCount(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d entries acknowledged after 60 s, want %d", ackedCount(l), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSimultaneousStarts: five sessionds started at the same instant on
// the same folders, each with its own socket: exactly one serves, the
// others exit 3.
func TestSimultaneousStarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, state := filepath.Join(dir, "claude"), filepath.Join(dir, "state")
	var ps []*testharness.Daemon
	for i := 0; i < 5; i++ {
		p, err := testharness.Start(testharness.Config{Sessiond: bins.Sessiond(), Root: root, StateDir: state,
			Socket: filepath.Join(dir, fmt.Sprintf("s%d.sock", i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		ps = append(ps, p)
	}
	var serving []*testharness.Daemon
	for _, p := range ps {
		if _, err := p.WaitServing(context.Background(), 30*time.Second); err == nil {
			serving = append(serving, p)
			continue
		}
		<-p.Exited()
		if code := p.ExitCode(); code != 3 || !strings.Contains(p.Log(), "already owns the state folder") {
			t.Errorf("a refused start exited %d:\n%s", code, p.Log())
		}
	}
	if len(serving) != 1 {
		t.Fatalf("%d of 5 simultaneous sessionds serve, want exactly 1", len(serving))
	}
}
