package mirror

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/pgtest"
)

// TestMirrorScenario runs the mirror scenario at a tiny scale against a
// real sessiond and a real PostgreSQL: every run stores and verifies what
// it acknowledged (the mirror's rows included: the scenario fails when
// PostgreSQL does not hold each acknowledged entry once), and every
// figure the targets read is there. It judges no figure.
func TestMirrorScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond and PostgreSQL")
	}
	pgtest.Need(t)
	bin := benchtest.Sessiond(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: t.TempDir(),
		Scale: 0.04, Duration: 500 * time.Millisecond, Verify: true, Seed: 5, Log: io.Discard}
	sc, err := Run(ctx, env)
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := map[string]*harness.Result{}
	for _, r := range sc.Results {
		got[r.ID] = r
	}
	for _, id := range []string{"p1", "p64", "d1", "d64", "m64", "d64p", "m64p"} {
		r := got[id]
		if r == nil || r.Entries == 0 || r.Verified == nil || !*r.Verified {
			t.Errorf("run %s missing, empty or not verified: %+v\n%s", id, r, out.String())
		}
	}
	if r := got["m64"]; r != nil && (r.Clients != 2 || r.Sessions != 2) {
		t.Errorf("m64 ran %d clients on %d sessions, want 2 on 2 at scale 0.04", r.Clients, r.Sessions)
	}
	checks := map[string]bool{}
	for _, c := range sc.Checks {
		checks[c.Target] = true
		if c.Value <= 0 {
			t.Errorf("target %q measured %v", c.Target, c.Value)
		}
	}
	for _, want := range []string{
		"local throughput, mirror on >= 90% of off, PostgreSQL on a CPU and disk of its own",
		"mirror rows/s >= 80% of a plain batched INSERT loop of the same data",
		"one agent's p50: sessiond <= the reference PostgreSQL store",
	} {
		if !checks[want] {
			t.Errorf("no target %q in %v", want, checks)
		}
	}
	notes := strings.Join(sc.Notes, "\n")
	for _, want := range []string{"mirror under the load:", "mirror catch-up:", "ceiling:", "rows/s"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
