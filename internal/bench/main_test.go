package bench

import (
	"os"
	"testing"

	"github.com/sessiond/sessiond/internal/testharness"
)

// TestMain lets the test binary serve as the echo and raw servers, as the
// bench binary does (their drivers re-execute their own binary).
func TestMain(m *testing.M) {
	MaybeServe()
	code := m.Run()
	testharness.RemoveBuilt()
	os.Exit(code)
}
