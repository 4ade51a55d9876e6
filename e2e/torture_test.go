package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/torture"
)

// tortureEnv reads a positive integer from the environment, or def.
func tortureEnv(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// testLogWriter sends each progress line to the test log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runTorture runs the torture logic against the freshly built sessiond and
// fails the test on any lost, duplicated, torn or unknown entry.
func runTorture(t *testing.T, cfg torture.Config) *torture.Report {
	t.Helper()
	cfg.Sessiond = bins.Sessiond()
	cfg.Dir = t.TempDir()
	cfg.Progress = testLogWriter{t}
	if s := os.Getenv("SESSIOND_TORTURE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SESSIOND_TORTURE_SEED=%q: %v", s, err)
		}
		cfg.Seed = seed
	}
	// Stop in time to report before the test binary's own timeout.
	ctx, cancel := context.WithCancel(context.Background())
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-30*time.Second))
	}
	defer cancel()
	rep, err := torture.Run(ctx, cfg)
	if rep != nil {
		t.Logf("\n%s", rep.String())
		if js, jerr := json.Marshal(rep); jerr == nil {
			t.Logf("report: %s", js)
		}
	}
	if err != nil {
		t.Fatalf("torture run failed: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("sessiond broke its promise; reproduce with SESSIOND_TORTURE_SEED=%d (work folder %s)", rep.Seed, cfg.Dir)
	}
	if rep.EntriesAcked == 0 {
		t.Fatal("no entry was acknowledged: the load did not run")
	}
	return rep
}

// tortureShort is the suite's load: small enough for the race detector
// on two cores, with entries still up to 1 MiB.
func tortureShort(mode string, cycles int) torture.Config {
	return torture.Config{
		Mode:          mode,
		Cycles:        cycles,
		Clients:       12,
		Sessions:      6,
		MaxEntry:      1 << 20,
		LoadMin:       150 * time.Millisecond,
		LoadMax:       600 * time.Millisecond,
		MaxCycleBytes: 4 << 20,
		SessionCap:    2 << 20,
		// The race detector slows the daemon down; the drain still has
		// to fit.
		ShutdownTimeout: 15 * time.Second,
		ShutdownSlack:   10 * time.Second,
	}
}

// TestTortureKill9 kills sessiond with SIGKILL at random moments while
// concurrent clients append entries of 1 byte to 1 MiB (mixed with and
// without uuid, batches of 1-5, random flushes), restarts it (sometimes
// killing it again while it recovers), and checks the canonical files
// against the clients' log of acknowledged entries after every restart.
// SESSIOND_TORTURE_CYCLES (default 20) sets the number of cycles; hundreds
// need a longer test timeout, e.g.
//
//	SESSIOND_TORTURE_CYCLES=500 go test -run TestTortureKill9 -timeout 2h ./e2e/
//
// SESSIOND_TORTURE_SEED replays a run's random choices.
func TestTortureKill9(t *testing.T) {
	t.Parallel()
	n := tortureEnv(t, "SESSIOND_TORTURE_CYCLES", 20)
	cfg := tortureShort(torture.ModeKill, n)
	// Entries reach their transcripts within 300 ms instead of 30 s, so
	// the kills land in automatic compactions too (the one right after
	// an append's answer, and the timer's), not only in flushes and size
	// compactions.
	cfg.SessiondArgs = []string{"--compact-within", "300ms"}
	rep := runTorture(t, cfg)
	if rep.Cycles < n {
		t.Fatalf("only %d of %d cycles ran", rep.Cycles, n)
	}
}

// TestTortureSigterm sends SIGTERM under the same load: sessiond must exit
// 0 within its shutdown timeout (plus slack) and every acknowledged entry
// must be in the canonical files before any restart.
// SESSIOND_TORTURE_TERM_CYCLES (default 3) sets the number of cycles.
func TestTortureSigterm(t *testing.T) {
	t.Parallel()
	n := tortureEnv(t, "SESSIOND_TORTURE_TERM_CYCLES", 3)
	rep := runTorture(t, tortureShort(torture.ModeTerm, n))
	if rep.Cycles < n {
		t.Fatalf("only %d of %d cycles ran", rep.Cycles, n)
	}
}
