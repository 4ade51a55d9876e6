// Package torture is the logic of sessiond-torture: it runs the real
// sessiond binary on a folder, lets many concurrent clients append entries
// while it kills the daemon (kill -9, or SIGTERM), restarts it, and checks
// the canonical transcript files against the clients' own ledger of
// acknowledged entries. The promise under test is sessiond's: an
// acknowledged entry is never lost, duplicated or torn, whatever happens to
// the process.
//
// Every entry carries a unique key (the top-level "tk" field). A key is
// "acknowledged" when its Append returned success, "ambiguous" when its
// Append failed (the daemon died or refused while the call was in flight:
// it may or may not be stored), and it must never appear in a file if it
// was never sent. Verification reads the canonical files directly
// (<root>/projects/<key>/<sid>.jsonl): every line must be a whole JSON
// object ending in a newline, every acknowledged key must be there exactly
// once, no key may be there twice, and each key must be in the session it
// was sent to.
//
// Traffic stays on a loopback Unix socket and is bounded per cycle
// (Config.MaxCycleBytes) and per session (Config.SessionCap: a session
// whose file grows past it is verified, purged through the daemon and
// replaced by a fresh one, so verification cost and disk use stay bounded
// over hundreds of cycles).
package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/testharness"
)

// Signal modes.
const (
	// ModeKill kills the daemon with SIGKILL under load and verifies after
	// the restart (recovery must replay the journals).
	ModeKill = "kill"
	// ModeTerm sends SIGTERM under load, requires exit 0 within the
	// shutdown timeout plus slack, and verifies before any restart.
	ModeTerm = "term"
)

// Config is one torture run.
type Config struct {
	// Sessiond is the path of the sessiond binary under test.
	Sessiond string
	// Cycles is how many signal cycles to run (default 20).
	Cycles int
	// Clients is how many concurrent clients append (default 16), each on
	// its own connection.
	Clients int
	// Sessions is how many sessions the clients share (default 8); several
	// clients append to the same session at once, as parallel tool results
	// do.
	Sessions int
	// MaxEntry is the largest entry line generated (default 1 MiB).
	MaxEntry int
	// Seed makes the random choices repeatable (0: time-based). Timing
	// still varies from run to run.
	Seed uint64
	// Dir is the work folder (socket, transcripts root, state folder,
	// daemon log). Empty: a temp folder, removed after a clean run.
	Dir string
	// Mode is ModeKill (default) or ModeTerm.
	Mode string
	// ShutdownTimeout is passed to sessiond as --shutdown-timeout (default
	// 10s); in ModeTerm the daemon must exit 0 within it plus
	// ShutdownSlack (default 5s).
	ShutdownTimeout time.Duration
	ShutdownSlack   time.Duration
	// LoadMin and LoadMax bound the random moment of the signal after the
	// load starts (defaults 100ms and 1s).
	LoadMin, LoadMax time.Duration
	// MaxCycleBytes caps the entry bytes sent per cycle (default 64 MiB);
	// clients that reach it wait for the signal.
	MaxCycleBytes int64
	// SessionCap rotates a session whose canonical file is larger (default
	// 32 MiB).
	SessionCap int64
	// RecoveryKill is the probability (ModeKill only) that the restarted
	// daemon is killed again while it recovers, before it is restarted for
	// good (default 0.1; negative disables).
	RecoveryKill float64
	// FlushProb is the probability that a client operation is a Flush of
	// its session instead of an Append (default 0.02; negative: never).
	FlushProb float64
	// StartTimeout bounds a start until the health check answers SERVING
	// (default 60s).
	StartTimeout time.Duration
	// SessiondArgs are extra flags for sessiond.
	SessiondArgs []string
	// Progress receives one line per cycle (nil: none).
	Progress io.Writer
	// KeepDir keeps a temp Dir even after a clean run.
	KeepDir bool
}

