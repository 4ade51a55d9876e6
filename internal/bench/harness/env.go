package harness

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// Env is what an extra scenario gets from the tool.
type Env struct {
	// Sessiond is the sessiond binary; start it with StartDaemon.
	Sessiond     string
	SessiondArgs []string
	// Dir is the scenario's own work folder (empty, on the filesystem
	// the run measures); it is removed afterwards unless the run keeps it.
	Dir  string
	Log  io.Writer
	Seed uint64
	// Verify asks for the scenario's correctness checks (what it reads
	// back equals what it wrote); they are cheap and always wanted in
	// tests.
	Verify bool
	// Scale shrinks the scenario's sizes (1 = the full sizes; tests
	// use about 0.01). A scenario states in its title or notes the sizes
	// it actually used.
	Scale float64
	// Duration is a throughput run's measured time (Config.Duration),
	// for the scenarios that make such runs.
	Duration time.Duration
	// SDKDir is the folder holding node_modules with the official SDK
	// (e2e/sdk); empty: the listing scenario cannot compare with it.
	SDKDir string
}

// Logf writes one progress line.
func (e *Env) Logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", args...)
	}
}

// Scaled returns n scaled by e.Scale, at least min.
func (e *Env) Scaled(n, min int64) int64 {
	s := e.Scale
	if s <= 0 {
		s = 1
	}
	v := int64(float64(n) * s)
	if v < min {
		v = min
	}
	return v
}

// StatusOf asks the sessiond at socket for its Status.
func StatusOf(ctx context.Context, socket string) (*sessiondv1.StatusResponse, error) {
	c, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.Status(cctx)
	if err != nil {
		return nil, fmt.Errorf("status of sessiond at %s: %w", socket, err)
	}
	return st, nil
}

// ForEach runs fn for 0..n-1, conc at a time, and stops at the first error.
func ForEach(ctx context.Context, n, conc int, fn func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, conc)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// SameFS returns an error when a and b are on different filesystems.
func SameFS(a, b string) error {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return err
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return err
	}
	if sa.Dev != sb.Dev {
		return fmt.Errorf("%s and %s are on different devices", a, b)
	}
	return nil
}
