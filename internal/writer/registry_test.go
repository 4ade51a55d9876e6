package writer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// TestRegistryRetireRacesAcquire has writers retire while other callers
// acquire, follow and look them up: every append is answered once, stored
// once, and no writer is left behind (goleak checks the goroutines).
func TestRegistryRetireRacesAcquire(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	const appenders, rounds = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, appenders*rounds*3)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString(), "n", fmt.Sprint(a, "-", i))}); err != nil {
					errs <- fmt.Errorf("append: %w", err)
				}
			}
		}()
	}
	// Retirements: each flush retires the writer when nothing else holds it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds * 2 {
			// Not found: nothing appended yet.
			if _, err := m.flush(ctx, k, session.RetireIfDone, "replay"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				errs <- fmt.Errorf("flush: %w", err)
			}
		}
	}()
	// Followers hold writers without queueing, and let go.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			s, err := m.reg.follow(k)
			if err != nil {
				errs <- fmt.Errorf("follow: %w", err)
				continue
			}
			_ = m.reg.isLive(s)
			m.reg.unfollow(s)
			_ = m.IsActive(k)
			_ = m.WriterKeys()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString())})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(appenders*rounds + 1); res.Entries != want {
		t.Fatalf("the session holds %d entries, want %d", res.Entries, want)
	}
}
