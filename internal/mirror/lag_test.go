package mirror

import (
	"testing"
	"time"
)

// TestLagAgeIsTheOldestUnmirroredEntry: under a steady load the mirror is
// never level with the writer; the age reported is that of the oldest
// entry not mirrored, not the time the transcript first fell behind.
func TestLagAgeIsTheOldestUnmirroredEntry(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var l lagMarks
	// Ten entries a second for ten seconds; the mirror copies what was
	// there 300 ms before, every 100 ms.
	for ms := 0; ms <= 10000; ms += 100 {
		l.note(uint64(ms/100+1), at(ms))
		if ms >= 300 {
			l.mirrored(uint64((ms-300)/100 + 1))
		}
	}
	// Entry 99 (index 98, acknowledged at 9.8 s) is the oldest not
	// mirrored at 10 s.
	if got, want := l.oldest(), at(9800); !got.Equal(want) {
		t.Fatalf("oldest unmirrored acknowledged at %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	l.mirrored(101)
	if got := l.oldest(); !got.IsZero() {
		t.Fatalf("everything mirrored, oldest %v, want none", got.Sub(t0))
	}
}

func TestLagMarksMergeAndStayBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l lagMarks
	// Marks closer than the grain merge, keeping the earlier time: the
	// age reads old by at most the grain, never young.
	l.note(1, t0)
	l.note(2, t0.Add(lagGrain/2))
	l.note(3, t0.Add(2*lagGrain))
	if len(l.m) != 2 || l.m[0].entries != 2 || !l.m[0].at.Equal(t0) {
		t.Fatalf("marks %+v: want {2 at t0} then {3}", l.m)
	}
	l.mirrored(1) // entry 2 is still behind, acknowledged by t0 at the latest
	if !l.oldest().Equal(t0) {
		t.Fatalf("oldest %v, want t0", l.oldest())
	}
	l.mirrored(2)
	if !l.oldest().Equal(t0.Add(2 * lagGrain)) {
		t.Fatalf("oldest %v, want t0+2 grains", l.oldest().Sub(t0))
	}
	// A transcript far behind keeps at most lagMax marks.
	for i := range 10 * lagMax {
		l.note(uint64(4+i), t0.Add(time.Duration(3+i)*lagGrain))
	}
	if len(l.m) > lagMax {
		t.Fatalf("%d marks, want at most %d", len(l.m), lagMax)
	}
	if last := l.m[len(l.m)-1]; last.entries != uint64(3+10*lagMax) {
		t.Fatalf("last mark covers %d entries, want %d", last.entries, 3+10*lagMax)
	}
	// Rewritten shorter: what is behind counts from the oldest time known.
	l.note(2, t0.Add(time.Hour))
	if len(l.m) != 1 || !l.m[0].at.Equal(t0.Add(2*lagGrain)) {
		t.Fatalf("after a shorter rewrite: %+v", l.m)
	}
}
