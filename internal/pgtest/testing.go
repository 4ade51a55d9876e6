package pgtest

import (
	"context"
	"os"
	"testing"
	"time"
)

// Required reports whether a missing PostgreSQL fails a test instead of
// skipping it: in CI (env CI set) and under `make test`
// (SESSIOND_REQUIRE_PG=1), the tests that need it must run.
func Required() bool { return os.Getenv("CI") != "" || os.Getenv("SESSIOND_REQUIRE_PG") != "" }

// Need fails the test when the server binaries are missing and they are
// required (see Required), and skips it otherwise, saying how to install
// them either way.
func Need(t testing.TB) {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if Required() {
			t.Fatalf("%v: %s (tests needing PostgreSQL never skip in CI or under make test)", err, InstallHint)
		}
		t.Skipf("%v: %s (skipped because neither CI nor SESSIOND_REQUIRE_PG is set)", err, InstallHint)
	}
}

// Start starts a fresh server for t (see Need when the binaries are
// missing); it is killed and its temp dir removed when t ends.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	Need(t)
	if opt.Log == nil {
		opt.Log = t.Logf
	}
	s, err := New(opt)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.Kill()
		os.RemoveAll(s.dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}
