package space

import (
	"errors"
	"sort"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// watchLocked starts the watcher when something waits for space and it
// is not running. Called with d.mu held.
func (d *Space) watchLocked() {
	if d.watching || d.closed || !d.needsWatchLocked() {
		return
	}
	d.watching = true
	d.done = make(chan struct{})
	go d.watch(d.done)
}

// needsWatchLocked reports whether anything waits for space: a deferred
// compaction, a ballast not in place, the journal giving back its reserve.
// Called with d.mu held.
func (d *Space) needsWatchLocked() bool {
	if len(d.deferred) > 0 || len(d.lagging) > 0 {
		return true
	}
	if d.ballast != nil {
		if present, _ := d.ballast.State(); !present {
			return true
		}
	}
	return d.jr != nil && d.jr.LowSpace()
}

// watch is the watcher goroutine: a round every CheckEvery, or at once
// when kicked, until nothing waits for space.
func (d *Space) watch(done chan struct{}) {
	defer close(done)
	t := d.clock.NewTimer(CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C():
		case <-d.kick:
		}
		d.round()
		d.mu.Lock()
		if d.closed || !d.needsWatchLocked() {
			d.watching = false
			d.mu.Unlock()
			d.roundDone()
			return
		}
		d.mu.Unlock()
		t.Reset(CheckEvery)
		d.roundDone()
	}
}

// roundDone tells Config.Checked: after a round, once the next one is
// armed.
func (d *Space) roundDone() {
	if d.checked != nil {
		d.checked()
	}
}

// round retries the deferred compactions that are due and fit, then,
// when none waits any more, puts the reserves back.
func (d *Space) round() {
	d.compactLagging()
	now := d.clock.Now()
	d.mu.Lock()
	var due []layout.Key
	for k, df := range d.deferred {
		if !now.Before(df.next) {
			due = append(due, k)
		}
	}
	d.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].Less(due[j]) })
	for _, k := range due {
		d.mu.Lock()
		df := d.deferred[k]
		if df == nil || d.closed {
			d.mu.Unlock()
			continue
		}
		dir, need := df.dir, df.need
		d.mu.Unlock()
		if free := d.free(dir); free >= 0 && free < need {
			d.mu.Lock()
			if df := d.deferred[k]; df != nil {
				df.free, df.next = free, now.Add(CheckEvery)
			}
			d.mu.Unlock()
			continue
		}
		if err := d.compactor.Compact(k); err != nil && !errors.Is(err, errdefs.ErrNoSpace) {
			// Gone, or failing for another reason: the usual rules
			// (and their errors) take over.
			d.forget(k)
		}
	}
	d.mu.Lock()
	waiting := len(d.deferred) > 0 || len(d.lagging) > 0 || d.closed
	d.mu.Unlock()
	if waiting {
		return
	}
	if b := d.ballast; b != nil {
		if present, released := b.State(); !present {
			if ok, err := b.Ensure(); err != nil {
				d.log.Debug("cannot make the ballast yet", zap.Error(err))
			} else if ok && released {
				d.log.Info("space is back: the ballast is made again", zap.String("path", b.Path()), zap.Int64("bytes", b.Size()))
			}
		}
	}
	if d.jr != nil && d.jr.LowSpace() {
		present := true
		if d.ballast != nil {
			present, _ = d.ballast.State()
		}
		if free := d.free(d.layout.JournalDir()); present && free >= d.lowSpaceClear {
			d.jr.SetLowSpace(false)
			d.log.Info("space is back: the journal reserves space ahead again")
		}
	}
}

// compactLagging compacts, once each, the transcripts that lagged when the
// ballast was released, unless a compaction did it since: one that does not
// fit is deferred (CompactFailed), like any compaction.
func (d *Space) compactLagging() {
	d.mu.Lock()
	lagging := d.lagging
	d.lagging = nil
	d.mu.Unlock()
	keys := make([]layout.Key, 0, len(lagging))
	for k := range lagging {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Less(keys[j]) })
	for _, k := range keys {
		d.mu.Lock()
		closed, deferred := d.closed, d.deferred[k] != nil
		d.mu.Unlock()
		if closed {
			return
		}
		if deferred || !d.jr.StillBehind(k, lagging[k]) {
			continue
		}
		if err := d.compactor.Compact(k); err != nil && !errors.Is(err, errdefs.ErrNoSpace) {
			// Gone, or failing for another reason: the usual rules (and
			// their errors) take over, as for a deferred compaction.
			d.log.Debug("compacting a transcript that lagged when the disk filled failed", zap.Stringer("session", k), zap.Error(err))
		}
	}
}

// Close stops the watcher and waits for it.
func (d *Space) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	close(d.stop)
	done := d.done
	d.mu.Unlock()
	if done != nil {
		<-done
	}
}
