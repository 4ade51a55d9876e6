package testharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/client"
)

// Config describes one sessiond process.
type Config struct {
	// Sessiond is the binary to run.
	Sessiond string
	// Socket, Root and StateDir become --socket, --root and --state-dir;
	// an empty one leaves sessiond its default.
	Socket, Root, StateDir string
	// Args come after those flags, so they win (--log-level, say).
	Args []string
	// Env is the daemon's whole environment; nil inherits this process's.
	Env []string
	// LogPath, when set, is the file the daemon's output is appended to
	// (restarts on the same folder keep the earlier runs' lines);
	// otherwise the output is kept in memory. Daemon.Log returns it
	// either way.
	LogPath string
	// Wrapper, when set, runs the daemon through another program: the
	// command is Wrapper, then the binary and its arguments (a shell that
	// sets LISTEN_PID to its own pid before it execs, say).
	Wrapper []string
	// ExtraFiles are passed to the daemon from fd 3 on (a socket-activated
	// listener).
	ExtraFiles []*os.File
}

// Daemon is one running (or exited) sessiond. Its methods are safe to
// call from several goroutines.
type Daemon struct {
	cfg     Config
	cmd     *exec.Cmd
	mem     *SyncBuffer // the output, without LogPath
	started time.Time
	exited  chan struct{}
	err     error // Wait's result, once exited is closed
}

// Start starts the daemon described by cfg; it does not wait for it to
// serve (WaitServing does). The daemon is killed when this process dies,
// where the system allows it, so an interrupted run leaves none behind.
func Start(cfg Config) (*Daemon, error) {
	var args []string
	for _, f := range []struct{ flag, v string }{{"--socket", cfg.Socket}, {"--root", cfg.Root}, {"--state-dir", cfg.StateDir}} {
		if f.v != "" {
			args = append(args, f.flag, f.v)
		}
	}
	argv := append(append(append([]string(nil), cfg.Wrapper...), cfg.Sessiond), append(args, cfg.Args...)...)
	d := &Daemon{cfg: cfg, exited: make(chan struct{})}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = cfg.Env
	d.cmd.ExtraFiles = cfg.ExtraFiles
	d.cmd.SysProcAttr = sysProcAttr()
	var logFile *os.File
	if cfg.LogPath != "" {
		f, err := os.OpenFile(cfg.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(f, "---- starting sessiond at %s\n", time.Now().Format(time.RFC3339Nano))
		logFile = f
		d.cmd.Stdout, d.cmd.Stderr = f, f
	} else {
		d.mem = &SyncBuffer{}
		d.cmd.Stdout, d.cmd.Stderr = d.mem, d.mem
	}
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go func() {
		d.err = d.cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(d.exited)
	}()
	return d, nil
}

// Socket is the socket the daemon was told to listen on ("" for its
// default).
func (d *Daemon) Socket() string { return d.cfg.Socket }

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Cmd is the running command, for what the methods here do not cover
// (its ProcessState once Exited is closed, say).
func (d *Daemon) Cmd() *exec.Cmd { return d.cmd }

// Started is when the process was started.
func (d *Daemon) Started() time.Time { return d.started }

// Exited is closed once the process has exited and been waited for.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// Err is the process's exit as exec.Cmd.Wait reports it; valid once
// Exited is closed.
func (d *Daemon) Err() error {
	<-d.exited
	return d.err
}

// ExitCode waits for the exit and returns its status (-1 when a signal
// ended the process).
func (d *Daemon) ExitCode() int {
	<-d.exited
	return d.cmd.ProcessState.ExitCode()
}

// Log is what the daemon has written so far to its stdout and stderr.
func (d *Daemon) Log() string {
	if d.mem != nil {
		return d.mem.String()
	}
	b, err := os.ReadFile(d.cfg.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", d.cfg.LogPath, err)
	}
	return string(b)
}

// LogTail is the last n lines of Log, preceded by a line saying how many
// were left out. A failing test prints this rather than the whole log: a
// daemon under load logs thousands of lines, and a CI report that keeps
// only the end of the output would lose the test's own message above them.
// A race report, panic or fatal error earlier in the log is kept too
// (its first 100 lines): the race detector writes it when the race
// happens, and the test may fail much later.
func (d *Daemon) LogTail(n int) string {
	return tailLines(d.Log(), n)
}

// crashMarkers start the reports a tail must not lose.
var crashMarkers = []string{"WARNING: DATA RACE", "panic: ", "fatal error: "}

// tailLines keeps the last n lines of s, and the first 100 lines from the
// first crash marker when the marker lies before them.
func tailLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if n <= 0 {
		n = 1
	}
	if len(lines) <= n {
		return s
	}
	cut := len(lines) - n
	var b strings.Builder
	from := 0
	for i, l := range lines[:cut] {
		if slices.ContainsFunc(crashMarkers, func(m string) bool { return strings.Contains(l, m) }) {
			end := min(i+100, cut)
			if i > 0 {
				fmt.Fprintf(&b, "(%d earlier lines left out)\n", i)
			}
			b.WriteString(strings.Join(lines[i:end], "\n"))
			b.WriteString("\n")
			from = end
			break
		}
	}
	if from < cut {
		fmt.Fprintf(&b, "(%d earlier lines left out)\n", cut-from)
	}
	b.WriteString(strings.Join(lines[cut:], "\n"))
	return b.String()
}

