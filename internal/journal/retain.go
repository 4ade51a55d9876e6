package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// Retention. A segment the checkpoint lets go (every stream with records
// in it compacted past them) is not deleted at once: it is renamed
// "<seq>-<unix ms>.wal-retained" and kept for Options.Retention after
// that moment, while the retained segments add up to at most
// Options.RetentionSize (the oldest go first). etcd keeps WAL files after
// a snapshot, PostgreSQL keeps wal_keep_size of WAL after a checkpoint
// and Kafka keeps a topic for retention.ms for the same reason: what was
// acknowledged can still be read back after the copy it was checkpointed
// into is damaged. Here that copy is a transcript another program may
// rewrite: Lookup reads its entries back, by their spans, from the retained
// segments (and the live ones), so sessiond can put back what such a
// rewrite dropped.
//
// A retained segment is out of the journal: recovery does not read it (a day
// of segments would slow every start) and no stream refers to it. Taking
// a segment out keeps the rule of collection: oldest first, one at a time
// with a folder sync after each, so a newer segment holding the Bind that
// superseded a stream is never gone while an older one holding its
// entries is still in the journal. A crash before the folder sync leaves the
// old name or the new one, and either is right: under its old name the
// segment is read again at recovery, found superseded, and retained again.
//
// The retention time is when the segment was let go, in its name, so a
// restart keeps it; expiry runs after commits (and at Open), so an idle
// log keeps its segments longer, never shorter. A full disk has the last
// word: when a segment cannot be made or written for want of space, and
// whenever the writers find the journal's disk full (DropRetained: a
// compaction whose new copy did not fit, an append kept out of the
// ballast's room, SetLowSpace), every retained segment is removed:
// appends, and the compactions that move entries into their transcripts,
// matter more than the history of entries already there. Segments let go
// later are retained again: a full disk once must not end the retention
// for the life of the process.

// retainedSuffix ends the name of a retained segment.
const retainedSuffix = ".wal-retained"

// retainedSeg is a segment out of the journal, kept for Lookup.
type retainedSeg struct {
	seq  uint64
	path string
	at   time.Time // when the checkpoint let it go
	size int64
}

func retainedName(seq uint64, at time.Time) string {
	return fmt.Sprintf("%016x-%d%s", seq, at.UnixMilli(), retainedSuffix)
}

// parseRetained reads a retained segment's name, or reports false.
func parseRetained(name string) (seq uint64, at time.Time, ok bool) {
	base, ok := strings.CutSuffix(name, retainedSuffix)
	if !ok {
		return 0, time.Time{}, false
	}
	s, ms, ok := strings.Cut(base, "-")
	if !ok || len(s) != 16 {
		return 0, time.Time{}, false
	}
	seq, err := strconv.ParseUint(s, 16, 64)
	if err != nil || seq == 0 {
		return 0, time.Time{}, false
	}
	m, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	return seq, time.UnixMilli(m), true
}

func (l *Log) now() time.Time {
	if l.opt.Now != nil {
		return l.opt.Now()
	}
	return time.Now()
}

// let takes collected segment s out of the journal: retained when retention
// is on, else retired (kept as a spare or removed). The caller syncs the
// folder. Called by the committer only (and by Open).
func (l *Log) let(s *segment) error {
	if l.opt.Retention <= 0 {
		if s.f != nil {
			s.f.Close()
		}
		return l.retire(s.path)
	}
	// The file keeps its reserved space: once expired it becomes a spare
	// (retire), and a reused file's blocks are what makes its syncs cheap
	// (reserve.go). A segment leaves the journal once full, so little of it
	// is unwritten; the budget counts the file's size all the same.
	size := s.end
	if s.f != nil {
		if fi, err := s.f.Stat(); err == nil && fi.Size() > size {
			size = fi.Size()
		}
		s.f.Close()
	}
	at := l.now()
	path := filepath.Join(l.opt.Dir, retainedName(s.seq, at))
	if err := l.opt.FS.Rename(s.path, path); err != nil {
		return err
	}
	l.mu.Lock()
	l.retained = append(l.retained, &retainedSeg{seq: s.seq, path: path, at: at, size: size})
	l.mu.Unlock()
	return nil
}

// expire removes the retained segments older than Options.Retention, and
// the oldest while the retained total is over Options.RetentionSize, one
// at a time with a folder sync after each; never while Lookup reads
// them. Called by the committer only (and by Open).
func (l *Log) expire() {
	now := l.now()
	for {
		l.mu.Lock()
		if l.readers > 0 || len(l.retained) == 0 {
			l.mu.Unlock()
			return
		}
		var total int64
		for _, r := range l.retained {
			total += r.size
		}
		r := l.retained[0]
		if now.Sub(r.at) < l.opt.Retention && total <= l.opt.RetentionSize {
			l.mu.Unlock()
			return
		}
		l.retained = l.retained[1:]
		l.mu.Unlock()
		err := l.retire(r.path)
		if err == nil {
			err = l.opt.FS.SyncDir(l.opt.Dir)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			// Left on disk; the next start lists it again.
			return
		}
	}
}

// DropRetained removes every retained segment (not as spares: the point
// is to free space) when the journal's disk is full, its own writes' or a
// writer's finding (see above), and reports whether it removed any: the
// room they held is free now, and what failed for want of it may be tried
// again. It removes none while Lookup reads them. Safe from any goroutine:
// the segments it removes leave the list under l.mu first, as those
// expire removes do, so the two never remove the same one.
func (l *Log) DropRetained() bool {
	l.mu.Lock()
	if l.readers > 0 || len(l.retained) == 0 {
		l.mu.Unlock()
		return false
	}
	drop := l.retained
	l.retained = nil
	l.mu.Unlock()
	for _, r := range drop {
		_ = l.opt.FS.Remove(r.path)
	}
	_ = l.opt.FS.SyncDir(l.opt.Dir)
	return true
}

func (l *Log) hasRetained() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.retained) > 0
}

// freeOnFull drops the retained segments when err says the disk is full,
// so that the next attempt may find room.
func (l *Log) freeOnFull(err error) {
	if errors.Is(err, errdefs.ErrNoSpace) {
		l.DropRetained()
	}
}

// listRetained records the retained segments found by recovery, oldest
// first.
func (l *Log) listRetained(name string) bool {
	seq, at, ok := parseRetained(name)
	if !ok {
		return false
	}
	path := filepath.Join(l.opt.Dir, name)
	if l.opt.Retention <= 0 {
		// Retention was turned off since: the segment goes.
		_ = l.opt.FS.Remove(path)
		return true
	}
	var size int64
	if fi, err := l.opt.FS.Stat(path); err == nil {
		size = fi.Size()
	}
	l.retained = append(l.retained, &retainedSeg{seq: seq, path: path, at: at, size: size})
	sort.Slice(l.retained, func(i, j int) bool { return l.retained[i].seq < l.retained[j].seq })
	return true
}
