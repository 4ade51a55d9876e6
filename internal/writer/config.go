package writer

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// Config tunes the writers. Zero values take the defaults below.
type Config struct {
	Layout layout.Layout
	FS     fsys.FS
	Logger *zap.Logger
	// Owner is the held claim on Layout's folders (package owner). nil:
	// New takes it itself, before it reads anything, and Close releases
	// it; a caller that must hold the folders before New (the daemon,
	// which reads its machine id from the state folder) passes its own,
	// and releases it after Close.
	Owner *owner.Claim
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
	// IdleCompact: after this long without appends, a session whose
	// transcript holds nothing yet (a new session) is compacted, so the
	// official readers list it soon; it costs only the new entries.
	IdleCompact time.Duration
	// CompactWithin bounds how long an acknowledged entry waits in the
	// journal before a compaction puts it in its transcript, for a
	// transcript up to IdleFloor bytes or one whose journaled entries are
	// at least 1/IdleRatio of it; a larger file fed a trickle waits for
	// the writer's retirement (IdleRetire) or a Flush instead, so that it
	// is not rewritten for a few lines. Reads are served from the journal
	// meanwhile: what waits costs a reader of sessiond nothing, and each
	// rewrite costs the whole file, so waiting this long (instead of
	// compacting at every pause of the agent) keeps the bytes written a
	// small multiple of those appended. Never less than IdleCompact.
	CompactWithin time.Duration
	IdleFloor     int64
	IdleRatio     float64
	// IdleRetire: after this long without activity a writer compacts
	// whatever the idle rule left pending, closes its files and exits.
	IdleRetire time.Duration
	// CompactParallel bounds how many compactions run at once across all
	// sessions (0: DefaultCompactParallel). Each holds a few files
	// open (the temp file, its folder, the ledger) and syncs them: without
	// a bound, thousands of writers compacting together (a burst of
	// sessions going idle or retiring, a SIGTERM) would take the file
	// descriptors appends need, and queue the disk behind them anyway.
	CompactParallel int

	// JournalSegmentSize is the size at which the journal
	// starts a new segment file; JournalMaxSize is the bound past which the
	// sessions holding its oldest segment are compacted so it can go
	// (see package journal). Zero: wal's defaults.
	JournalSegmentSize int64
	JournalMaxSize     int64
	// CommitDelay is how long the journal's committer may wait for other
	// sessions' appends before it writes a small group while many
	// sessions are active (journal.Options.CommitDelay): fewer syncs and
	// less CPU for a few milliseconds of latency. 0: the journal's
	// default; negative: never wait.
	CommitDelay time.Duration

	// BallastSize is the disk space kept in reserve for compactions on a
	// full disk: a file of that size in the state folder, released when
	// a write finds the disk full and made again once there is room (see
	// packages ballast and space). 0 keeps none (the daemon's
	// --ballast-size has the default).
	BallastSize int64
	// FreeSpace tells how many bytes may still be written on the disk
	// holding a folder; nil is fsys.FreeSpace (statfs). Tests give their
	// own, to run out of space on a disk that only pretends to.
	FreeSpace func(dir string) (int64, error)
	// JournalRetention keeps the journal's segments for this long after every
	// session in them was compacted, within JournalRetentionSize (the oldest
	// go first), so that repair can put back acknowledged entries another
	// program's rewrite dropped from a transcript (see package ledger and
	// wal's retain.go). Zero: the defaults; a negative JournalRetention keeps
	// nothing.
	JournalRetention     time.Duration
	JournalRetentionSize int64
	// TrashRetention is how long a deleted session's copy stays in the
	// trash before its purge (package trash) removes it.
	TrashRetention time.Duration
	// JournalOnCommit, when set, is told of every write of the journal that
	// reached the disk (journal.Options.OnCommit): the daemon's metrics. The
	// log's committer calls it, so it must be quick.
	JournalOnCommit func(journal.Commit)
	// Changed, when set, is told of every change to a transcript (see
	// Change): the PostgreSQL mirror follows the transcripts through it.
	// It is called on the writer goroutines and must not block.
	Changed func(Change)
	// AcceptJournalLoss lets New start over a journal that lost
	// acknowledged records to something other than a crash (a segment
	// cut, deleted or damaged: journal.Options.AcceptLoss). The loss is then
	// reported (Stats.RecoveryErrors, the journal at error level) instead of
	// refusing to start.
	AcceptJournalLoss bool
	// AppendGate, when set, may refuse an append before it is queued (the
	// PostgreSQL mirror's lease check: a session another machine writes).
	// It runs in the caller's goroutine and must not wait long.
	AppendGate func(ctx context.Context, key layout.Key) error
	// Index is the listing index the writers publish their sessions to,
	// which the catalog (package catalog) lists from; Progress is where
	// long operations show (Manager.Operations). nil: new ones.
	Index    *index.Index
	Progress *progress.Registry
}

