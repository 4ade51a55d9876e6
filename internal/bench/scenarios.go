package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sessiond/sessiond/internal/bench/arrival"
	"github.com/sessiond/sessiond/internal/bench/checkall"
	"github.com/sessiond/sessiond/internal/bench/compaction"
	"github.com/sessiond/sessiond/internal/bench/fleet"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/listing"
	"github.com/sessiond/sessiond/internal/bench/memory"
	"github.com/sessiond/sessiond/internal/bench/mirror"
	"github.com/sessiond/sessiond/internal/bench/recovery"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// scenario is one of the suite's scenarios that are not throughput runs.
// Each starts a sessiond of its own (it kills it, restarts it or reads its
// peak memory), so it needs Config.Sessiond.
type scenario struct {
	name, title string
	// run returns the scenario with its Table, Checks and Notes filled;
	// an error means the measurement could not be made (or a correctness
	// check failed), not that a target failed.
	run func(ctx context.Context, env *harness.Env) (*harness.Scenario, error)
}

// others lists them in the order the suite runs them.
var others = []scenario{
	{fleet.Name, fleet.Title, fleet.Run},
	{arrival.Name, arrival.Title, arrival.Run},
	{compaction.Name, compaction.Title, compaction.Run},
	{recovery.Name, recovery.Title, recovery.Run},
	{memory.Name, memory.Title, memory.Run},
	{checkall.Name, checkall.Title, checkall.Run},
	{listing.Name, listing.Title, listing.Run},
	{mirror.Name, mirror.Title, mirror.Run},
}

// AllScenarios lists the suite's scenarios in the order they run.
func AllScenarios() []string {
	names := []string{throughput.ScenarioParallel, throughput.ScenarioSequential, throughput.ScenarioSessions}
	for _, x := range others {
		names = append(names, x.name)
	}
	return names
}

// runOther runs one such scenario in its own folder under dir.
func runOther(ctx context.Context, cfg Config, dir string, x scenario, seed uint64) (*harness.Scenario, error) {
	sdir := filepath.Join(dir, "extra-"+x.name)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return &harness.Scenario{Name: x.name, Title: x.title, Error: err.Error()}, err
	}
	if !cfg.Keep {
		defer os.RemoveAll(sdir)
	}
	sdk := cfg.SDKDir
	if sdk == "" {
		sdk = "e2e/sdk"
	}
	if abs, err := filepath.Abs(sdk); err == nil {
		sdk = abs
	}
	env := &harness.Env{Sessiond: cfg.Sessiond, SessiondArgs: cfg.SessiondArgs, Dir: sdir, Log: cfg.Log, Seed: seed,
		Verify: cfg.Verify, Scale: cfg.Scale, SDKDir: sdk, Duration: cfg.Duration}
	fmt.Fprintf(cfg.Log, "[%s] %s\n", x.name, x.title)
	sc, err := x.run(ctx, env)
	if sc == nil {
		sc = &harness.Scenario{}
	}
	if sc.Name == "" {
		sc.Name = x.name
	}
	if sc.Title == "" {
		sc.Title = x.title
	}
	if err != nil {
		sc.Error = err.Error()
	}
	return sc, err
}
