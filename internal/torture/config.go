package torture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Signal modes.
const (
	// ModeKill kills the daemon with SIGKILL under load and verifies after
	// the restart (recovery must replay the journals).
	ModeKill = "kill"
	// ModeTerm sends SIGTERM under load, requires exit 0 within the
	// shutdown timeout plus slack, and verifies before any restart.
	ModeTerm = "term"
)

// Config is one torture run.
type Config struct {
	// Sessiond is the path of the sessiond binary under test.
	Sessiond string
	// Cycles is how many signal cycles to run (default 20).
	Cycles int
	// Clients is how many concurrent clients append (default 16), each on
	// its own connection.
	Clients int
	// Sessions is how many sessions the clients share (default 8); several
	// clients append to the same session at once, as parallel tool results
	// do.
	Sessions int
	// MaxEntry is the largest entry line generated (default 1 MiB).
	MaxEntry int
	// Seed makes the random choices repeatable (0: time-based). Timing
	// still varies from run to run.
	Seed uint64
	// Dir is the work folder (socket, transcripts root, state folder,
	// daemon log). Empty: a temp folder, removed after a clean run.
	Dir string
	// Mode is ModeKill (default) or ModeTerm.
	Mode string
	// ShutdownTimeout is passed to sessiond as --shutdown-timeout (default
	// 10s); in ModeTerm the daemon must exit 0 within it plus
	// ShutdownSlack (default 5s).
	ShutdownTimeout time.Duration
	ShutdownSlack   time.Duration
	// LoadMin and LoadMax bound the random moment of the signal after the
	// load starts (defaults 100ms and 1s).
	LoadMin, LoadMax time.Duration
	// MaxCycleBytes caps the entry bytes sent per cycle (default 64 MiB);
	// clients that reach it wait for the signal.
	MaxCycleBytes int64
	// SessionCap rotates a session whose canonical file is larger (default
	// 32 MiB).
	SessionCap int64
	// RecoveryKill is the probability (ModeKill only) that the restarted
	// daemon is killed again while it recovers, before it is restarted for
	// good (default 0.1; negative disables).
	RecoveryKill float64
	// FlushProb is the probability that a client operation is a Flush of
	// its session instead of an Append (default 0.02; negative: never).
	FlushProb float64
	// StartTimeout bounds a start until the health check answers SERVING
	// (default 60s).
	StartTimeout time.Duration
	// SessiondArgs are extra flags for sessiond.
	SessiondArgs []string
	// Progress receives one line per cycle (nil: none).
	Progress io.Writer
	// KeepDir keeps a temp Dir even after a clean run.
	KeepDir bool
}

func (c *Config) setDefaults() error {
	if c.Sessiond == "" {
		return errors.New("the path of the sessiond binary is required")
	}
	if fi, err := os.Stat(c.Sessiond); err != nil {
		return fmt.Errorf("sessiond binary: %w", err)
	} else if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("sessiond binary %s is not an executable file", c.Sessiond)
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.Cycles, 20)
	def(&c.Clients, 16)
	def(&c.Sessions, 8)
	def(&c.MaxEntry, 1<<20)
	defd := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defd(&c.ShutdownTimeout, 10*time.Second)
	defd(&c.ShutdownSlack, 5*time.Second)
	defd(&c.LoadMin, 100*time.Millisecond)
	defd(&c.LoadMax, time.Second)
	defd(&c.StartTimeout, time.Minute)
	if c.LoadMax < c.LoadMin {
		c.LoadMax = c.LoadMin
	}
	if c.MaxCycleBytes <= 0 {
		c.MaxCycleBytes = 64 << 20
	}
	if c.SessionCap <= 0 {
		c.SessionCap = 32 << 20
	}
	if c.RecoveryKill == 0 {
		c.RecoveryKill = 0.1
	}
	if c.FlushProb == 0 {
		c.FlushProb = 0.02
	}
	if c.MaxEntry < minEntry {
		return fmt.Errorf("max entry %d is below the smallest entry generated (%d bytes)", c.MaxEntry, minEntry)
	}
	switch c.Mode {
	case "":
		c.Mode = ModeKill
	case ModeKill, ModeTerm:
	default:
		return fmt.Errorf("mode %q: want %q or %q", c.Mode, ModeKill, ModeTerm)
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}
