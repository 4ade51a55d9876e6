package transcript

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The SDK goldens: what the official TypeScript SDK (forkSession,
// getSessionInfo...) writes for the same inputs, recorded by
// testdata/gen.mjs and compared byte for byte by the fork and summary
// tests.

// -update regenerates the goldens. Other golden tests of the package share
// the flag, so it is defined here only when no other file defines it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "regenerate the goldens in testdata/")
	}
}

var regenerate sync.Once

// goldens regenerates the SDK goldens in testdata/fork and testdata/summary
// (node testdata/gen.mjs, which runs the official SDK) once per run when
// -update is given.
func goldens(t *testing.T) {
	t.Helper()
	if f := flag.Lookup("update"); f == nil || f.Value.String() != "true" {
		return
	}
	regenerate.Do(func() {
		cmd := exec.Command("node", filepath.Join("testdata", "gen.mjs"), fixtureDir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node testdata/gen.mjs: %v", err)
		}
	})
}

// goldenInput reads a golden case's input: "fixture:<name>" in the shared
// fixtures, "synthetic:<name>" in testdata/<kind>/synthetic.
func goldenInput(t *testing.T, kind, input string) []byte {
	t.Helper()
	var p string
	switch {
	case strings.HasPrefix(input, "fixture:"):
		p = filepath.Join(fixtureDir, strings.TrimPrefix(input, "fixture:"))
	case strings.HasPrefix(input, "synthetic:"):
		p = filepath.Join("testdata", kind, "synthetic", strings.TrimPrefix(input, "synthetic:"))
	default:
		t.Fatalf("golden input %q", input)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("golden input %s: %v (the real transcripts from /work/shared/fixtures are needed)", input, err)
	}
	return data
}
