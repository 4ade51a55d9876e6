package checkall

import (
	"testing"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
)

func TestMain(m *testing.M) { benchtest.Main(m) }
