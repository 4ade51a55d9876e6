package testharness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuilt()
	os.Exit(code)
}

// build builds the binaries for a test, once for all of them.
func build(t *testing.T) Binaries {
	t.Helper()
	b, err := Build(BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBuildOnce: concurrent Builds share one folder holding both
// programs, which run.
func TestBuildOnce(t *testing.T) {
	var wg sync.WaitGroup
	got := make([]Binaries, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = Build(BuildOptions{}) }()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got[i] != got[0] {
			t.Fatalf("Build %d gave %q, Build 0 %q", i, got[i].Dir, got[0].Dir)
		}
	}
	for _, p := range []string{got[0].Sessiond(), got[0].Sessionctl()} {
		out, err := exec.Command(p, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), filepath.Base(p)+" ") {
			t.Errorf("%s --version: %v, %q", p, err, out)
		}
	}
}

func config(t *testing.T, bin string) Config {
	dir := t.TempDir()
	return Config{Sessiond: bin, Socket: filepath.Join(dir, "run", "s.sock"),
		Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
}

// TestDaemonLifecycle: a daemon serves, has nothing to replay, and exits 0
// on SIGTERM; its output is kept.
func TestDaemonLifecycle(t *testing.T) {
	t.Parallel()
	cfg := config(t, build(t).Sessiond())
	cfg.Args = []string{"--log-level", "debug"}
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	served, err := d.WaitServing(ctx, 30*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, d.Log())
	}
	replayed, err := d.WaitReplayed(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if served <= 0 || replayed < served {
		t.Errorf("served after %v, replayed after %v", served, replayed)
	}
	if d.Pid() <= 0 || d.Socket() != cfg.Socket {
		t.Errorf("pid %d socket %q", d.Pid(), d.Socket())
	}
	code, _, err := d.Stop(syscall.SIGTERM, 30*time.Second)
	if err != nil || code != 0 || d.ExitCode() != 0 {
		t.Fatalf("SIGTERM: exit %d, %v\n%s", code, err, d.Log())
	}
	if !strings.Contains(d.Log(), `"scheduler"`) {
		t.Errorf("the log lacks the start-up line:\n%s", d.Log())
	}
}

// TestDaemonExitsWhileStarting: a daemon that refuses its flags is
// reported at once, and its log says why.
func TestDaemonExitsWhileStarting(t *testing.T) {
	t.Parallel()
	cfg := config(t, build(t).Sessiond())
	cfg.Args = []string{"--idle-compact", "0s"}
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.WaitServing(context.Background(), 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited while starting") {
		t.Fatalf("WaitServing: %v", err)
	}
	if d.ExitCode() == 0 || d.Err() == nil || !strings.Contains(d.Log(), "--idle-compact must be greater than zero") {
		t.Fatalf("exit %d (%v), log %q", d.ExitCode(), d.Err(), d.Log())
	}
	// Stopping it now is an error, which still gives its exit.
	code, _, err := d.Stop(syscall.SIGTERM, time.Second)
	if !errors.Is(err, os.ErrProcessDone) || code != d.ExitCode() {
		t.Fatalf("Stop after the exit: %d, %v", code, err)
	}
}

// TestLogFileAppends: with LogPath each start appends to the file, after
// a line marking it.
func TestLogFileAppends(t *testing.T) {
	t.Parallel()
	cfg := config(t, build(t).Sessiond())
	cfg.LogPath = filepath.Join(t.TempDir(), "sessiond.log")
	for i := 0; i < 2; i++ {
		d, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.WaitServing(context.Background(), 30*time.Second); err != nil {
			t.Fatalf("%v\n%s", err, d.Log())
		}
		// The "serving" line may come a moment after the health check
		// first answers SERVING: wait for it before the kill.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(cfg.LogPath)
			if strings.Count(string(b), `"sessiond serving"`) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("start %d never logged that it serves:\n%s", i+1, b)
			}
		}
		d.Kill()
		if d.ExitCode() != -1 {
			t.Fatalf("exit %d after SIGKILL", d.ExitCode())
		}
	}
	b, err := os.ReadFile(cfg.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "---- starting sessiond at "); n != 2 || strings.Count(string(b), `"sessiond serving"`) != 2 {
		t.Fatalf("%d start marks in the log:\n%s", n, b)
	}
}

// TestStopKillsAfterWithin: a process that ignores the signal is killed
// once within has passed, and Stop says so. The wrapper runs in place of
// sessiond, which it never starts.
func TestStopKillsAfterWithin(t *testing.T) {
	t.Parallel()
	cfg := config(t, "ignored")
	cfg.Wrapper = []string{"/bin/sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(d.Log(), "ready") {
		time.Sleep(5 * time.Millisecond)
	}
	code, took, err := d.Stop(syscall.SIGTERM, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "within 300ms of SIGTERM; killed") || code != -1 || took < 300*time.Millisecond {
		t.Fatalf("Stop: exit %d after %v, %v; want killed after 300ms", code, took, err)
	}
	select {
	case <-d.Exited():
	default:
		t.Fatal("Stop returned before the process was gone")
	}
}

func TestTailLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"a\nb\nc\n", 3, "a\nb\nc"},
		{"a\nb\nc\n", 2, "(1 earlier lines left out)\nb\nc"},
		{"a\nb\nc\nd", 1, "(3 earlier lines left out)\nd"},
		{"", 3, ""},
		{"a\nb\n", 0, "(1 earlier lines left out)\nb"},
		// A race report before the tail is kept, with the lines after it.
		{"x\nWARNING: DATA RACE\ny\nz\nw\n", 1, "(1 earlier lines left out)\nWARNING: DATA RACE\ny\nz\nw"},
		{"x\npanic: boom\ny\nz\nw\nv\n", 1, "(1 earlier lines left out)\npanic: boom\ny\nz\nw\nv"},
		{"panic: boom\ny\n", 1, "panic: boom\ny"},
	} {
		if got := tailLines(c.in, c.n); got != c.want {
			t.Errorf("tailLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
