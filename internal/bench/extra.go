package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// The suite's scenarios that are not a throughput run of C clients
// (compaction cost, recovery speed, memory, listing) each live in their own
// file and register an extraDef from init. They start their own sessiond
// (they kill it, restart it or read its peak memory), so they need
// Config.Sessiond.

// Extra scenario names, in the order the suite runs them.
const (
	ScenarioCompaction = "compaction"
	ScenarioRecovery   = "recovery"
	ScenarioMemory     = "memory"
	ScenarioListing    = "listing"
)

// extraDef is one such scenario.
type extraDef struct {
	name, title string
	// run measures the scenario. It returns the scenario with its Table,
	// Checks and Notes filled; an error means the measurement could not
	// be made (or a correctness check failed), not that a target failed.
	run func(ctx context.Context, env *Env) (*Scenario, error)
}

var (
	extraMu   sync.Mutex
	extraDefs = map[string]extraDef{}
)

func registerExtra(d extraDef) {
	extraMu.Lock()
	defer extraMu.Unlock()
	if _, dup := extraDefs[d.name]; dup {
		panic("bench: scenario registered twice: " + d.name)
	}
	extraDefs[d.name] = d
}

func lookupExtra(name string) (extraDef, bool) {
	extraMu.Lock()
	defer extraMu.Unlock()
	d, ok := extraDefs[name]
	return d, ok
}

// Env is what an extra scenario gets from the tool.
type Env struct {
	// Sessiond is the sessiond binary; start it with StartDaemon.
	Sessiond     string
	SessiondArgs []string
	// Dir is the scenario's own work folder (empty, on the filesystem
	// the run measures); it is removed afterwards unless the run keeps it.
	Dir  string
	Log  io.Writer
	Seed uint64
	// Verify asks for the scenario's correctness checks (what it reads
	// back equals what it wrote); they are cheap and always wanted in
	// tests.
	Verify bool
	// Scale shrinks the scenario's sizes (1 = the sizes; tests
	// use about 0.01). A scenario states in its title or notes the sizes
	// it actually used.
	Scale float64
	// Duration is a throughput run's measured time (Config.Duration),
	// for the scenarios that make such runs.
	Duration time.Duration
	// SDKDir is the folder holding node_modules with the official SDK
	// (e2e/sdk); empty: the listing scenario cannot compare with it.
	SDKDir string
}

// Logf writes one progress line.
func (e *Env) Logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", args...)
	}
}

// Scaled returns n scaled by e.Scale, at least min.
func (e *Env) Scaled(n, min int64) int64 {
	s := e.Scale
	if s <= 0 {
		s = 1
	}
	v := int64(float64(n) * s)
	if v < min {
		v = min
	}
	return v
}

// Table is a scenario's measurements when they are not throughput runs.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// writeTable prints t with aligned columns.
func writeTable(w io.Writer, t *Table) {
	width := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		width[i] = len(c)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) && len(c) > width[i] {
				width[i] = len(c)
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			if i < len(width) {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.Columns)
	for _, r := range t.Rows {
		line(r)
	}
}

// extraNames lists the registered extra scenarios in suite order.
func extraNames() []string {
	extraMu.Lock()
	defer extraMu.Unlock()
	order := map[string]int{}
	for i, n := range AllScenarios {
		order[n] = i
	}
	var names []string
	for n := range extraDefs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	return names
}
