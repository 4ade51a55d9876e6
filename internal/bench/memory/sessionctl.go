package memory

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/testharness"
)

// memTimeBin returns GNU time's path, or "".
func memTimeBin() string {
	p, err := exec.LookPath("time")
	if err != nil {
		return ""
	}
	if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("GNU")) {
		return ""
	}
	return p
}

// memRunPeak runs name with args, its standard output going to out, and
// returns its peak RSS. The rusage of a child the Go runtime starts is no
// use: it forks with CLONE_VM, and exec records the parent's high-water
// mark as the child's, so ru_maxrss is at least the bench process's own
// peak. GNU time forks for real from a small process and reports the
// child's ru_maxrss; without it, /proc/<pid>/status is sampled.
func memRunPeak(ctx context.Context, out io.Writer, name string, args ...string) (int64, error) {
	var stderr bytes.Buffer
	if tb := memTimeBin(); tb != "" {
		f, err := os.CreateTemp("", "sessiond-bench-time-")
		if err != nil {
			return 0, err
		}
		f.Close()
		defer os.Remove(f.Name())
		cmd := exec.CommandContext(ctx, tb, append([]string{"-f", "%M", "-o", f.Name(), name}, args...)...)
		cmd.Stdout, cmd.Stderr = out, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(stderr.Bytes()))
		}
		b, err := os.ReadFile(f.Name())
		if err != nil {
			return 0, err
		}
		var kb int64
		if _, err := fmt.Sscan(string(b), &kb); err != nil || kb <= 0 {
			return 0, fmt.Errorf("GNU time printed %q for %s's peak rss", b, filepath.Base(name))
		}
		return kb << 10, nil
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		// VmHWM only grows, so the last sample before the exit is the
		// peak but for the final instants.
		if _, hwm, err := harness.ProcMem(cmd.Process.Pid); err == nil {
			peak = max(peak, hwm)
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(stderr.Bytes()))
			}
			return peak, nil
		case <-tick.C:
		}
	}
}

// memSessionctl finds sessionctl next to the sessiond binary (where `go
// build -o bin/ ./cmd/...` puts it), else builds it into the scenario's
// folder, which works when the tool runs from the module's source tree.
func memSessionctl(ctx context.Context, env *harness.Env) (string, error) {
	p := filepath.Join(filepath.Dir(env.Sessiond), "sessionctl")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	if err := testharness.BuildInto(ctx, env.Dir, testharness.BuildOptions{}, "sessionctl"); err != nil {
		return "", fmt.Errorf("no sessionctl next to %s, and building it failed: %w", env.Sessiond, err)
	}
	return filepath.Join(env.Dir, "sessionctl"), nil
}
