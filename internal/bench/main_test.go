package bench

import (
	"testing"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/inprocess"
	"github.com/sessiond/sessiond/internal/bench/throughput"
)

// TestMain lets the test binary serve as the echo and raw servers, as the
// bench binary does (their drivers re-execute their own binary).
func TestMain(m *testing.M) { benchtest.Main(m, inprocess.MaybeServe, throughput.MaybeServe) }
