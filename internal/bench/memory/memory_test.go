package memory

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestMemoryScenario runs the memory scenario at a tiny scale against a
// real sessiond and sessionctl, with its correctness checks on: every
// session listed with what was appended to it, every read equal to the
// file. It asserts that the figures were measured, never their values.
func TestMemoryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond and sessionctl")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t) // sessionctl next to it, where the scenario looks for it first
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: t.TempDir(),
		Scale: 0.01, Verify: true, Seed: 11, Log: io.Discard}
	sc, err := Run(ctx, env)
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if sc.Name != Name {
		t.Fatalf("scenario %q", sc.Name)
	}
	// 3 rows for the sessions (empty, known, active), 7 for the reads
	// (before, small Read, small show, Read, show, tail, restart).
	if sc.Table == nil || len(sc.Table.Rows) != 10 {
		t.Fatalf("table %+v\n%s", sc.Table, out.String())
	}
	for _, r := range sc.Table.Rows {
		if len(r) != len(sc.Table.Columns) {
			t.Errorf("row %q has %d cells, %d columns", r, len(r), len(sc.Table.Columns))
		}
	}
	if len(sc.Checks) != 6 {
		t.Fatalf("%d checks, want 6: %+v", len(sc.Checks), sc.Checks)
	}
	for _, c := range sc.Checks {
		if c.Limit <= 0 || c.Unit != "MiB" {
			t.Errorf("check %+v: no limit", c)
		}
		// A peak or a growth of a process that just served megabytes
		// cannot be zero; a whole process's peak cannot be under 1 MiB.
		if strings.Contains(c.Target, "peak RSS") && c.Value < 1 {
			t.Errorf("check %+v: peak not measured", c)
		}
		if c.Pass != (c.Value <= c.Limit) {
			t.Errorf("check %+v: verdict does not follow from the figures", c)
		}
	}
	// sessionctl's peaks are its own: a Go gRPC client takes more than
	// 1 MiB, and showing 2 MB cannot take less than showing 1 MB minus
	// noise; the bench process's own pages (tens of MiB after writing the
	// transcripts) must not leak into them.
	for _, c := range sc.Checks {
		if !strings.HasPrefix(c.Target, "sessionctl") {
			continue
		}
		var big, small float64
		if _, err := fmt.Sscanf(c.Note, "peak rss %f MiB, %f MiB on the small transcript", &big, &small); err != nil {
			t.Fatalf("sessionctl check note %q: %v", c.Note, err)
		}
		if small < 1 || big < 1 || math.Abs(c.Value-(big-small)) > 0.11 {
			t.Errorf("sessionctl peaks %.1f and %.1f MiB, growth %.1f", big, small, c.Value)
		}
	}
	notes := strings.Join(sc.Notes, "\n")
	for _, want := range []string{"verified: 100 sessions listed", "verified: every read", "sessionctl peak rss"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "not measured") {
		t.Errorf("sessionctl was not measured:\n%s", notes)
	}
}

// TestMemoryTranscript checks the large transcript the scenario reads: the
// exact size asked for, whole JSON lines, the largest line of the size
// asked for, and the sums the reads are verified against.
func TestMemoryTranscript(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	key := client.Session{ProjectKey: "-p", ID: harness.NewUUID(rng)}
	const size, largest, tail = 10_000_000, 2*harness.MaxEntry + 17, 4
	f, err := memWriteTranscript(root, key, size, largest, tail, rng)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != size || f.bytes != size {
		t.Fatalf("file of %d bytes (reported %d), want %d", len(b), f.bytes, size)
	}
	if sha256.Sum256(b) != f.sum {
		t.Errorf("sha256 differs")
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 4*harness.MaxEntry)
	var lines []string
	longest := 0
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			t.Fatalf("line %d (%d bytes) is not JSON", len(lines)+1, len(sc.Bytes()))
		}
		lines = append(lines, sc.Text())
		longest = max(longest, len(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if uint64(len(lines)) != f.lines || longest != largest || f.largest != largest {
		t.Errorf("%d lines (reported %d), longest %d (reported %d), want %d", len(lines), f.lines, longest, f.largest, largest)
	}
	if len(f.tail) != tail {
		t.Fatalf("%d tail sums", len(f.tail))
	}
	for i, s := range f.tail {
		if sha256.Sum256([]byte(lines[len(lines)-tail+i])) != s {
			t.Errorf("tail sum %d differs", i)
		}
	}
	for _, n := range []int{harness.MaxEntry + 1, 3 * harness.MaxEntry} {
		if e := harness.AppendEntry(nil, n, key.ID, harness.NewUUID(rng), 1); len(e) != n || !json.Valid(e) {
			t.Errorf("entry of %d bytes: got %d, valid %v", n, len(e), json.Valid(e))
		}
	}
}
