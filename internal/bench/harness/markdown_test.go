package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpdateMarkdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "B.md")
	before := "# title\n\nhand-written intro\n\n" + mdBegin + "\nold results\n" + mdEnd + "\n\nhand-written analysis\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := true
	rep := &Report{Date: "2026-11-21T12:00:00Z", Commit: "abc1234", Duration: "10s", Machine: Machine{CPUs: 2},
		Scenarios: []*Scenario{
			{Name: "sequential", Title: "one client", Results: []*Result{
				{Label: "(c) journal", Target: "ceiling", EntriesPerSec: 6000, Latency: Latency{P50: 150}},
				{Label: "sessiond | 1 client", Target: TargetDaemon, EntriesPerSec: 2500, Latency: Latency{P50: 300}, Verified: &ok},
			}, Checks: []Check{NewCheck("p50 <= (c) + 150us", 300, 300, "us", false)}},
			{Name: "memory", Title: "memory", Table: &Table{Columns: []string{"step", "MiB"}, Rows: [][]string{{"read", "41.2"}}},
				Checks: []Check{NewCheck("growth", 60, 48, "MiB", false)}, Notes: []string{"a note"}},
			{Name: "recovery", Title: "recovery", Error: "sessiond did not start"},
		}}
	if err := UpdateMarkdown(path, rep, "bin/sessiond-bench --suite"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	for _, want := range []string{
		"# title\n\nhand-written intro\n\n" + mdBegin + "\n", // what comes before is kept
		mdEnd + "\n\nhand-written analysis\n",                // and what comes after
		"commit `abc1234`", "bin/sessiond-bench --suite",
		"| sequential | p50 <= (c) + 150us | 300 us | ≤ 300 us | PASS |",
		"| memory | growth | 60.0 MiB | ≤ 48.0 MiB | **FAIL** |",
		"| recovery | (not measured) | | | **ERROR**: sessiond did not start |",
		"| **sessiond \\| 1 client** | 2,500 |", // a | in a label does not break the row
		"| step | MiB |", "| read | 41.2 |", "- a note",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old results") {
		t.Error("the old results are still there")
	}
	// Run twice: the section is replaced, not duplicated.
	if err := UpdateMarkdown(path, rep, ""); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if n := strings.Count(string(b), "### Targets"); n != 1 {
		t.Fatalf("%d result sections after a second run", n)
	}
	os.WriteFile(path, []byte("no markers\n"), 0o644)
	if err := UpdateMarkdown(path, rep, ""); err == nil || !strings.Contains(err.Error(), "no results section") {
		t.Fatalf("file without markers: %v", err)
	}
}
