package bench

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the echo and raw servers, as the
// bench binary does (their drivers re-execute their own binary).
func TestMain(m *testing.M) {
	MaybeServe()
	code := m.Run()
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	os.Exit(code)
}
