//go:build linux

package socket

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// helperEnv names the helper a re-executed test binary should run; see
// TestHelperProcess.
const helperEnv = "SESSIOND_SOCKET_TEST_HELPER"

// TestHelperProcess is not a test: it is the entry point when a test
// re-executes its own binary to play a process of its own (socket-activated
// daemon, client running as another user). It prints one line for the parent
// to check and exits without returning to the test framework.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	var out string
	switch mode {
	case "systemd":
		out = helperSystemd()
	case "health-client":
		out = helperHealthClient(os.Getenv("SOCKET_TEST_PATH"))
	default:
		out = "unknown helper " + mode
	}
	fmt.Println(out)
	os.Exit(0)
}

// helperSystemd plays a socket-activated sessiond: systemd sets LISTEN_PID to
// the service's pid, which only the child knows.
func helperSystemd() string {
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	ln, err := FromSystemd()
	for _, name := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if v, ok := os.LookupEnv(name); ok {
			return fmt.Sprintf("%s still set to %q", name, v)
		}
	}
	if err != nil {
		return "error: " + err.Error()
	}
	if ln == nil {
		return "no listener"
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(c, c)
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialTimeout(ln.Addr().Network(), ln.Addr().String(), 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "write: " + err.Error()
	}
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "ping" {
		return fmt.Sprintf("echo: got %q, %v", got, err)
	}
	if err := <-accepted; err != nil {
		return "accept: " + err.Error()
	}
	return "ok"
}

// helperHealthClient calls the health service on path and reports the
// status code and message.
func helperHealthClient(path string) string {
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "client: " + err.Error()
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	return fmt.Sprintf("uid=%d code=%s msg=%s", os.Getuid(), st.Code(), st.Message())
}

// runHelper re-executes exe as helper mode with the given extra environment
// and returns the helper's line of output.
func runHelper(t *testing.T, exe, mode string, configure func(*exec.Cmd), env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperProcess$")
	cmd.Env = append(cleanEnv(), append([]string{helperEnv + "=" + mode,
		// The race detector otherwise sleeps a second before exiting.
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, env...)...)
	cmd.Stderr = os.Stderr
	if configure != nil {
		configure(cmd)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %s: %v (output %q)", mode, err, out)
	}
	// The framework prints PASS/ok lines only if the helper returns; it
	// exits first, so the helper's line is the last non-empty one.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// cleanEnv is the test's environment without anything that would make a
// helper think it is socket-activated or under systemd.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "GORACE", helperEnv:
			continue
		}
		env = append(env, kv)
	}
	return env
}

func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// shortTempDir returns a temporary folder whose paths stay well under the
// Unix socket path limit even for long subtest names.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dir, err = filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
