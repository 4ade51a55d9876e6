package compaction

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestCompactionScenario runs the compaction scenario at a tiny scale
// against a real sessiond and checks what it reports against the files and
// the daemon's own counters. No figure is compared with its target.
func TestCompactionScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	env := &harness.Env{Sessiond: bin, Dir: t.TempDir(), Log: io.Discard, Seed: 11, Verify: true, Scale: 0.01}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, sc, err := compactionRun(ctx, env)
	if err != nil {
		t.Fatalf("compaction scenario: %v", err)
	}

	l := res.Life
	const lifeN = compLifeEntries / 100
	if l.Entries != lifeN || l.Appended != lifeN*(compEntrySize+1) || l.Appends != lifeN/compLifeBatch {
		t.Errorf("life: %d entries, %d bytes, %d appends", l.Entries, l.Appended, l.Appends)
	}
	// The daemon's counters agree with what was appended: the journal got
	// every entry (its counter leaves out the newline), and the final
	// file was written by a compaction at least once.
	if l.Stored != l.Entries || l.JournalBytes != l.Entries*compEntrySize {
		t.Errorf("life: Status says %d stored, %d journal bytes, for %d entries", l.Stored, l.JournalBytes, l.Entries)
	}
	if l.Compactions == 0 || l.CompactedBytes < l.Appended {
		t.Errorf("life: %d compactions wrote %d bytes, %d appended", l.Compactions, l.CompactedBytes, l.Appended)
	}
	// The process figures were read: the journal alone is a write of every
	// appended byte, and the client got at least one answer per append.
	if l.WChar < l.Appended || l.FileBytes() < l.Appended || l.SocketBytes < l.Appends*10 {
		t.Errorf("life: wchar %d (files %d, socket %d) for %d bytes appended in %d calls",
			l.WChar, l.FileBytes(), l.SocketBytes, l.Appended, l.Appends)
	}
	if lat := l.Latency; !(lat.P50 > 0 && lat.P50 <= lat.P99 && lat.P99 <= lat.Max) {
		t.Errorf("life: latencies %+v", lat)
	}

	o := res.One
	if o.SessionBytes < uint64(env.Scaled(compBigSession, 0)) || o.TailEntries < 16 {
		t.Errorf("one: session of %d bytes, tail of %d entries", o.SessionBytes, o.TailEntries)
	}
	for name, xs := range map[string][]float64{"flush": o.Flush, "copy rw": o.CopyRW, "copy cfr": o.CopyCFR, "replace": o.CopyCFRReplace} {
		if len(xs) != compRounds {
			t.Errorf("one: %d %s timings, want %d", len(xs), name, compRounds)
		}
		for _, v := range xs {
			if v <= 0 {
				t.Errorf("one: %s timing %v", name, v)
			}
		}
	}
	for i := range o.CopyCFR {
		if o.CopyCFRReplace[i] < o.CopyCFR[i] {
			t.Errorf("round %d: copy+sync+rename %v shorter than its copy+sync %v", i, o.CopyCFRReplace[i], o.CopyCFR[i])
		}
	}
	large := res.Idle.Large
	if want := o.SessionBytes + compRounds*o.TailBytes + large.Appended; res.FinalBytes != want || large.SessionBytes != o.SessionBytes+compRounds*o.TailBytes {
		t.Errorf("session of %d bytes at the end (%d before the trickle), want %d", res.FinalBytes, large.SessionBytes, want)
	}
	// The trickle: every turn appended, and the compactions it caused were
	// counted and written (at this scale the large session is below the
	// idle floor too, so its first pause compacts it).
	small := res.Idle.Small
	if small.Turns != compSmallTurns || small.Appended != uint64(compSmallTurns*compSmallTurn*(compEntrySize+1)) || small.SessionBytes < compSmallSession-compEntrySize {
		t.Errorf("small trickle: %+v", small)
	}
	if large.Turns < 1 || large.Turns > compLargeMaxTurns || large.Appended != uint64(large.Turns*compLargeTurn*(compEntrySize+1)) {
		t.Errorf("large trickle: %+v", large)
	}
	for _, tr := range []trickleResult{small, large} {
		if tr.Compactions == 0 || tr.CompactedBytes < tr.SessionBytes || tr.FileBytes < tr.CompactedBytes {
			t.Errorf("trickle into %d bytes: %d compactions wrote %d bytes, %d written to files", tr.SessionBytes, tr.Compactions, tr.CompactedBytes, tr.FileBytes)
		}
	}

	// Independently of the scenario's own verify: the canonical file holds
	// every entry, in whole 1 KiB lines, and the baselines left no copy.
	if n := benchtest.CheckLines(t, res.Path, compEntrySize); n != res.FinalEntries {
		t.Errorf("%s holds %d entries, %d appended", res.Path, n, res.FinalEntries)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(res.Path), ".bench-copy-*"))
	if len(left) != 0 {
		t.Errorf("copies left behind: %v", left)
	}
	if fi, err := os.Stat(res.Path); err != nil || uint64(fi.Size()) != res.FinalBytes {
		t.Errorf("stat %s: %v", res.Path, err)
	}

	if len(sc.Checks) != 2 || sc.Checks[0].Limit != 3 || sc.Checks[1].Limit != 2 {
		t.Fatalf("checks %+v", sc.Checks)
	}
	for _, c := range sc.Checks {
		if c.Value <= 0 || c.Note == "" {
			t.Errorf("check not computed: %+v", c)
		}
	}
	if sc.Table == nil || len(sc.Table.Rows) != 21 {
		t.Fatalf("table: %+v", sc.Table)
	}
	var out strings.Builder
	harness.WriteScenario(&out, sc)
	for _, want := range []string{"life: written to files", "one: Flush = one compaction", "target life: written to files <= 3x appended"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
