// Package clock gives code that stamps times or waits for them one place
// to take time from, so that tests move time by hand (Fake) instead of
// sleeping through it.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is time.Timer behind an interface: C delivers the time once the
// timer fires. As with time.Timer since Go 1.23, no stale value is
// received after Reset or Stop returns.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t realTimer) Stop() bool                 { return t.t.Stop() }

// Fake is a clock that stands still until Advance moves it. Its timers
// fire as Advance passes their deadlines.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]bool // the armed ones
	// armed is closed and replaced whenever a timer is armed, waking
	// WaitArmed.
	armed chan struct{}
}

// NewFake returns a Fake showing start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: make(map[*fakeTimer]bool), armed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer firing once the fake time reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the time on by d, firing every timer whose deadline it
// reaches, in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		var first *fakeTimer
		for t := range f.timers {
			if !t.at.After(end) && (first == nil || t.at.Before(first.at)) {
				first = t
			}
		}
		if first == nil {
			break
		}
		if first.at.After(f.now) {
			f.now = first.at
		}
		first.fireLocked()
	}
	f.now = end
}

// WaitArmed waits until at least n timers are armed (made or reset and
// neither fired nor stopped since), or ctx ends. A test calls it to know
// that the code under test has set the timer the next Advance is meant to
// fire.
func (f *Fake) WaitArmed(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		armed, wake := len(f.timers), f.armed
		f.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type fakeTimer struct {
	f  *Fake
	c  chan time.Time
	at time.Time // deadline while armed
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) fireLocked() {
	delete(t.f.timers, t)
	select {
	case t.c <- t.at:
	default:
	}
}

// Reset arms the timer for d from now, dropping a fire not yet received.
func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.timers[t]
	t.drainLocked()
	t.at = f.now.Add(d)
	if d <= 0 {
		t.fireLocked()
		return was
	}
	f.timers[t] = true
	close(f.armed)
	f.armed = make(chan struct{})
	return was
}

// Stop disarms the timer, dropping a fire not yet received.
func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.timers[t]
	delete(f.timers, t)
	t.drainLocked()
	return was
}

func (t *fakeTimer) drainLocked() {
	select {
	case <-t.c:
	default:
	}
}
