package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/ballast"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
)

// How the writers ride out a full disk. An append needs room in the
// journal (the tail its current segment reserved ahead lets
// appends go on for a while when the disk is full), a compaction room for
// the transcript's new copy: its old content plus the logged entries,
// before the rename lets the old file go. When a write finds the disk
// full:
//
//   - the journal's retained segments (kept for repair, wal's retain.go) go
//     first, every time, if they are on that disk (yieldRetained): a
//     compaction is then tried once more at once (state.compact), an
//     append into the ballast's room only refused once they are gone;
//   - the ballast (package ballast) is deleted, if it is on that disk, and
//     the journal stops reserving space ahead and deletes its spare segments
//     (journal.Log.SetLowSpace), so the compactions waiting get that room;
//     the transcripts whose entries were not compacted yet when the
//     ballast went are the compactions waiting (lagging): the watcher
//     compacts each at once, and those that do not fit are deferred;
//     until the ballast is back, appends are refused while they would
//     take the ballast's room (appendRoom): it is the compactions';
//   - a compaction that did not fit is deferred: the session's automatic
//     compactions (after appends, when idle, before retiring, under the
//     log's pressure) stop trying, and status shows one line for it
//     (Deferred.Line); entries stay in the journal, served from there;
//   - a watcher looks at the free space every spaceCheck (one statfs per
//     folder) and compacts a deferred session as soon as its folder has
//     the room it needs, or, where the free space cannot be told, on a
//     backoff; a compaction that still fails waits twice as long each time
//     (up to maxRetry). So the transcripts catch up without a restart once
//     space is freed, and a compaction that cannot fit is never retried in
//     a loop;
//   - once nothing waits (no compaction deferred, each lagging transcript
//     compacted or deferred) and the state folder's disk has room for the
//     ballast twice over, the ballast is made again, then the journal reserves
//     space ahead again. Without the lagging transcripts, the room the
//     release had just freed counted as room that was back: the reserves
//     came back at once, before any compaction had had the room, and the
//     appends filled it again.

const (
	// spaceCheck is how often the watcher looks at the free space while
	// something waits for it.
	spaceCheck = time.Second
	// minRetry and maxRetry bound the wait before a deferred compaction
	// is tried again when the free space says nothing (it could not be
	// read, or it said there was room and the compaction failed all the
	// same).
	minRetry = time.Second
	maxRetry = time.Minute
	// journalWriteNeed is what a record of the journal (a compaction's marker, a
	// stream's Bind) needs on its disk: a block.
	journalWriteNeed = 4096
)

// diskSpace is the manager's view of the disk space: the ballast, the
// deferred compactions and the watcher. The writers reach it through
// deps.
type diskSpace struct {
	cfg     *Config
	log     *zap.Logger
	ballast *ballast.Ballast // nil: none kept
	jr      *journal.Log
	// lowSpaceClear is the free space of the journal's folder past which the
	// log reserves space ahead again: two segments' worth.
	lowSpaceClear int64
	// retry compacts a deferred session (Manager.flush).
	retry func(layout.Key) error

	mu       sync.Mutex
	deferred map[layout.Key]*deferral
	// lagging: the transcripts whose entries were in the journal only when
	// the ballast was released, with their streams (journal.Log.Behind); the
	// watcher compacts each once, unless a compaction did it already.
	lagging  map[layout.Key]uint64
	watching bool          // the watcher goroutine runs
	kick     chan struct{} // wakes the watcher at once
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when the watcher ends
	closed   bool
}

// deferral is one compaction waiting for space.
type deferral struct {
	dir        string
	need, free int64 // free is -1 when it could not be read
	since      time.Time
	next       time.Time     // the watcher looks at it again from then
	backoff    time.Duration // the wait after a retry that failed
}

// Deferred is a compaction waiting for space, as Stats reports it.
type Deferred struct {
	Key   layout.Key
	Dir   string
	Need  int64
	Free  int64 // -1: unknown
	Since time.Time
}

// Line is how status shows it.
func (d Deferred) Line() string {
	free := "free space unknown"
	if d.Free >= 0 {
		free = fmt.Sprintf("%d free", d.Free)
	}
	return fmt.Sprintf("compaction deferred: need %d bytes in %s, %s", d.Need, d.Dir, free)
}

