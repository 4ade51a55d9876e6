package arrival

import (
	"testing"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/inprocess"
)

func TestMain(m *testing.M) { benchtest.Main(m, inprocess.MaybeServe) }
