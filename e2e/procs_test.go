package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	sessiond "github.com/sessiond/sessiond/internal/daemon"
)

// schedulerLine is sessiond's start-up log line about its Ps.
type schedulerLine struct {
	Msg     string `json:"msg"`
	Procs   int    `json:"gomaxprocs"`
	FromEnv bool   `json:"gomaxprocs_from_env"`
}

func scheduler(t *testing.T, d *daemon) schedulerLine {
	t.Helper()
	for _, l := range bytes.Split([]byte(d.Log()), []byte("\n")) {
		var v schedulerLine
		if json.Unmarshal(l, &v) == nil && v.Msg == "scheduler" {
			return v
		}
	}
	t.Fatalf("no scheduler line in the log:\n%s", d.Log())
	return schedulerLine{}
}

// sessiond raises GOMAXPROCS above the CPU count (writers blocked in
// fdatasync hold Ps; see daemon.Procs) unless the user set it.
func TestGOMAXPROCS(t *testing.T) {
	t.Parallel()
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Fatal("GOMAXPROCS is set in the test's environment; unset it, this test sets it itself")
	}
	d := newDaemon(t)
	d.start()
	got := scheduler(t, d)
	d.stop(syscall.SIGTERM, 30*time.Second)
	// The test process has the runtime's default, as sessiond had before
	// raising it.
	want := sessiond.Procs(runtime.GOMAXPROCS(0), false)
	if got.Procs != want || got.FromEnv {
		t.Errorf("sessiond runs with %d Ps (from env: %v), want %d for a default of %d", got.Procs, got.FromEnv, want, runtime.GOMAXPROCS(0))
	}
	if want <= runtime.GOMAXPROCS(0) {
		t.Errorf("Procs(%d) = %d does not raise it", runtime.GOMAXPROCS(0), want)
	}

	d = newDaemon(t)
	d.env = []string{"GOMAXPROCS=3"}
	d.start()
	got = scheduler(t, d)
	d.stop(syscall.SIGTERM, 30*time.Second)
	if got.Procs != 3 || !got.FromEnv {
		t.Errorf("with GOMAXPROCS=3 sessiond runs with %d Ps (from env: %v), want 3 from the environment", got.Procs, got.FromEnv)
	}
}