func (c *Config) setDefaults() error {
	if c.Sessiond == "" {
		return errors.New("the path of the sessiond binary is required")
	}
	if fi, err := os.Stat(c.Sessiond); err != nil {
		return fmt.Errorf("sessiond binary: %w", err)
	} else if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("sessiond binary %s is not an executable file", c.Sessiond)
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.Cycles, 20)
	def(&c.Clients, 16)
	def(&c.Sessions, 8)
	def(&c.MaxEntry, 1<<20)
	defd := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defd(&c.ShutdownTimeout, 10*time.Second)
	defd(&c.ShutdownSlack, 5*time.Second)
	defd(&c.LoadMin, 100*time.Millisecond)
	defd(&c.LoadMax, time.Second)
	defd(&c.StartTimeout, time.Minute)
	if c.LoadMax < c.LoadMin {
		c.LoadMax = c.LoadMin
	}
	if c.MaxCycleBytes <= 0 {
		c.MaxCycleBytes = 64 << 20
	}
	if c.SessionCap <= 0 {
		c.SessionCap = 32 << 20
	}
	if c.RecoveryKill == 0 {
		c.RecoveryKill = 0.1
	}
	if c.FlushProb == 0 {
		c.FlushProb = 0.02
	}
	if c.MaxEntry < minEntry {
		return fmt.Errorf("max entry %d is below the smallest entry generated (%d bytes)", c.MaxEntry, minEntry)
	}
	switch c.Mode {
	case "":
		c.Mode = ModeKill
	case ModeKill, ModeTerm:
	default:
		return fmt.Errorf("mode %q: want %q or %q", c.Mode, ModeKill, ModeTerm)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}

