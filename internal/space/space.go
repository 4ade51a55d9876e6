// Package space rides out a full disk for sessiond's writers. An append
// needs room in the journal (the tail its current segment reserved ahead lets
// appends go on for a while when the disk is full), a compaction room for
// the transcript's new copy: its old content plus the logged entries,
// before the rename lets the old file go. When a write finds the disk
// full:
//
//   - the journal's retained segments (kept for repair) go first, every
//     time, if they are on that disk (YieldRetained): the writer then
//     tries the compaction once more at once, and an append into the
//     ballast's room is only refused once they are gone;
//   - the ballast (package ballast) is deleted, if it is on that disk, and
//     the journal stops reserving space ahead and deletes its spare segments
//     (journal.Log.SetLowSpace), so the compactions waiting get that room;
//     the transcripts whose entries were not compacted yet when the
//     ballast went are the compactions waiting (lagging): the watcher
//     compacts each at once, and those that do not fit are deferred;
//     until the ballast is back, appends are refused while they would
//     take the ballast's room (AppendRoom): it is the compactions';
//   - a compaction that did not fit is deferred: the session's automatic
//     compactions (after appends, when idle, before retiring, under the
//     log's pressure) stop trying, and status shows one line for it
//     (Deferred.Line); entries stay in the journal, served from there;
//   - a watcher looks at the free space every CheckEvery (one statfs per
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
//     release just freed would count as room that is back: the reserves
//     would come back at once, before any compaction had the room, and the
//     appends would fill it again.
//
// The writers reach it through a Space; the watcher compacts through the
// Compactor the writers give it, and moves the journal's reserves through
// Journal: it never reaches into the writers.
package space

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/ballast"
	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
)

