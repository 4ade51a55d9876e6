package harness

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// StartSelf starts this binary again as a helper server (MaybeServe picks
// the role from env), in dir, killed if the bench process dies.
func StartSelf(role, dir string, env ...string) (*exec.Cmd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s: %w", role, err)
	}
	return cmd, nil
}

// StopServer ends a server child the bench started: SIGTERM, then SIGKILL
// if it has not exited within 10 s. A non-zero exit is an error.
func StopServer(cmd *exec.Cmd, name string) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not stop on SIGTERM", name)
	}
}