// Durations summarises a set of measured times, in milliseconds.
type Durations struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Durations {
	if len(ds) == 0 {
		return Durations{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration {
		// Nearest rank: the smallest value with at least q of the set at
		// or below it.
		i := int(q*float64(len(s))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(s) {
			i = len(s) - 1
		}
		return s[i]
	}
	return Durations{N: len(s), P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(s[len(s)-1])}
}

// Report is the outcome of a run.
type Report struct {
	Mode     string `json:"mode"`
	Seed     uint64 `json:"seed"`
	Cycles   int    `json:"cycles"` // cycles completed
	Clients  int    `json:"clients"`
	Sessions int    `json:"sessions"`
	Dir      string `json:"dir,omitempty"` // kept for inspection

	EntriesSent   uint64 `json:"entries_sent"`
	EntriesAcked  uint64 `json:"entries_acknowledged"`
	BytesAcked    uint64 `json:"bytes_acknowledged"`
	LargestAcked  int    `json:"largest_entry_acknowledged"`
	AppendsOK     uint64 `json:"appends_ok"`
	AppendsFailed uint64 `json:"appends_failed"`
	// Ambiguous counts entries whose Append failed (in flight at the
	// signal): each may be stored at most once. Retried counts those
	// re-sent after the restart (only batches whose entries all carry a
	// uuid, which the daemon deduplicates).
	Ambiguous        uint64            `json:"entries_ambiguous"`
	AmbiguousStored  uint64            `json:"entries_ambiguous_found_stored"`
	Retried          uint64            `json:"entries_retried"`
	Flushes          uint64            `json:"flushes"`
	FlushesFailed    uint64            `json:"flushes_failed"`
	RecoveryKills    int               `json:"recovery_kills"`
	SessionsRotated  int               `json:"sessions_rotated"`
	Verifications    int               `json:"verifications"`
	LinesVerified    uint64            `json:"lines_verified"`
	BytesVerified    uint64            `json:"bytes_verified"`
	ErrorCodes       map[string]uint64 `json:"append_error_codes,omitempty"`
	Recovery         Durations         `json:"recovery"`           // process start to health SERVING
	Replay           Durations         `json:"replay,omitempty"`   // process start to every journal replayed (ModeKill)
	Shutdown         Durations         `json:"shutdown,omitempty"` // SIGTERM to exit (ModeTerm and the final stop)
	DurationSeconds  float64           `json:"duration_seconds"`
	Lost             uint64            `json:"lost"`
	Duplicated       uint64            `json:"duplicated"`
	Torn             uint64            `json:"torn_lines"`
	Unknown          uint64            `json:"unknown_lines"` // whole lines no client sent
	Misplaced        uint64            `json:"misplaced"`     // keys found in another session's file
	TempFilesLeft    uint64            `json:"temp_files_left"`
	Failures         []string          `json:"failures,omitempty"` // the first problems, in words
	failuresDropped  int
	recoveryTimes    []time.Duration
	replayTimes      []time.Duration
	shutdownTimes    []time.Duration
	ambiguousPresent map[string]bool
}

// maxFailures bounds the problems described in words.
const maxFailures = 20

func (r *Report) fail(format string, args ...any) {
	if len(r.Failures) >= maxFailures {
		r.failuresDropped++
		return
	}
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Torn == 0 && r.Unknown == 0 && r.Misplaced == 0 &&
		r.TempFilesLeft == 0 && len(r.Failures) == 0
}

// String is the human-readable report.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "sessiond torture (%s): %s\n", r.Mode, verdict)
	fmt.Fprintf(&b, "  cycles %d, clients %d, sessions %d, seed %d, %.1fs\n", r.Cycles, r.Clients, r.Sessions, r.Seed, r.DurationSeconds)
	fmt.Fprintf(&b, "  entries sent %d, acknowledged %d (%.1f MiB, largest %d bytes), ambiguous %d (found stored %d, retried %d)\n",
		r.EntriesSent, r.EntriesAcked, float64(r.BytesAcked)/(1<<20), r.LargestAcked, r.Ambiguous, r.AmbiguousStored, r.Retried)
	fmt.Fprintf(&b, "  appends ok %d, failed %d %v; flushes %d (failed %d); recovery kills %d; sessions rotated %d\n",
		r.AppendsOK, r.AppendsFailed, r.ErrorCodes, r.Flushes, r.FlushesFailed, r.RecoveryKills, r.SessionsRotated)
	fmt.Fprintf(&b, "  verified %d times: %d lines, %.1f MiB\n", r.Verifications, r.LinesVerified, float64(r.BytesVerified)/(1<<20))
	fmt.Fprintf(&b, "  recovery (start to SERVING): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Recovery.N, r.Recovery.P50, r.Recovery.P99, r.Recovery.Max)
	if r.Replay.N > 0 {
		fmt.Fprintf(&b, "  replay (start to every transcript current): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Replay.N, r.Replay.P50, r.Replay.P99, r.Replay.Max)
	}
	if r.Shutdown.N > 0 {
		fmt.Fprintf(&b, "  shutdown (SIGTERM to exit): n=%d p50 %.1fms p99 %.1fms max %.1fms\n", r.Shutdown.N, r.Shutdown.P50, r.Shutdown.P99, r.Shutdown.Max)
	}
	fmt.Fprintf(&b, "  lost %d, duplicated %d, torn lines %d, unknown lines %d, misplaced %d, temp files left %d\n",
		r.Lost, r.Duplicated, r.Torn, r.Unknown, r.Misplaced, r.TempFilesLeft)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "  FAIL: %s\n", f)
	}
	if r.failuresDropped > 0 {
		fmt.Fprintf(&b, "  ... and %d more problems\n", r.failuresDropped)
	}
	if r.Dir != "" {
		fmt.Fprintf(&b, "  work folder: %s\n", r.Dir)
	}
	return b.String()
}

// runner is one run's state.
type runner struct {
	cfg     Config
	rep     *Report
	rng     *rand.Rand
	dir     string
	socket  string
	sockDir string // a temp folder holding the socket, removed at the end
	root    string
	state   string
	logPath string
	corpus  *corpus
	ledger  *ledger
	clients []*loadClient
	cwds    []string
	nextSID int
	cur     *testharness.Daemon
	started time.Time
}

// Run runs the torture described by cfg. The report is returned even with
// an error (which means the run could not go on: the daemon would not
// start, for instance); check Report.OK for the verdict.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, started: time.Now()}
	r.rep = &Report{Mode: cfg.Mode, Seed: cfg.Seed, Clients: cfg.Clients, Sessions: cfg.Sessions,
		ErrorCodes: map[string]uint64{}, ambiguousPresent: map[string]bool{}}
	r.rng = rand.New(rand.NewPCG(cfg.Seed, 0x7f4a7c15))
	temp := false
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "sessiond-torture-")
		if err != nil {
			return r.rep, err
		}
		cfg.Dir, temp = d, true
	}
	if err := r.setup(cfg.Dir); err != nil {
		return r.rep, err
	}
	err := r.run(ctx)
	r.finish()
	if r.sockDir != "" {
		os.RemoveAll(r.sockDir)
	}
	if err != nil || !r.rep.OK() || !temp || cfg.KeepDir {
		r.rep.Dir = r.dir
	} else {
		os.RemoveAll(r.dir)
	}
	return r.rep, err
}