// Defaults.
const (
	DefaultMaxEntryBytes   = 32 << 20
	DefaultQueueDepth      = 256
	DefaultMaxGroupBytes   = 16 << 20
	DefaultCompactRatio    = 1.0
	DefaultMinCompactBytes = 1 << 20
	DefaultIdleCompact     = time.Second
	DefaultCompactWithin   = 30 * time.Second
	DefaultIdleFloor       = 4 << 20
	DefaultIdleRatio       = 16
	DefaultIdleRetire      = 30 * time.Second
	// DefaultCompactParallel: concurrent compactions share the file
	// system's journal commits, so up to a few of them cost little more
	// than one (BenchmarkShutdownManySessions); past that they only add
	// open files. A count of the disk's, not the CPUs' (sessiond runs with
	// more Ps than CPUs anyway).
	DefaultCompactParallel = 8
	// DefaultBallastSize is the daemon's --ballast-size: a compaction
	// needs room for its transcript's new copy, and 64 MiB lets one of a
	// transcript larger than nearly any (a long agent session with large
	// tool results runs to tens of MB) finish on a full disk, which in
	// turn lets the journal's oldest segments go. It is also one segment of
	// the journal: on a disk of a few GiB it costs a few percent at most
	// (CockroachDB keeps 1% of the disk, at most 1 GiB).
	DefaultBallastSize = 64 << 20
	// DefaultJournalRetention: a day covers a rewrite noticed the next
	// morning; DefaultJournalRetentionSize caps it at what a busy machine's
	// agents log in about a day (BENCHMARKS.md: a heavy session writes
	// tens of MB a day), a small part of a disk that holds the
	// transcripts themselves.
	DefaultJournalRetention     = 24 * time.Hour
	DefaultJournalRetentionSize = 1 << 30
	// DefaultTrashRetention is the official CLI's own default for how long
	// it keeps transcripts (cleanupPeriodDays, 30).
	DefaultTrashRetention = 30 * 24 * time.Hour
)

// DiskSizes are the sizes whose defaults follow the disk: a fixed size
// suits a disk of many GiB, but on a small volume (64 MB) a 64 MiB ballast
// or journal segment would be the whole disk.
type DiskSizes struct {
	Ballast, Segment, JournalMax, Retention int64
}

// SizesFor is the default of each DiskSizes on a disk of total bytes: the
// fixed default, or a share of a disk too small for it (a sixteenth for
// the ballast and a segment, a quarter for the journal, an eighth for the
// retained history), never less than minDiskShare. total <= 0 (unknown)
// gives the fixed defaults.
func SizesFor(total int64) DiskSizes {
	share := func(def, div int64) int64 {
		if total <= 0 {
			return def
		}
		return min(def, max(total/div, minDiskShare))
	}
	return DiskSizes{
		Ballast:    share(DefaultBallastSize, 16),
		Segment:    share(journal.DefaultSegmentSize, 16),
		JournalMax: share(journal.DefaultMaxSize, 4),
		Retention:  share(DefaultJournalRetentionSize, 8),
	}
}

// minDiskShare is the least size SizesFor gives: smaller, a journal segment
// would roll every few appends.
const minDiskShare = 1 << 20

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
	if c.Index == nil {
		c.Index = index.New()
	}
	if c.Progress == nil {
		c.Progress = progress.New()
	}
	if c.FreeSpace == nil {
		c.FreeSpace = fsys.FreeSpace
	}
	if c.BallastSize < 0 {
		c.BallastSize = 0
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
	if c.CompactWithin <= 0 {
		c.CompactWithin = DefaultCompactWithin
	}
	if c.CompactWithin < c.IdleCompact {
		c.CompactWithin = c.IdleCompact
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
	if c.CompactParallel <= 0 {
		c.CompactParallel = DefaultCompactParallel
	}
	if c.TrashRetention <= 0 {
		c.TrashRetention = DefaultTrashRetention
	}
	if c.IdleRetire < c.IdleCompact {
		c.IdleRetire = c.IdleCompact
	}
	if c.JournalRetention == 0 {
		c.JournalRetention = DefaultJournalRetention
	}
	if c.JournalRetentionSize <= 0 {
		c.JournalRetentionSize = DefaultJournalRetentionSize
	}
	return nil
}

// Change tells Config.Changed that a transcript changed (see
// session.Change).
type Change = session.Change

// sessionConfig is the part of cfg the session writers take.
func sessionConfig(cfg *Config) session.Config {
	return session.Config{
		Layout: cfg.Layout, FS: cfg.FS, Logger: cfg.Logger, Clock: cfg.Clock,
		QueueDepth: cfg.QueueDepth, MaxGroupBytes: cfg.MaxGroupBytes,
		CompactRatio: cfg.CompactRatio, MinCompactBytes: cfg.MinCompactBytes,
		IdleCompact: cfg.IdleCompact, CompactWithin: cfg.CompactWithin, IdleFloor: cfg.IdleFloor, IdleRatio: cfg.IdleRatio, IdleRetire: cfg.IdleRetire,
		Changed: cfg.Changed,
	}
}

// openJournal opens (and recovers) the journal in the state folder. pressure
// is told which sessions hold the journal's oldest segment when it grows past
// its bound (see journal.Options.OnPressure).
func openJournal(cfg *Config, pressure func([]layout.Key)) (*journal.Log, *journal.Recovery, error) {
	l, rec, err := journal.Open(journal.Options{
		FS: cfg.FS, Dir: cfg.Layout.JournalDir(),
		MaxRecord:     cfg.MaxEntryBytes + 1024,
		SegmentSize:   cfg.JournalSegmentSize,
		MaxSize:       cfg.JournalMaxSize,
		OnPressure:    pressure,
		Retention:     max(cfg.JournalRetention, 0),
		RetentionSize: cfg.JournalRetentionSize,
		Now:           cfg.Clock.Now,
		OnCommit:      cfg.JournalOnCommit,
		CommitDelay:   cfg.CommitDelay,
		// A reservation leaves the ballast's room free, and a segment's
		// more for the compactions.
		FreeSpace:  cfg.FreeSpace,
		Keep:       cfg.BallastSize + cfg.JournalSegmentSize,
		AcceptLoss: cfg.AcceptJournalLoss,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open the journal: %w", err)
	}
	return l, rec, nil
}
