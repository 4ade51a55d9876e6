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
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/client"
)

var bins string // folder holding the freshly built binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sessiond-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// -buildvcs=true: the binaries report the commit they were built from
	// (this machine's GOFLAGS may turn the stamp off).
	args := []string{"build", "-buildvcs=true", "-o", dir + "/"}
	if raceEnabled {
		// The daemon under test runs with the race detector too.
		args = append(args, "-race")
	}
	args = append(args, "../cmd/sessiond", "../cmd/sessionctl")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries failed:", err)
		os.Exit(1)
	}
	bins = dir
	if err := childEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
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

// syncBuffer collects a process's output safely while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is one sessiond process under test.
type daemon struct {
	t      *testing.T
	dir    string
	socket string
	root   string
	state  string
	args   []string
	env    []string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	err    error
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
		if d.cmd != nil && d.exited != nil {
			select {
			case <-d.exited:
			default:
				d.cmd.Process.Kill()
				<-d.exited
			}
		}
		if t.Failed() && d.log != nil {
			t.Logf("sessiond log:\n%s", d.log.String())
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
	args := append([]string{"--socket", d.socket, "--root", d.root, "--state-dir", d.state, "--log-level", "debug"}, d.args...)
	d.cmd = exec.Command(filepath.Join(bins, "sessiond"), args...)
	d.log = &syncBuffer{}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append(os.Environ(), d.env...)
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.exited = make(chan struct{})
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	return nil
}

func (d *daemon) waitServing() {
	d.t.Helper()
	c := d.client()
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			d.t.Fatalf("sessiond exited while starting: %v\n%s", d.err, d.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := grpc_health_v1.NewHealthClient(c.Conn()).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("sessiond did not start serving:\n%s", d.log.String())
}

// waitReplayed waits until the daemon, already serving, has moved every
// journal it found at start into its transcript (Status replay_pending 0):
// it serves the entries from the journals meanwhile, and only then do the
// canonical files hold every acknowledged entry.
func (d *daemon) waitReplayed() {
	d.t.Helper()
	c := d.client()
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := c.Status(context.Background())
		if err != nil {
			d.t.Fatal(err)
		}
		if st.GetReplayPending() == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("still %d sessions to replay after a minute\n%s", st.GetReplayPending(), d.log.String())
		}
		time.Sleep(10 * time.Millisecond)
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

// signal sends sig and waits for the exit; it returns the exit code.
func (d *daemon) stop(sig syscall.Signal, within time.Duration) int {
	d.t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(within):
		d.t.Fatalf("sessiond did not exit within %v of %v", within, sig)
	}
	return d.cmd.ProcessState.ExitCode()
}

// ctl runs sessionctl against the daemon.
func (d *daemon) ctl(stdin string, args ...string) (string, string, int) {
	d.t.Helper()
	cmd := exec.Command(filepath.Join(bins, "sessionctl"), append([]string{"--socket", d.socket}, args...)...)
	return runCmd(d.t, cmd, stdin)
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