func (r *runner) setup(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	r.dir = abs
	r.root = filepath.Join(abs, "claude")
	r.state = filepath.Join(abs, "state")
	r.logPath = filepath.Join(abs, "sessiond.log")
	r.socket = filepath.Join(abs, "run", "s.sock")
	if len(r.socket) > 100 {
		// Unix socket paths are short; keep the socket in a short temp
		// folder next to nothing else.
		d, err := os.MkdirTemp("", "sdt-")
		if err != nil {
			return err
		}
		r.sockDir = d
		r.socket = filepath.Join(d, "s.sock")
	}
	for _, d := range []string{r.dir, r.root, r.state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	r.cwds = []string{filepath.Join(abs, "work", "alpha"), filepath.Join(abs, "work", "beta project")}
	r.corpus = newCorpus(rand.New(rand.NewPCG(r.cfg.Seed, 1)), 2*r.cfg.MaxEntry+(64<<10))
	r.ledger = newLedger()
	for i := 0; i < r.cfg.Sessions; i++ {
		if _, err := r.newSession(); err != nil {
			return err
		}
	}
	for i := 0; i < r.cfg.Clients; i++ {
		r.clients = append(r.clients, &loadClient{id: i, r: r,
			rng: rand.New(rand.NewPCG(r.cfg.Seed, uint64(1000+i)))})
	}
	return nil
}

// newSession adds a fresh session to the set the clients append to.
func (r *runner) newSession() (*session, error) {
	cwd := r.cwds[r.nextSID%len(r.cwds)]
	r.nextSID++
	id := uuid.Must(uuid.NewRandomFromReader(rngReader{r.rng})).String()
	return r.ledger.addSession(r.root, cwd, id)
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

func (r *runner) run(ctx context.Context) error {
	if err := r.start(ctx, false); err != nil {
		return err
	}
	defer func() {
		if r.cur != nil {
			r.cur.Kill()
		}
	}()
	for cycle := 1; cycle <= r.cfg.Cycles; cycle++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.cycle(ctx, cycle); err != nil {
			return fmt.Errorf("cycle %d: %w", cycle, err)
		}
		r.rep.Cycles = cycle
		if !r.rep.OK() {
			// Go on would only pile problems on top of the first ones.
			return nil
		}
	}
	// The end: a clean stop, then the files must hold everything.
	code, took, err := r.cur.Stop(syscall.SIGTERM, r.cfg.ShutdownTimeout+r.cfg.ShutdownSlack)
	r.cur = nil
	if err != nil {
		r.rep.fail("final SIGTERM: %v", err)
		return nil
	}
	r.rep.shutdownTimes = append(r.rep.shutdownTimes, took)
	if code != 0 {
		r.rep.fail("final SIGTERM: sessiond exited with code %d (log: %s)", code, r.logPath)
	}
	r.verify("final")
	return nil
}

// cycle is one round: load, signal, (restart,) verify, rotate.
func (r *runner) cycle(ctx context.Context, n int) error {
	before := r.rep.EntriesAcked
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { r.load(n, stop); close(done) }()
	wait := r.cfg.LoadMin + time.Duration(r.rng.Int64N(int64(r.cfg.LoadMax-r.cfg.LoadMin)+1))
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
	what := ""
	switch r.cfg.Mode {
	case ModeKill:
		r.cur.Kill()
		r.cur = nil
		close(stop)
		<-done
		if err := r.start(ctx, true); err != nil {
			return err
		}
		// The daemon serves the entries from its journals at once; the
		// files hold them once the replay is done.
		replayed, err := r.cur.WaitReplayed(ctx, r.cfg.StartTimeout)
		if err != nil {
			r.rep.fail("cycle %d: after kill -9 and restart: %v (log: %s)", n, err, r.logPath)
			return nil
		}
		r.rep.replayTimes = append(r.rep.replayTimes, replayed)
		what = fmt.Sprintf("kill -9 after %v, serving in %v, replayed in %v", wait.Round(time.Millisecond),
			r.rep.recoveryTimes[len(r.rep.recoveryTimes)-1].Round(time.Millisecond), replayed.Round(time.Millisecond))
		r.verify(fmt.Sprintf("cycle %d after kill -9 and restart", n))
	case ModeTerm:
		code, took, err := r.cur.Stop(syscall.SIGTERM, r.cfg.ShutdownTimeout+r.cfg.ShutdownSlack)
		r.cur = nil
		close(stop)
		<-done
		if err != nil {
			r.rep.fail("cycle %d: SIGTERM: %v", n, err)
			return nil
		}
		r.rep.shutdownTimes = append(r.rep.shutdownTimes, took)
		if code != 0 {
			r.rep.fail("cycle %d: sessiond exited with code %d after SIGTERM under load (log: %s)", n, code, r.logPath)
		}
		what = fmt.Sprintf("SIGTERM after %v, exit %d in %v", wait.Round(time.Millisecond), code, took.Round(time.Millisecond))
		// Without restart: the drain must have put everything in place.
		r.verify(fmt.Sprintf("cycle %d after SIGTERM, before restart", n))
		if !r.rep.OK() {
			return nil
		}
		if err := r.start(ctx, false); err != nil {
			return err
		}
	}
	if r.rep.OK() {
		if err := r.rotate(ctx); err != nil {
			return err
		}
	}
	r.progress("cycle %d/%d: %s; acknowledged +%d (total %d), ambiguous %d, lost %d dup %d torn %d",
		n, r.cfg.Cycles, what, r.rep.EntriesAcked-before, r.rep.EntriesAcked, r.rep.Ambiguous,
		r.rep.Lost, r.rep.Duplicated, r.rep.Torn)
	return nil
}

// start runs sessiond and waits until it serves, recording the recovery
// time. With crashy, it may first kill the daemon while it recovers.
func (r *runner) start(ctx context.Context, crashy bool) error {
	if crashy && r.cfg.RecoveryKill > 0 && r.rng.Float64() < r.cfg.RecoveryKill {
		p, err := r.spawn()
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(r.rng.IntN(40)) * time.Millisecond)
		p.Kill()
		r.rep.RecoveryKills++
	}
	p, err := r.spawn()
	if err != nil {
		return err
	}
	took, err := p.WaitServing(ctx, r.cfg.StartTimeout)
	if err != nil {
		p.Kill()
		return fmt.Errorf("sessiond did not start serving: %w (log: %s)\n%s", err, r.logPath, tail(r.logPath, 4096))
	}
	r.rep.recoveryTimes = append(r.rep.recoveryTimes, took)
	r.cur = p
	return nil
}

