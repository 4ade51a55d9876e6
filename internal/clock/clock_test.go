package clock

import (
	"context"
	"testing"
	"time"
)

func TestFakeTimers(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	a := f.NewTimer(time.Second)
	b := f.NewTimer(3 * time.Second)
	if err := f.WaitArmed(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-a.C():
		t.Fatal("fired before its deadline")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-a.C(); !at.Equal(start.Add(time.Second)) {
		t.Fatalf("fired at %v", at)
	}
	// A reset drops a fire not yet received and arms the timer again.
	f.Advance(2 * time.Second)
	if b.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reported it armed")
	}
	select {
	case <-b.C():
		t.Fatal("stale fire after Reset")
	default:
	}
	if !b.Stop() {
		t.Fatal("Stop of an armed timer reported it idle")
	}
	f.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if got := Since(f, start); got != time.Hour+3*time.Second {
		t.Fatalf("Since = %v", got)
	}
}

func TestFakeWaitArmed(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := f.WaitArmed(ctx, 1); err == nil {
		t.Fatal("WaitArmed returned with no timer armed")
	}
	done := make(chan error, 1)
	go func() { done <- f.WaitArmed(context.Background(), 1) }()
	tm := f.NewTimer(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	<-tm.C()
	if err := f.WaitArmed(ctx, 1); err == nil {
		t.Fatal("a fired timer still counts as armed")
	}
}

func TestRealTimer(t *testing.T) {
	tm := Real.NewTimer(time.Millisecond)
	<-tm.C()
	if Since(Real, time.Now().Add(-time.Second)) < time.Second {
		t.Fatal("Real.Now runs backwards")
	}
}
