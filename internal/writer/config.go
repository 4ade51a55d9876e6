package writer

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Config tunes the writers. Zero values take the defaults below.
type Config struct {
	Layout layout.Layout
	FS     fsys.FS
	Logger *zap.Logger
	// Clock is where the writers take the time from: idle compaction and
	// retirement, how long batch ids are remembered, and the times they
	// stamp (appends, archive marks, trash and repair copies). nil is the
	// system clock; tests use a clock.Fake to move time without sleeping.
	Clock clock.Clock

	// MaxEntryBytes is the largest entry accepted. Real tool results reach
	// 12 MB, so the default leaves room above that.
	MaxEntryBytes int
	// QueueDepth bounds each session's queue of append requests; a full
	// queue makes callers wait instead of growing memory without bound.
	QueueDepth int
	// MaxGroupBytes caps how many entry bytes one group commit takes from
	// the queue (a single request is never split).
	MaxGroupBytes int

	// CompactRatio: a session is compacted as soon as its journal holds at
	// least CompactRatio times the canonical file's size (and at least
	// MinCompactBytes). Rewriting the file only when the journal has grown
	// by a fixed fraction of it keeps total bytes written linear in the
	// session's size.
	CompactRatio    float64
	MinCompactBytes int64
	// IdleCompact: after this long without appends, a session is compacted
	// if its canonical file is at most IdleFloor bytes or its journal is at
	// least 1/IdleRatio of the file, so official readers see new entries
	// soon without a large file being rewritten for every trickle.
	IdleCompact time.Duration
	IdleFloor   int64
	IdleRatio   float64
	// IdleRetire: after this long without activity a writer compacts
	// whatever the idle rule left pending, closes its files and exits.
	IdleRetire time.Duration

	// WALSegmentSize is the size at which the shared write-ahead log
	// starts a new segment file; WALMaxSize is the bound past which the
	// sessions holding its oldest segment are compacted so it can go
	// (see package wal). Zero: wal's defaults.
	WALSegmentSize int64
	WALMaxSize     int64

	// TrashRetention is how long a deleted session's copy stays in the
	// trash before PurgeTrash removes it.
	TrashRetention time.Duration
}

// Defaults.
const (
	DefaultMaxEntryBytes   = 32 << 20
	DefaultQueueDepth      = 256
	DefaultMaxGroupBytes   = 16 << 20
	DefaultCompactRatio    = 1.0
	DefaultMinCompactBytes = 1 << 20
	DefaultIdleCompact     = time.Second
	DefaultIdleFloor       = 4 << 20
	DefaultIdleRatio       = 16
	DefaultIdleRetire      = 30 * time.Second
	// DefaultTrashRetention is the official CLI's own default for how long
	// it keeps transcripts (cleanupPeriodDays, 30).
	DefaultTrashRetention = 30 * 24 * time.Hour
)

func (c *Config) setDefaults() error {
	if c.Layout.Root == "" || c.Layout.StateDir == "" {
		return fmt.Errorf("writer: transcripts root and state folder must be set")
	}
	if c.FS == nil {
		c.FS = fsys.OS
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.MaxGroupBytes <= 0 {
		c.MaxGroupBytes = DefaultMaxGroupBytes
	}
	if c.CompactRatio <= 0 {
		c.CompactRatio = DefaultCompactRatio
	}
	if c.MinCompactBytes <= 0 {
		c.MinCompactBytes = DefaultMinCompactBytes
	}
	if c.IdleCompact <= 0 {
		c.IdleCompact = DefaultIdleCompact
	}
	if c.IdleFloor <= 0 {
		c.IdleFloor = DefaultIdleFloor
	}
	if c.IdleRatio <= 0 {
		c.IdleRatio = DefaultIdleRatio
	}
	if c.IdleRetire <= 0 {
		c.IdleRetire = DefaultIdleRetire
	}
	if c.TrashRetention <= 0 {
		c.TrashRetention = DefaultTrashRetention
	}
	if c.IdleRetire < c.IdleCompact {
		c.IdleRetire = c.IdleCompact
	}
	return nil
}
