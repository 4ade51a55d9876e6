// Package memory measures the daemon's memory with many sessions known and
// some active, and while it reads a transcript with very large lines.
package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// The memory scenario measures two memory targets on a sessiond
// the scenario starts itself, from /proc (VmRSS, VmHWM reset through
// clear_refs) and, for sessionctl, from wait4's rusage:
//
//  1. 10,000 sessions known (canonical files written before the daemon
//     starts and indexed by it) and 1,000 of them active (a trickle of
//     appends keeps their writers open): peak RSS <= 200 MiB. The same run
//     measures, as its baselines, the daemon with an empty root and with
//     the 10,000 known but none active.
//  2. Reading a 200 MB transcript holding a few very large lines: the
//     daemon's growth while it serves Read (whole, and tail), and
//     sessionctl show's own peak RSS, each at most 2x the largest line plus
//     a constant. The constant is justified by the same figures measured
//     on a small transcript in the same run.

// Name is the scenario's name in the suite (--scenarios).
const Name = "memory"

// Title describes the scenario in the report.
const Title = "10,000 sessions known / 1,000 active; reading a 200 MB transcript"

const memMiB = 1 << 20

// memConstant is the constant the read targets allow above 2x the largest
// line. It has to hold what any Go gRPC process needs whatever it reads:
// the runtime and its heap goal slack, gRPC's transport buffers and one
// ~1 MiB read batch (internal/writer gathers 1 MiB before sending) decoded
// and re-encoded. The scenario measures that in the same run by reading a
// small transcript (daemon growth, sessionctl's whole RSS) and reports it
// next to this figure.
const memConstant = 32 * memMiB

// memSizes are the scenario's sizes after scaling.
type memSizes struct {
	known, active, projects int
	perKnown                int           // entries in each known session
	trickle                 time.Duration // how long the active sessions are kept busy
	clients                 int           // connections doing the trickle
	bigBytes                int64         // the large transcript
	largest                 int           // its largest line
	smallBytes              int64         // the small transcript (baseline)
	tail                    uint32
}

func memSizesFor(env *harness.Env) memSizes {
	sz := memSizes{
		known:      int(env.Scaled(10000, 20)),
		active:     int(env.Scaled(1000, 4)),
		perKnown:   20,
		trickle:    time.Duration(env.Scaled(int64(10*time.Second), int64(500*time.Millisecond))),
		clients:    8,
		bigBytes:   env.Scaled(200_000_000, 2_000_000),
		largest:    int(env.Scaled(8*memMiB, 64<<10)),
		smallBytes: 1 * memMiB,
		tail:       10,
	}
	sz.projects = max(1, sz.known/200)
	sz.clients = min(sz.clients, sz.active)
	return sz
}

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sz := memSizesFor(env)
	sc := &harness.Scenario{Name: Name, Table: &harness.Table{
		Columns: []string{"step", "daemon rss MiB", "daemon peak MiB", "growth MiB", "limit MiB", "detail"}}}
	sc.Title = fmt.Sprintf("%d sessions known / %d active; reading a %.0f MB transcript (largest line %.1f MiB)",
		sz.known, sz.active, float64(sz.bigBytes)/1e6, float64(sz.largest)/memMiB)
	emptyRSS, err := memSessions(ctx, env, sz, sc)
	if err != nil {
		return sc, fmt.Errorf("sessions: %w", err)
	}
	if err := memReads(ctx, env, sz, emptyRSS, sc); err != nil {
		return sc, fmt.Errorf("reads: %w", err)
	}
	return sc, nil
}
