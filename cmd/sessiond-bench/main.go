// Command sessiond-bench measures sessiond under load, next to the
// baselines it is judged against, measured in the same run on the same
// disk. See internal/bench and BENCHMARKS.md.
//
//	sessiond-bench --sessiond bin/sessiond --suite          # every scenario and its targets
//	sessiond-bench --clients 64 --sessions 1 --size 1KiB --duration 10s --baselines
//	sessiond-bench --socket $SESSIOND_SOCKET --size dist:agent --entries 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/bench"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/inprocess"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

func main() {
	// The bench re-executes itself as the (e)/(f) echo server and the (g)
	// raw server.
	inprocess.MaybeServe()
	throughput.MaybeServe()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sessiond-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg bench.Config
	var jsonOut bool
	var markdown string
	var scenarios, sessiondArgs string
	flag.StringVar(&cfg.Socket, "socket", "", "socket of a running sessiond (default: $SESSIOND_SOCKET, else sessiond's default)")
	flag.StringVar(&cfg.Sessiond, "sessiond", "", "sessiond binary to start on a temp folder instead of using a running one")
	flag.StringVar(&sessiondArgs, "sessiond-args", "", "extra flags for the started sessiond, space-separated")
	flag.StringVar(&cfg.Dir, "dir", "", "work folder (default: a temp folder; next to sessiond's state folder when using a running one)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the work folder, and the sessions written to a running sessiond")
	flag.StringVar(&cfg.Target, "target", harness.TargetDaemon, "single run: daemon, inproc (internal/writer in-process), inproc-daemon (internal/daemon in-process, over gRPC), ceiling, naive, nosync, echo (gRPC alone), echo-sync (gRPC + fdatasync per request) or raw-sync (a plain socket + fdatasync per request, no gRPC)")
	flag.IntVar(&cfg.Clients, "clients", 64, "concurrent clients (C)")
	flag.IntVar(&cfg.Sessions, "sessions", 1, "sessions the clients write to (S); client i writes to session i mod S")
	flag.StringVar(&cfg.Size, "size", "1KiB", "entry size: bytes (200..1MiB, e.g. 1KiB) or dist:agent")
	flag.BoolVar(&cfg.Baselines, "baselines", true, "single run: also measure (a) O_APPEND+fsync, (b) O_APPEND and (c) the journal alone")
	flag.BoolVar(&cfg.Suite, "suite", false, "run the suite's scenarios and print each target's PASS/FAIL")
	flag.StringVar(&scenarios, "scenarios", "", "with --suite: comma-separated subset of "+strings.Join(bench.AllScenarios(), ","))
	flag.BoolVar(&cfg.InProc, "inproc", false, "with --suite: add an in-process internal/writer run next to each sessiond run")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measurement time per run")
	flag.Int64Var(&cfg.Entries, "entries", 0, "measured entries per run, instead of --duration")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: time-based)")
	flag.BoolVar(&cfg.Verify, "verify", false, "after each run, check the files hold exactly the acknowledged entries")
	flag.IntVar(&cfg.MaxConns, "conns", 0, "cap on gRPC connections to sessiond (0: one per client)")
	flag.IntVar(&cfg.Batch, "batch", 1, "single run of --target daemon or inproc-daemon with --baselines=false: entries per Append call (latency is per call)")
	flag.BoolVar(&cfg.UnaryAppend, "unary", false, "the Go client sends each Append as a unary call instead of on its AppendStream streams")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the bench process over each in-process run (--target inproc or inproc-daemon, or --suite --inproc)")
	flag.Float64Var(&cfg.Scale, "scale", 1, "with --suite: shrink every scenario's sizes: the client counts of parallel64 and sessions1000, the fleets' sessions and seconds, the compaction, recovery, memory and listing scenarios' data (1: the full sizes; tests use about 0.01)")
	flag.StringVar(&cfg.SDKDir, "sdk-dir", "e2e/sdk", "folder whose node_modules holds the official TypeScript SDK (listing scenario)")
	flag.StringVar(&markdown, "markdown", "", "rewrite the results section of this markdown file (BENCHMARKS.md) with the report")
	flag.BoolVar(&jsonOut, "json", false, "print the report as JSON instead of tables")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if scenarios != "" {
		cfg.Scenarios = strings.Split(scenarios, ",")
	}
	if sessiondArgs != "" {
		cfg.SessiondArgs = strings.Fields(sessiondArgs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := os.Stdout
	var tables io.Writer = out
	if jsonOut {
		tables = nil
	}
	commit := bench.GitCommit(".")
	if !jsonOut {
		fmt.Fprintf(out, "sessiond-bench %s  commit %s\n", time.Now().Format(time.RFC3339), commit)
	}
	rep, err := bench.Run(ctx, cfg, tables)
	if rep != nil {
		rep.Commit = commit
		if jsonOut {
			if jerr := harness.WriteJSON(out, rep); jerr != nil {
				return jerr
			}
		} else {
			fmt.Fprintln(out)
			harness.WriteHeader(out, rep)
		}
	}
	if rep != nil && markdown != "" && err == nil {
		if merr := harness.UpdateMarkdown(markdown, rep, commandLine()); merr != nil {
			return merr
		}
		fmt.Fprintf(os.Stderr, "wrote the results into %s\n", markdown)
	}
	if err != nil {
		return err
	}
	return rep.Failed()
}

// commandLine is how the tool was run, for the report (the binary as
// named on the command line, the flags as given).
func commandLine() string {
	return strings.Join(os.Args, " ")
}