const (
	// CheckEvery is how often the watcher looks at the free space while
	// something waits for it.
	CheckEvery = time.Second
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

// Config is what a Space needs.
type Config struct {
	FS     fsys.FS // where the ballast is made
	Layout layout.Layout
	Clock  clock.Clock
	Logger *zap.Logger
	// FreeSpace tells how many bytes may still be written on the disk
	// holding a folder.
	FreeSpace func(dir string) (int64, error)
	// BallastSize is the reserve kept for compactions on a full disk (0:
	// none).
	BallastSize int64
	// JournalSegmentSize is the journal's (0: its default): the journal
	// reserves space ahead again once two segments' worth is free.
	JournalSegmentSize int64
	// Checked, when set, is told after each round of the watcher, once the
	// next one is armed: tests wait for the watcher through it.
	Checked func()
}

// Journal is what space moves in the write-ahead log: its reserve, its
// retained segments, and which transcripts lag behind it.
type Journal interface {
	LowSpace() bool
	SetLowSpace(on bool)
	DropRetained() bool
	Behind() map[layout.Key]uint64
	StillBehind(key layout.Key, stream uint64) bool
}

// Compactor compacts a transcript whose compaction waited for space.
type Compactor interface {
	Compact(key layout.Key) error
}

// Space is the writers' view of the disk space: the ballast, the deferred
// compactions and the watcher. Its methods are safe for concurrent use.
type Space struct {
	layout    layout.Layout
	clock     clock.Clock
	freeSpace func(dir string) (int64, error)
	checked   func()
	log       *zap.Logger
	ballast   *ballast.Ballast // nil: none kept
	jr        Journal          // nil until Start
	compactor Compactor
	// lowSpaceClear is the free space of the journal's folder past which the
	// log reserves space ahead again: two segments' worth.
	lowSpaceClear int64

	mu       sync.Mutex
	deferred map[layout.Key]*deferral
	// lagging: the transcripts whose entries were in the journal only when
	// the ballast was released, with their streams (Journal.Behind); the
	// watcher compacts each once, unless a compaction did it already.
	lagging  map[layout.Key]uint64
	watching bool          // the watcher goroutine runs
	kick     chan struct{} // wakes the watcher at once
	stop     chan struct{} // closed by Close
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

// DiskStats is what status says about disk space.
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

// New returns the Space of cfg. Start puts it to work.
func New(cfg Config) *Space {
	d := &Space{layout: cfg.Layout, clock: cfg.Clock, freeSpace: cfg.FreeSpace, checked: cfg.Checked,
		log: cfg.Logger, deferred: map[layout.Key]*deferral{},
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

// Start puts the ballast in place (or has the watcher make it once there
// is room), given the journal once it is open and what compacts for the
// watcher.
func (d *Space) Start(l Journal, c Compactor) {
	d.jr, d.compactor = l, c
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

// free is Config.FreeSpace, -1 when it cannot tell.
func (d *Space) free(dir string) int64 {
	n, err := d.freeSpace(dir)
	if err != nil {
		return -1
	}
	return n
}

// Full is told that a write of need bytes in dir found the disk full
// (err). It releases what is held in reserve on that disk, wakes the
// watcher, and returns err as an errdefs.SpaceError saying where and how
// much, unless it is one already.
func (d *Space) Full(dir string, need int64, err error) error {
	var se *errdefs.SpaceError
	if errors.As(err, &se) {
		return err
	}
	free := d.free(dir)
	d.release(dir)
	return &errdefs.SpaceError{Dir: dir, Need: need, Free: free, Err: err}
}

// AppendRoom refuses an append of need bytes that would take the
// ballast's room while it is released: that room is for the compactions
// that waited for space (appends would fill it again within moments and
// no compaction would fit). Appends go on once the free space is above
// the ballast's size again, as compactions let the journal's segments go or
// as space is freed; the ballast is made again later. Outside that time
// it costs nothing (no statfs).
func (d *Space) AppendRoom(need int64) error {
	if d.ballast == nil {
		return nil
	}
	if _, released := d.ballast.State(); !released {
		return nil
	}
	dir := d.layout.JournalDir()
	free := d.free(dir)
	if free >= 0 && free-need < d.ballast.Size() && d.YieldRetained(dir) {
		free = d.free(dir)
	}
	if free < 0 || free-need >= d.ballast.Size() {
		return nil
	}
	return &errdefs.SpaceError{Dir: dir, Need: need, Free: free,
		Err: fmt.Errorf("the disk is full but for the ballast's %d bytes, kept for the compactions that waited for space until they are done (status shows them): %w",
			d.ballast.Size(), syscall.ENOSPC)}
}

// NoticeFull releases the reserves when err says a disk is full and the
// appends and compactions, which handle their own, did not: a fork's temp
// copy, a sidecar, a repair.
func (d *Space) NoticeFull(err error) {
	if err == nil || !errors.Is(err, errdefs.ErrNoSpace) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return
	}
	var se *errdefs.SpaceError
	if errors.As(err, &se) {
		return
	}
	dir := d.layout.Root
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
func (d *Space) release(dir string) {
	freed, ballast := false, false
	if d.ballast != nil && fsys.SameDisk(dir, filepath.Dir(d.ballast.Path())) && d.ballast.Release() {
		freed, ballast = true, true
		d.log.Warn("disk full: released the ballast so the compactions waiting for space can finish; it is made again once there is room",
			zap.String("full", dir), zap.String("ballast", d.ballast.Path()), zap.Int64("bytes", d.ballast.Size()))
	}
	if d.YieldRetained(dir) {
		freed = true
	}
	if d.jr != nil && fsys.SameDisk(dir, d.layout.JournalDir()) && !d.jr.LowSpace() {
		freed = true
		d.jr.SetLowSpace(true)
		d.log.Info("disk full: the journal gives back the space it reserved ahead until there is room again", zap.String("full", dir))
	}
	var behind map[layout.Key]uint64
	if ballast && d.jr != nil {
		// The compactions the ballast's room is for.
		behind = d.jr.Behind()
	}
	now := d.clock.Now()
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

// YieldRetained has the journal remove the segments it retains (the journal's
// retention, kept for repair) when dir, found full, is on the journal's disk,
// and reports whether that freed anything. They are the first room to give
// back, every time the disk is found full: entries already in their
// transcripts, kept in case another program drops them, matter less than
// appends and the compactions that move entries into their transcripts.
// The ballast and the journal's reserve are freed once until the watcher puts
// them back; the journal retains segments again as compactions let them go.
func (d *Space) YieldRetained(dir string) bool {
	if d.jr == nil || !fsys.SameDisk(dir, d.layout.JournalDir()) || !d.jr.DropRetained() {
		return false
	}
	d.log.Warn("disk full: removed the journal's retained segments (kept so repair can put back entries another program's rewrite drops)",
		zap.String("full", dir))
	return true
}

// CompactFailed defers key's compaction when it failed for want of space
// (need bytes of it in dir); any other error ends a deferral, so the
// usual rules take over.
func (d *Space) CompactFailed(key layout.Key, dir string, need int64, err error) error {
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
	now, free := d.clock.Now(), d.free(dir)
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

// FailedDir is the folder of the operation that failed in err (a
// SpaceError's, or the failed path's), def if none is named.
func FailedDir(err error, def string) string {
	var se *errdefs.SpaceError
	if errors.As(err, &se) && se.Dir != "" {
		return se.Dir
	}
	if p := failedPath(err); p != "" {
		return filepath.Dir(p)
	}
	return def
}

// Compacted ends key's deferral, if any: its entries are in its
// transcript.
func (d *Space) Compacted(key layout.Key) {
	if df := d.forget(key); df != nil {
		d.log.Info("deferred compaction done", zap.Stringer("session", key),
			zap.Duration("deferred_for", d.clock.Now().Sub(df.since)))
	}
}

// forget ends key's deferral and returns it (nil if none).
func (d *Space) forget(key layout.Key) *deferral {
	d.mu.Lock()
	defer d.mu.Unlock()
	df := d.deferred[key]
	delete(d.deferred, key)
	return df
}

// Waiting reports whether key's compaction waits for space: the
// automatic ones then leave it to the watcher.
func (d *Space) Waiting(key layout.Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deferred[key] != nil
}

// Stats reports the ballast and the deferred compactions.
func (d *Space) Stats() DiskStats {
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
