package session

import (
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Config is what the writers are tuned by: the part of the manager's
// configuration that reaches them, its defaults applied (the manager's
// Config says what each means).
type Config struct {
	Layout layout.Layout
	FS     fsys.FS
	Logger *zap.Logger
	Clock  clock.Clock

	QueueDepth    int
	MaxGroupBytes int

	CompactRatio    float64
	MinCompactBytes int64
	IdleCompact     time.Duration
	CompactWithin   time.Duration
	IdleFloor       int64
	IdleRatio       float64
	IdleRetire      time.Duration

	// Changed, when set, is told of every change to a transcript; it is
	// called on the writer goroutines and must not block.
	Changed func(Change)
}
