// Package e2e runs the real sessiond and sessionctl binaries against a
// socket and folders in a temp dir: what a user would run, crashes and
// signals included.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/testharness"
)

var bins testharness.Binaries // sessiond and sessionctl, freshly built

// logTail is how many of a daemon's last log lines a failing test prints.
const logTail = 300

func TestMain(m *testing.M) {
	// The daemon under test runs with the race detector when the tests do.
	b, err := testharness.Build(testharness.BuildOptions{Race: raceEnabled})
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries failed:", err)
		os.Exit(1)
	}
	bins = b
	// Other uids run these very files (the access and trust tests), so
	// their folder is opened to them here, before any test starts. Never
	// a copy made during the tests: a file just written by this process
	// may still be open for writing in a child another parallel test is
	// forking, and executing it then fails with ETXTBSY ("text file
	// busy").
	if err := os.Chmod(b.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := childEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testharness.RemoveBuilt()
	os.Exit(code)
}

// childEnv sets what every process the tests start inherits.
//
// GORACE=atexit_sleep_ms=0 (added to a GORACE that does not set it): a
// program built with -race sleeps 1 s before it exits, by default, to let
// goroutines still running report a race. The tests run sessionctl
// hundreds of times and stop sessiond dozens of times; the sleep was most
// of the package's time. Races are still detected and reported (exit
// status 66) as they happen.
//
// GOCACHE, GOMODCACHE, GOPATH and GOENV, from go env: tests that give a
// process a fresh HOME (the README's walkthrough builds the binaries)
// keep the user's Go caches and settings rather than downloading every
// module and compiling everything again.
func childEnv() error {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return fmt.Errorf("go env: %v", err)
	}
	values := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(values) != len(names) {
		return fmt.Errorf("go env %v printed %q", names, out)
	}
	for i, name := range names {
		if _, set := os.LookupEnv(name); !set && values[i] != "" {
			os.Setenv(name, values[i])
		}
	}
	return nil
}

// daemon is one sessiond process under test: a testharness.Daemon (set
// by start) with the folders it runs on, failing the test instead of
// returning errors.
type daemon struct {
	*testharness.Daemon
	t      *testing.T
	dir    string
	socket string
	root   string
	state  string
	args   []string
	env    []string // added to the test's environment
}

func newDaemon(t *testing.T, args ...string) *daemon {
	dir := t.TempDir()
	d := &daemon{
		t: t, dir: dir,
		socket: filepath.Join(dir, "run", "s.sock"),
		root:   filepath.Join(dir, "claude"),
		state:  filepath.Join(dir, "state"),
		args:   args,
	}
	t.Cleanup(func() {
		if d.Daemon == nil {
			return
		}
		d.Kill()
		if t.Failed() {
			t.Logf("sessiond log:\n%s", d.LogTail(logTail))
		}
	})
	return d
}

// start runs sessiond and waits until it answers health checks.
func (d *daemon) start() {
	d.t.Helper()
	if err := d.startNoWait(); err != nil {
		d.t.Fatal(err)
	}
	d.waitServing()
}

func (d *daemon) startNoWait() error {
	p, err := testharness.Start(testharness.Config{
		Sessiond: bins.Sessiond(), Socket: d.socket, Root: d.root, StateDir: d.state,
		Args: append([]string{"--log-level", "debug"}, d.args...),
		Env:  append(os.Environ(), d.env...),
	})
	if err != nil {
		return err
	}
	d.Daemon = p
	return nil
}

// startRefused starts sessiond, which must exit non-zero within 30 s
// with a message holding every one of wants.
func (d *daemon) startRefused(wants ...string) {
	d.t.Helper()
	if err := d.startNoWait(); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.Exited():
	case <-time.After(30 * time.Second):
		d.t.Fatalf("sessiond started; want it refused saying %q", wants)
	}
	log := d.Log()
	for _, w := range wants {
		if d.ExitCode() == 0 || !strings.Contains(log, w) {
			d.t.Fatalf("exit %d; the refusal does not say %q:\n%s", d.ExitCode(), w, log)
		}
	}
}

func (d *daemon) waitServing() {
	d.t.Helper()
	if _, err := d.WaitServing(context.Background(), 30*time.Second); err != nil {
		d.t.Fatalf("sessiond did not start serving: %v\n%s", err, d.LogTail(logTail))
	}
}

// waitReplayed waits until the daemon, already serving, has moved every
// journal it found at start into its transcript (Status replay_pending 0):
// it serves the entries from the journals meanwhile, and only then do the
// canonical files hold every acknowledged entry.
func (d *daemon) waitReplayed() {
	d.t.Helper()
	if _, err := d.WaitReplayed(context.Background(), 60*time.Second); err != nil {
		d.t.Fatalf("%v\n%s", err, d.LogTail(logTail))
	}
}

func (d *daemon) client(opts ...client.Option) *client.Client {
	d.t.Helper()
	c, err := client.Dial(d.socket, opts...)
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

// api is the daemon's raw gRPC API, over a connection closed when the
// test ends: for requests the client package would not send.
func (d *daemon) api() sessiondv1.SessiondClient {
	c := d.client()
	d.t.Cleanup(func() { c.Close() })
	return sessiondv1.NewSessiondClient(c.Conn())
}

// stop sends sig and waits for the exit; it returns the exit code (that
// of an exit before the signal too).
func (d *daemon) stop(sig syscall.Signal, within time.Duration) int {
	d.t.Helper()
	code, _, err := d.Stop(sig, within)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		d.t.Fatal(err)
	}
	return code
}

// ctl runs sessionctl against the daemon.
func (d *daemon) ctl(stdin string, args ...string) (string, string, int) {
	d.t.Helper()
	cmd := exec.Command(bins.Sessionctl(), append([]string{"--socket", d.socket}, args...)...)
	return runCmd(d.t, cmd, stdin)
}

// ctlOK runs sessionctl without input; it must succeed and print want.
func (d *daemon) ctlOK(want string, args ...string) string {
	d.t.Helper()
	out, errOut, code := d.ctl("", args...)
	if code != 0 || !strings.Contains(out, want) {
		d.t.Fatalf("sessionctl %v: exit %d, out %q, err %q; want %q", args, code, out, errOut, want)
	}
	return out
}

// runCmd runs cmd with stdin and returns its stdout, stderr and exit
// status; a command that could not run at all fails the test.
func runCmd(t *testing.T, cmd *exec.Cmd, stdin string) (string, string, int) {
	t.Helper()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", "", 0
}

func (d *daemon) transcript(projectKey, sid string) string {
	return filepath.Join(d.root, "projects", projectKey, sid+".jsonl")
}

// recvAll receives every message of a server stream the raw API opened: a
// streamed call's error comes with its messages, not with the call.
func recvAll[T any](stream grpc.ServerStreamingClient[T], err error) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	var out []*T
	err = client.Receive(stream, func(m *T) error {
		out = append(out, m)
		return nil
	})
	return out, err
}
