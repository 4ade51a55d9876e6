package daemon

import "testing"

func TestProcs(t *testing.T) {
	for _, c := range []struct {
		def     int
		userSet bool
		want    int
	}{
		{1, false, 4},
		{2, false, 8},
		{4, false, 16},
		{8, false, 24},
		{64, false, 80},
		{2, true, 2}, // GOMAXPROCS set by the user is kept
		{64, true, 64},
		{0, false, 0}, // nonsense in, left alone
	} {
		if got := Procs(c.def, c.userSet); got != c.want {
			t.Errorf("Procs(%d, %v) = %d, want %d", c.def, c.userSet, got, c.want)
		}
	}
}
