// Package benchtest holds what the bench packages' tests share: the
// sessiond they run against, and how long they drive their loads.
package benchtest

import (
	"os"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/testharness"
)

// Sessiond returns ./cmd/sessiond built into a temp folder, with
// ./cmd/sessionctl next to it (where the memory scenario looks for it
// first); both are built once per test binary (Main removes them).
func Sessiond(t *testing.T) string {
	t.Helper()
	bins, err := testharness.Build(testharness.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return bins.Sessiond()
}

// RunFor is how long a test drives its load: full, or a fifth of it (at
// least 100ms) with SESSIOND_TEST_SIZE=small, which make test sets. The
// tests judge no figure, only that what was measured holds together and
// what was acknowledged is on disk, so their assertions are the same at
// both sizes.
func RunFor(full time.Duration) time.Duration {
	if Small() {
		return max(full/5, 100*time.Millisecond)
	}
	return full
}

// Small reports whether make test asked for short loads
// (SESSIOND_TEST_SIZE=small).
func Small() bool { return os.Getenv("SESSIOND_TEST_SIZE") == "small" }

// Main runs a package's tests after serve (the package's MaybeServe, for
// the tests whose drivers re-execute the test binary as a helper server),
// then removes the binaries Sessiond built.
func Main(m *testing.M, serve ...func()) {
	for _, s := range serve {
		s()
	}
	code := m.Run()
	testharness.RemoveBuilt()
	os.Exit(code)
}
