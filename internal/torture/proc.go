package torture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sessiond/sessiond/client"
)

// proc is one sessiond process.
type proc struct {
	cmd     *exec.Cmd
	log     *os.File
	started time.Time
	exited  chan struct{}
	err     error // Wait's result, once exited is closed
}

// spawn starts bin with args, its output appended to logPath.
func spawn(bin string, args []string, logPath string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "---- torture: starting sessiond at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{cmd: cmd, log: log, exited: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// terminate sends SIGTERM and waits up to within for the exit; it returns
// the exit code and how long the exit took. A process still running after
// within is killed and reported as an error.
func (p *proc) terminate(within time.Duration) (int, time.Duration, error) {
	t := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, 0, fmt.Errorf("send SIGTERM: %w", err)
	}
	select {
	case <-p.exited:
	case <-time.After(within):
		p.kill()
		return -1, time.Since(t), fmt.Errorf("sessiond did not exit within %v of SIGTERM; killed", within)
	}
	took := time.Since(t)
	return p.cmd.ProcessState.ExitCode(), took, nil
}

// waitServing waits until the daemon's health check answers SERVING and
// returns the time since the process started. It first waits until the
// socket accepts connections, so the gRPC channel never sits in its
// reconnect backoff and the time measured is the daemon's, not the
// client's.
func (p *proc) waitServing(ctx context.Context, socket string, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	exited := func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("sessiond exited while starting: %v", p.err)
		default:
			return nil
		}
	}
	for {
		if err := exited(); err != nil {
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
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	health := grpc_health_v1.NewHealthClient(conn)
	for {
		if err := exited(); err != nil {
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
			return time.Since(p.started), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil && !errors.Is(cctx.Err(), context.DeadlineExceeded) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// waitReplayed waits until the daemon, already serving, has moved every
// journal found at start into its transcript (Status replay_pending 0),
// and returns the time since the process started: only then must the
// files hold every acknowledged entry.
func (p *proc) waitReplayed(ctx context.Context, socket string, timeout time.Duration) (time.Duration, error) {
	cl, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		st, err := cl.Status(cctx)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("status: %w", err)
		}
		if st.GetReplayPending() == 0 {
			return time.Since(p.started), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d journals still to replay after %v", st.GetReplayPending(), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
