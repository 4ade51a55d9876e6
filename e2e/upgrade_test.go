package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
)

// TestUpgradeFromPerSessionJournals starts this sessiond on a state
// folder written by a release that kept one journal per transcript
// (testdata/legacy: made by that release, killed with entries still in
// its journals: a session with compacted lines and three pending entries
// and a title, a session never compacted, and a subagent transcript).
// The upgrade loses nothing and duplicates nothing: every entry is in its
// transcript once, in order, the old journals are gone, and a second
// start finds nothing left to do.
func TestUpgradeFromPerSessionJournals(t *testing.T) {
	d := newDaemon(t)
	if err := os.CopyFS(d.dir, os.DirFS("testdata/legacy")); err != nil {
		t.Fatal(err)
	}
	// testdata/legacy holds root/ and state/; the daemon's folders are
	// claude/ and state/.
	if err := os.Rename(filepath.Join(d.dir, "root"), d.root); err != nil {
		t.Fatal(err)
	}
	const project = "-work-legacy"
	a, b := "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	want := map[string][]string{
		filepath.Join(project, a+".jsonl"):                       {"compacted 0", "compacted 1", "compacted 2", "pending 3", "pending 4", "pending 5", "legacy pending"},
		filepath.Join(project, b+".jsonl"):                       {"b 0", "b 1"},
		filepath.Join(project, b, "subagents", "agent-x1.jsonl"): {`"sub"`},
	}
	check := func(when string) {
		t.Helper()
		for rel, parts := range want {
			data, err := os.ReadFile(filepath.Join(d.root, "projects", rel))
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			if len(lines) != len(parts) {
				t.Fatalf("%s: %s has %d lines, want %d:\n%s", when, rel, len(lines), len(parts), data)
			}
			for i, p := range parts {
				if !strings.Contains(lines[i], p) {
					t.Fatalf("%s: %s line %d is %s, want it to hold %q", when, rel, i+1, lines[i], p)
				}
			}
		}
		var left []string
		filepath.WalkDir(filepath.Join(d.state, "journal"), func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				left = append(left, p)
			}
			return nil
		})
		if len(left) > 0 {
			t.Fatalf("%s: old journals left: %v", when, left)
		}
	}
	d.start()
	d.waitReplayed()
	c := d.client()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.RecoveryErrors) > 0 {
		t.Fatalf("recovery errors after the upgrade: %v", st.RecoveryErrors)
	}
	check("after the upgrade")
	if code := d.stop(syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	d.start()
	d.waitReplayed()
	check("after a second start")
	// The session takes new entries after the imported ones.
	if _, err := d.client().Append(context.Background(), client.Session{ProjectKey: project, ID: b}, []byte(`{"type":"user","uuid":"bbbbbbbb-0000-4000-8000-000000000009","parentUuid":null,"sessionId":"`+b+`","message":{"role":"user","content":"b after"}}`)); err != nil {
		t.Fatal(err)
	}
	if code := d.stop(syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	want[filepath.Join(project, b+".jsonl")] = []string{"b 0", "b 1", "b after"}
	check("after an append")
}
