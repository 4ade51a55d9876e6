package throughput

import (
	"sync/atomic"
	"testing"
)

// TestClaim checks how an --entries budget is shared out in calls of
// several entries: whole calls, then what is left, then nothing.
func TestClaim(t *testing.T) {
	var b atomic.Int64
	b.Store(120)
	var got []int
	for {
		n := claim(&b, 50)
		if n == 0 {
			break
		}
		got = append(got, n)
	}
	if len(got) != 3 || got[0] != 50 || got[1] != 50 || got[2] != 20 {
		t.Fatalf("claims %v, want [50 50 20]", got)
	}
	if n := claim(&b, 50); n != 0 {
		t.Fatalf("claim after the budget is spent: %d", n)
	}
	b.Store(3)
	if n := claim(&b, 1); n != 1 {
		t.Fatalf("claim of one: %d", n)
	}
}
