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
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/testharness"
)

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
