package writer

import (
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/space"
)

// The writer's side of riding out a full disk (package space).

// DiskStats is Stats' part about disk space.
type DiskStats = space.DiskStats

// newSpace is the Space of the writers configured by cfg.
func newSpace(cfg *Config, log *zap.Logger) *space.Space {
	return space.New(space.Config{FS: cfg.FS, Layout: cfg.Layout, Clock: cfg.Clock, Logger: log,
		FreeSpace: cfg.FreeSpace, BallastSize: cfg.BallastSize, JournalSegmentSize: cfg.JournalSegmentSize,
		Checked: spaceChecked})
}

// compactor is how the space watcher compacts a session whose compaction
// waited for room.
type compactor func(layout.Key) error

func (c compactor) Compact(k layout.Key) error { return c(k) }

// testHookSpaceChecked, when set by a test, runs after each round of the
// space watcher, once its timer is armed for the next.
var testHookSpaceChecked atomic.Pointer[func()]

func spaceChecked() {
	if h := testHookSpaceChecked.Load(); h != nil {
		(*h)()
	}
}
