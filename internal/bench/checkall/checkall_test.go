package checkall

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestCheckAllScenario runs the check scenario at a tiny scale against a
// real sessiond: every transcript answered, every problem counted (Verify),
// the peak measured. It asserts that the figures were measured, never
// their values.
func TestCheckAllScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: t.TempDir(),
		Scale: 0.01, Verify: true, Seed: 5, Log: io.Discard}
	sc, err := Run(ctx, env)
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if sc.Name != Name {
		t.Fatalf("scenario %q", sc.Name)
	}
	if sc.Table == nil || len(sc.Table.Rows) != 2 || len(sc.Checks) != 1 {
		t.Fatalf("table %+v, checks %+v\n%s", sc.Table, sc.Checks, out.String())
	}
	for _, r := range sc.Table.Rows {
		if len(r) != len(sc.Table.Columns) {
			t.Errorf("row %q has %d cells, %d columns", r, len(r), len(sc.Table.Columns))
		}
	}
	if c := sc.Checks[0]; c.Unit != "MiB" || c.Limit != checkAllGrowth || c.Pass != (c.Value <= c.Limit) {
		t.Errorf("check %+v", c)
	}
	if !strings.Contains(sc.Table.Rows[1][5], "10 transcripts (10 damaged), 1000 problems") {
		t.Errorf("detail %q", sc.Table.Rows[1][5])
	}
}