// DiskStats is Stats' part about disk space.
type DiskStats struct {
	// BallastPath and BallastSize describe the emergency reserve
	// (BallastSize 0: none); BallastPresent says it is in place,
	// BallastReleased that it was deleted after the disk filled and is
	// not back yet.
	BallastPath     string
	BallastSize     int64
	BallastPresent  bool
	BallastReleased bool
	// LagSessions have logged entries that are not in their transcripts
	// yet, LagBytes in all.
	LagSessions uint64
	LagBytes    uint64
	// Deferred are the compactions waiting for space, oldest first.
	Deferred []Deferred
}

func newDiskSpace(cfg *Config, log *zap.Logger) *diskSpace {
	d := &diskSpace{cfg: cfg, log: log, deferred: map[layout.Key]*deferral{},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	seg := cfg.JournalSegmentSize
	if seg <= 0 {
		seg = journal.DefaultSegmentSize
	}
	d.lowSpaceClear = 2 * seg
	if cfg.BallastSize > 0 {
		d.ballast = ballast.New(cfg.FS, cfg.Layout.BallastPath(), cfg.BallastSize, cfg.FreeSpace)
	}
	return d
}

// start puts the ballast in place (or has the watcher make it once there
// is room). Called once the journal is open.
func (d *diskSpace) start(l *journal.Log) {
	d.jr = l
	if d.ballast == nil {
		return
	}
	if ok, err := d.ballast.Ensure(); err != nil {
		d.log.Warn("cannot make the ballast (the disk space kept for compactions on a full disk); will try again", zap.Error(err))
	} else if !ok {
		d.log.Warn("not enough free space for the ballast (the disk space kept for compactions on a full disk); it is made once there is",
			zap.String("path", d.ballast.Path()), zap.Int64("bytes", d.ballast.Size()), zap.Int64("needs_free", d.ballast.Threshold()))
	}
	d.mu.Lock()
	d.watchLocked()
	d.mu.Unlock()
}

// freeSpace is cfg.FreeSpace, -1 when it cannot tell.
func (d *diskSpace) freeSpace(dir string) int64 {
	n, err := d.cfg.FreeSpace(dir)
	if err != nil {
		return -1
	}
	return n
}

// full is told that a write of need bytes in dir found the disk full
// (err). It releases what is held in reserve on that disk, wakes the
// watcher, and returns err as an errdefs.SpaceError saying where and how
// much, unless it is one already.
func (d *diskSpace) full(dir string, need int64, err error) error {
	var se *errdefs.SpaceError
	if errors.As(err, &se) {
		return err
	}
	free := d.freeSpace(dir)
	d.release(dir)
	return &errdefs.SpaceError{Dir: dir, Need: need, Free: free, Err: err}
}

// appendRoom refuses an append of need bytes that would take the
// ballast's room while it is released: that room is for the compactions
// that waited for space (appends would fill it again within moments and
// no compaction would fit). Appends go on once the free space is above
// the ballast's size again, as compactions let the journal's segments go or
// as space is freed; the ballast is made again later. Outside that time
// it costs nothing (no statfs).
func (d *diskSpace) appendRoom(need int64) error {
	if d.ballast == nil {
		return nil
	}
	if _, released := d.ballast.State(); !released {
		return nil
	}
	dir := d.cfg.Layout.JournalDir()
	free := d.freeSpace(dir)
	if free >= 0 && free-need < d.ballast.Size() && d.yieldRetained(dir) {
		free = d.freeSpace(dir)
	}
	if free < 0 || free-need >= d.ballast.Size() {
		return nil
	}
	return &errdefs.SpaceError{Dir: dir, Need: need, Free: free,
		Err: fmt.Errorf("the disk is full but for the ballast's %d bytes, kept for the compactions that waited for space until they are done (status shows them): %w",
			d.ballast.Size(), syscall.ENOSPC)}
}

// noticeFull releases the reserves when err says a disk is full and the
// appends and compactions, which handle their own, did not: a fork's temp
// copy, a sidecar, a repair.
func (d *diskSpace) noticeFull(err error) {
	if err == nil || !errors.Is(err, errdefs.ErrNoSpace) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return
	}
	var se *errdefs.SpaceError
	if errors.As(err, &se) {
		return
	}
	dir := d.cfg.Layout.Root
	if p := failedPath(err); p != "" {
		dir = filepath.Dir(p)
	}
	d.release(dir)
}

