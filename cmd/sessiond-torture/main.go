// Command sessiond-torture runs the real sessiond binary under load and
// kills it (kill -9, or SIGTERM) over and over, then checks that every
// acknowledged entry is in the canonical transcript files exactly once and
// that no line is torn. It exits 0 when the run found nothing wrong, 1 when
// it found a lost, duplicated, torn or unknown entry (or the daemon
// misbehaved on a signal), and 2 when it could not run.
//
//	go build -o bin/ ./cmd/sessiond ./cmd/sessiond-torture
//	bin/sessiond-torture --sessiond bin/sessiond --cycles 100
//	bin/sessiond-torture --sessiond bin/sessiond --signal term --cycles 10 --json
//
// The logic lives in internal/torture.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/torture"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() { os.Exit(run()) }

func run() int {
	var cfg torture.Config
	var extra multiFlag
	var asJSON bool
	fs := flag.NewFlagSet("sessiond-torture", flag.ContinueOnError)
	fs.StringVar(&cfg.Sessiond, "sessiond", "", "path of the sessiond binary under test (default: sessiond next to this binary, else in PATH)")
	fs.IntVar(&cfg.Cycles, "cycles", 20, "signal cycles to run")
	fs.IntVar(&cfg.Clients, "clients", 16, "concurrent clients, each on its own connection")
	fs.IntVar(&cfg.Sessions, "sessions", 8, "sessions the clients share")
	fs.IntVar(&cfg.MaxEntry, "max-entry", 1<<20, "largest entry, in bytes (sizes are drawn from 1 byte up, mostly small)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the random choices (0: from the clock; the report prints it)")
	fs.StringVar(&cfg.Dir, "dir", "", "work folder (default: a temp folder, removed after a clean run)")
	fs.StringVar(&cfg.Mode, "signal", torture.ModeKill, "kill (kill -9, restart, verify) or term (SIGTERM, require exit 0, verify without restart)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "sessiond's --shutdown-timeout; with --signal term it must exit 0 within it plus --shutdown-slack")
	fs.DurationVar(&cfg.ShutdownSlack, "shutdown-slack", 5*time.Second, "extra time allowed for an exit after SIGTERM")
	fs.DurationVar(&cfg.LoadMin, "load-min", 100*time.Millisecond, "earliest signal after the load starts")
	fs.DurationVar(&cfg.LoadMax, "load-max", time.Second, "latest signal after the load starts")
	fs.Int64Var(&cfg.MaxCycleBytes, "max-cycle-bytes", 64<<20, "entry bytes sent per cycle at most")
	fs.Int64Var(&cfg.SessionCap, "session-cap", 32<<20, "a session whose file grows past this is verified, purged and replaced")
	fs.Float64Var(&cfg.RecoveryKill, "recovery-kill", 0.1, "probability of a second kill -9 while the restarted daemon recovers (negative: never)")
	fs.Float64Var(&cfg.FlushProb, "flush-prob", 0.02, "probability that a client operation is a Flush (negative: never)")
	fs.Var(&extra, "sessiond-arg", "extra flag for sessiond (repeatable), e.g. --sessiond-arg=--idle-compact=50ms")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress line per cycle")
	timeout := fs.Duration("timeout", 0, "stop the run after this long (0: no limit)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sessiond-torture --sessiond PATH [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sessiond-torture: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.Sessiond == "" {
		cfg.Sessiond = findSessiond()
	}
	cfg.SessiondArgs = extra
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	rep, err := torture.Run(ctx, cfg)
	if rep != nil {
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			fmt.Print(rep.String())
		}
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "sessiond-torture:", err)
		if rep != nil && !rep.OK() {
			return 1
		}
		return 2
	case !rep.OK():
		return 1
	}
	return 0
}

// findSessiond looks for sessiond next to this binary, then in PATH.
func findSessiond() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "sessiond")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("sessiond"); err == nil {
		return p
	}
	return ""
}