// Signal sends sig to the daemon without waiting.
func (d *Daemon) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the process to be gone.
func (d *Daemon) Kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// Stop sends sig and waits up to within for the exit; it returns the exit
// status (-1 when a signal ended the process) and how long the exit took.
// A daemon still running after within is killed and reported as an error.
// So is one that had exited before the signal (the error wraps
// os.ErrProcessDone; the status is its exit's).
func (d *Daemon) Stop(sig syscall.Signal, within time.Duration) (int, time.Duration, error) {
	t := time.Now()
	if err := d.cmd.Process.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return d.ExitCode(), 0, fmt.Errorf("send %s: %w", unix.SignalName(sig), err)
		}
		return -1, 0, fmt.Errorf("send %s: %w", unix.SignalName(sig), err)
	}
	select {
	case <-d.exited:
	case <-time.After(within):
		d.Kill()
		return -1, time.Since(t), fmt.Errorf("sessiond did not exit within %v of %s; killed", within, unix.SignalName(sig))
	}
	return d.cmd.ProcessState.ExitCode(), time.Since(t), nil
}

// exitErr reports an exit that came before the daemon served.
func (d *Daemon) exitErr() error {
	select {
	case <-d.exited:
		return fmt.Errorf("sessiond exited while starting: %v", d.err)
	default:
		return nil
	}
}

// WaitServing waits until the daemon's health check answers SERVING and
// returns the time since the process started. It first waits until the
// socket accepts connections, so the gRPC channel never sits in its
// reconnect backoff and the time measured is the daemon's, not the
// client's.
func (d *Daemon) WaitServing(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	socket := d.cfg.Socket
	if socket == "" {
		socket = client.DefaultSocket()
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := d.exitErr(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("socket %s not accepting connections after %v", socket, timeout)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		c, err := net.DialTimeout("unix", socket, time.Second)
		if err == nil {
			c.Close()
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	cl, err := client.Dial(socket)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	health := grpc_health_v1.NewHealthClient(cl.Conn())
	for {
		if err := d.exitErr(); err != nil {
			return 0, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("health check not SERVING after %v", timeout)
		}
		cctx, cancel := context.WithTimeout(ctx, min(left, 2*time.Second))
		resp, err := health.Check(cctx, &grpc_health_v1.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return time.Since(d.started), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil && !errors.Is(cctx.Err(), context.DeadlineExceeded) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// WaitReplayed waits until the daemon, already serving, has moved every
// journal found at start into its transcript (Status replay_pending 0),
// and returns the time since the process started: it serves the entries
// from the journals meanwhile, and only then do the canonical files hold
// every acknowledged entry.
func (d *Daemon) WaitReplayed(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	cl, err := client.Dial(d.cfg.Socket, client.WithRetry(1, 0))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		st, err := cl.Status(cctx)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("status: %w", err)
		}
		if st.GetReplayPending() == 0 {
			return time.Since(d.started), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d journals still to replay after %v", st.GetReplayPending(), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SyncBuffer collects a process's output safely while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitStatus waits until a sessiond answers a Status call on socket, for
// a daemon whose socket the harness did not choose (its defaults, or one
// systemd-style activation passed it), and returns the last error when it
// does not within timeout.
func WaitStatus(socket string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := client.Dial(socket)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = c.Status(ctx)
			cancel()
			c.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no status on %s after %v: %w", socket, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