// release gives the reserves on dir's disk to what waits for space: the
// ballast and the journal's reserved space. When it freed something, every
// deferred compaction is looked at again at once. It frees each reserve
// once until the watcher puts it back, so a compaction failing again
// waits for its backoff.
func (d *diskSpace) release(dir string) {
	freed, ballast := false, false
	if d.ballast != nil && fsys.SameDisk(dir, filepath.Dir(d.ballast.Path())) && d.ballast.Release() {
		freed, ballast = true, true
		d.log.Warn("disk full: released the ballast so the compactions waiting for space can finish; it is made again once there is room",
			zap.String("full", dir), zap.String("ballast", d.ballast.Path()), zap.Int64("bytes", d.ballast.Size()))
	}
	if d.yieldRetained(dir) {
		freed = true
	}
	if d.jr != nil && fsys.SameDisk(dir, d.cfg.Layout.JournalDir()) && !d.jr.LowSpace() {
		freed = true
		d.jr.SetLowSpace(true)
		d.log.Info("disk full: the journal gives back the space it reserved ahead until there is room again", zap.String("full", dir))
	}
	var behind map[layout.Key]uint64
	if ballast && d.jr != nil {
		// The compactions the ballast's room is for.
		behind = d.jr.Behind()
	}
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	if freed {
		for _, df := range d.deferred {
			df.next = now
		}
		for k, stream := range behind {
			if d.lagging == nil {
				d.lagging = map[layout.Key]uint64{}
			}
			d.lagging[k] = stream
		}
	}
	d.watchLocked()
	d.mu.Unlock()
	if freed {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// yieldRetained has the journal remove the segments it retains (wal's
// retention, kept for repair) when dir, found full, is on the journal's disk,
// and reports whether that freed anything. They are the first room to give
// back, every time the disk is found full: entries already in their
// transcripts, kept in case another program drops them, matter less than
// appends and the compactions that move entries into their transcripts.
// The ballast and the journal's reserve are freed once until the watcher puts
// them back; the journal retains segments again as compactions let them go.
func (d *diskSpace) yieldRetained(dir string) bool {
	if d.jr == nil || !fsys.SameDisk(dir, d.cfg.Layout.JournalDir()) || !d.jr.DropRetained() {
		return false
	}
	d.log.Warn("disk full: removed the journal's retained segments (kept so repair can put back entries another program's rewrite drops)",
		zap.String("full", dir))
	return true
}

// compactFailed defers key's compaction when it failed for want of space
// (need bytes of it in dir); any other error ends a deferral, so the
// usual rules take over.
func (d *diskSpace) compactFailed(key layout.Key, dir string, need int64, err error) error {
	if !errors.Is(err, errdefs.ErrNoSpace) {
		d.forget(key)
		return err
	}
	var se *errdefs.SpaceError
	if errors.As(err, &se) {
		dir, need = se.Dir, se.Need
	} else if p := failedPath(err); p != "" {
		if pdir := filepath.Dir(p); pdir != dir {
			// Not the temp copy: a record of the journal.
			dir, need = pdir, journalWriteNeed
		}
	}
	now, free := d.cfg.Clock.Now(), d.freeSpace(dir)
	d.mu.Lock()
	df := d.deferred[key]
	first := df == nil
	if first {
		df = &deferral{since: now, backoff: minRetry}
		d.deferred[key] = df
	} else {
		df.backoff = min(2*df.backoff, maxRetry)
	}
	df.dir, df.need, df.free = dir, need, free
	df.next = now.Add(df.backoff)
	d.watchLocked()
	d.mu.Unlock()
	if first {
		d.log.Warn(Deferred{Key: key, Dir: dir, Need: need, Free: free}.Line()+
			"; the entries stay in the journal (served from there) and are compacted once there is room",
			zap.Stringer("session", key))
	}
	d.release(dir)
	if se == nil {
		err = &errdefs.SpaceError{Dir: dir, Need: need, Free: free, Err: err}
	}
	return err
}

// failedPath is the path of the operation that failed in err, "" if none
// is named.
func failedPath(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.New
	}
	return ""
}

// failedDir is the folder of the operation that failed in err (a
// SpaceError's, or the failed path's), def if none is named.
func failedDir(err error, def string) string {
	var se *errdefs.SpaceError
	if errors.As(err, &se) && se.Dir != "" {
		return se.Dir
	}
	if p := failedPath(err); p != "" {
		return filepath.Dir(p)
	}
	return def
}

// compacted ends key's deferral, if any: its entries are in its
// transcript.
func (d *diskSpace) compacted(key layout.Key) {
	if df := d.forget(key); df != nil {
		d.log.Info("deferred compaction done", zap.Stringer("session", key),
			zap.Duration("deferred_for", d.cfg.Clock.Now().Sub(df.since)))
	}
}

// forget ends key's deferral and returns it (nil if none).
func (d *diskSpace) forget(key layout.Key) *deferral {
	d.mu.Lock()
	defer d.mu.Unlock()
	df := d.deferred[key]
	delete(d.deferred, key)
	return df
}

// waiting reports whether key's compaction waits for space: the
// automatic ones then leave it to the watcher.
func (d *diskSpace) waiting(key layout.Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deferred[key] != nil
}

// stats reports the ballast and the deferred compactions.
func (d *diskSpace) stats() DiskStats {
	var s DiskStats
	if b := d.ballast; b != nil {
		s.BallastPath, s.BallastSize = b.Path(), b.Size()
		s.BallastPresent, s.BallastReleased = b.State()
	}
	d.mu.Lock()
	for k, df := range d.deferred {
		s.Deferred = append(s.Deferred, Deferred{Key: k, Dir: df.dir, Need: df.need, Free: df.free, Since: df.since})
	}
	d.mu.Unlock()
	sort.Slice(s.Deferred, func(i, j int) bool {
		a, b := s.Deferred[i], s.Deferred[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		return a.Key.Less(b.Key)
	})
	return s
}

// watchLocked starts the watcher when something waits for space and it
// is not running. Called with d.mu held.
func (d *diskSpace) watchLocked() {
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
func (d *diskSpace) needsWatchLocked() bool {
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

// testHookSpaceChecked, when set by a test, runs after each round of the
// watcher, once its timer is armed for the next.
var testHookSpaceChecked atomic.Pointer[func()]

// watch is the watcher goroutine: a round every spaceCheck, or at once
// when kicked, until nothing waits for space.
func (d *diskSpace) watch(done chan struct{}) {
	defer close(done)
	t := d.cfg.Clock.NewTimer(spaceCheck)
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
			checked()
			return
		}
		d.mu.Unlock()
		t.Reset(spaceCheck)
		checked()
	}
}

// checked runs testHookSpaceChecked: after a round, once the next one is
// armed.
func checked() {
	if h := testHookSpaceChecked.Load(); h != nil {
		(*h)()
	}
}

// round retries the deferred compactions that are due and fit, then,
// when none waits any more, puts the reserves back.
func (d *diskSpace) round() {
	d.compactLagging()
	now := d.cfg.Clock.Now()
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
		if free := d.freeSpace(dir); free >= 0 && free < need {
			d.mu.Lock()
			if df := d.deferred[k]; df != nil {
				df.free, df.next = free, now.Add(spaceCheck)
			}
			d.mu.Unlock()
			continue
		}
		if err := d.retry(k); err != nil && !errors.Is(err, errdefs.ErrNoSpace) {
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
		if free := d.freeSpace(d.cfg.Layout.JournalDir()); present && free >= d.lowSpaceClear {
			d.jr.SetLowSpace(false)
			d.log.Info("space is back: the journal reserves space ahead again")
		}
	}
}

// compactLagging compacts, once each, the transcripts that lagged when the
// ballast was released, unless a compaction did it since: one that does not
// fit is deferred (compactFailed), like any compaction.
func (d *diskSpace) compactLagging() {
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
		if err := d.retry(k); err != nil && !errors.Is(err, errdefs.ErrNoSpace) {
			// Gone, or failing for another reason: the usual rules (and
			// their errors) take over, as for a deferred compaction.
			d.log.Debug("compacting a transcript that lagged when the disk filled failed", zap.Stringer("session", k), zap.Error(err))
		}
	}
}

// close stops the watcher and waits for it.
func (d *diskSpace) close() {
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
