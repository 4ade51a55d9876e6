package inprocess

import (
	"testing"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
)

// TestMain lets the test binary serve as the echo server, as the bench
// binary does (its driver re-executes its own binary).
func TestMain(m *testing.M) { benchtest.Main(m, MaybeServe) }
