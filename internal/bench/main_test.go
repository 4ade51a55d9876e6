package bench

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the (e) echo server, as the bench
// binary does (the echo driver re-executes its own binary).
func TestMain(m *testing.M) {
	MaybeServeEcho()
	os.Exit(m.Run())
}
