package transcripttest

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// The SDK goldens: what the official TypeScript SDK (forkSession,
// getSessionInfo, renameSession...) writes for the same inputs, recorded by
// listing/testdata/gen.mjs into listing/testdata and fork/testdata, and
// compared byte for byte by the tests of those packages.

// Update is -update: regenerate the goldens in testdata/ instead of
// comparing with them, in every golden test of the package under test.
var Update = flag.Bool("update", false, "regenerate the goldens in testdata/ (the SDK's by running it, repair's from the fixtures and the current code)")

var regenerate sync.Once

// genScript is the script that asks the SDK for the goldens.
var genScript = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "listing", "testdata", "gen.mjs")
}()

// Goldens regenerates the SDK goldens (node gen.mjs, which runs the
// official SDK) once per run when -update is given.
func Goldens(t *testing.T) {
	t.Helper()
	if !*Update {
		return
	}
	regenerate.Do(func() {
		cmd := exec.Command("node", genScript, FixtureDir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node %s: %v", genScript, err)
		}
	})
}

// GoldenInput reads a golden case's input: "fixture:<name>" in the shared
// fixtures, "synthetic:<name>" in the calling package's testdata/synthetic.
func GoldenInput(t *testing.T, input string) []byte {
	t.Helper()
	var p string
	switch {
	case strings.HasPrefix(input, "fixture:"):
		p = filepath.Join(FixtureDir, strings.TrimPrefix(input, "fixture:"))
	case strings.HasPrefix(input, "synthetic:"):
		p = filepath.Join("testdata", "synthetic", strings.TrimPrefix(input, "synthetic:"))
	default:
		t.Fatalf("golden input %q", input)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("golden input %s: %v (the real transcripts from /work/shared/fixtures are needed)", input, err)
	}
	return data
}