func (r *runner) spawn() (*testharness.Daemon, error) {
	return testharness.Start(testharness.Config{
		Sessiond: r.cfg.Sessiond, Socket: r.socket, Root: r.root, StateDir: r.state,
		Args: append([]string{"--shutdown-timeout", r.cfg.ShutdownTimeout.String(), "--log-format", "json", "--log-level", "info"},
			r.cfg.SessiondArgs...),
		LogPath: r.logPath,
	})
}

// rotate replaces sessions whose file outgrew the cap: they were just
// verified, so they are purged through the daemon and forgotten.
func (r *runner) rotate(ctx context.Context) error {
	for _, s := range r.ledger.activeSessions() {
		fi, err := os.Stat(s.path)
		if err != nil || fi.Size() <= r.cfg.SessionCap {
			continue
		}
		if err := r.purge(ctx, s); err != nil {
			r.rep.fail("rotating session %s: delete --purge through sessiond failed: %v", s.id, err)
			return nil
		}
		r.ledger.retire(s)
		for _, c := range r.clients {
			c.dropRetries(s)
		}
		if _, err := r.newSession(); err != nil {
			return err
		}
		r.rep.SessionsRotated++
	}
	return nil
}

// finish computes the summaries.
func (r *runner) finish() {
	r.rep.Recovery = summarize(r.rep.recoveryTimes)
	r.rep.Replay = summarize(r.rep.replayTimes)
	r.rep.Shutdown = summarize(r.rep.shutdownTimes)
	r.rep.DurationSeconds = time.Since(r.started).Seconds()
	r.rep.AmbiguousStored = uint64(len(r.rep.ambiguousPresent))
	if len(r.rep.ErrorCodes) == 0 {
		r.rep.ErrorCodes = nil
	}
}

// tail returns the last n bytes of the file at path, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, fi.Size()-off)
	f.ReadAt(b, off)
	return string(b)
}

// rngReader feeds a math/rand generator to uuid, so session ids follow the
// seed.
type rngReader struct{ r *rand.Rand }

func (x rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(x.r.Uint32())
	}
	return len(p), nil
}
