package trash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// Purge removes the trashed copies deleted longer than
// Config.Retention ago, and what an interrupted purge left. A copy
// whose session a delete or restore is working on is left for the next
// purge. It returns how many copies it removed.
func (t *Trash) Purge(ctx context.Context) (int, error) {
	FS, root := t.cfg.FS, t.root()
	projects, err := FS.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the trash: %w", errdefs.FromIO(err))
	}
	cutoff := t.cfg.Clock.Now().Add(-t.cfg.Retention)
	purged := 0
	var errs []error
	for _, p := range projects {
		dir := filepath.Join(root, p.Name())
		ents, err := FS.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err)))
			}
			continue
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return purged, err
			}
			name := e.Name()
			if strings.HasPrefix(name, purgePrefix) {
				if err := fsys.RemoveAll(FS, filepath.Join(dir, name)); err != nil {
					errs = append(errs, fmt.Errorf("remove %s: %w", filepath.Join(dir, name), errdefs.FromIO(err)))
				}
				continue
			}
			n, ok := parseName(name)
			if !ok || !e.IsDir() || !n.deleted.Before(cutoff) {
				continue
			}
			done, err := t.purgeCopy(dir, name, family{p.Name(), n.sessionID})
			if err != nil {
				errs = append(errs, err)
			}
			if done {
				purged++
			}
		}
	}
	if purged > 0 {
		t.changed()
		t.log.Info("purged old copies from the trash", zap.Int("copies", purged), zap.Duration("retention", t.cfg.Retention))
	}
	return purged, errors.Join(errs...)
}

// purgeCopy removes one trash entry, unless a delete or restore of its
// session is running or unfinished (a restore may be reading it); delete
// and restore wait for it meanwhile (lockFamily).
func (t *Trash) purgeCopy(dir, name string, f family) (bool, error) {
	t.mu.Lock()
	if _, busy := t.busy[f]; busy || t.intents[f] != nil || t.purging[f] != nil {
		t.mu.Unlock()
		return false, nil
	}
	done := make(chan struct{})
	t.purging[f] = done
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.purging, f)
		t.mu.Unlock()
		close(done)
	}()
	aside := filepath.Join(dir, purgePrefix+name)
	if err := fsys.Move(t.cfg.FS, filepath.Join(dir, name), aside); err != nil {
		return false, fmt.Errorf("purge %s from the trash: %w", filepath.Join(dir, name), errdefs.FromIO(err))
	}
	if err := fsys.RemoveAll(t.cfg.FS, aside); err != nil {
		return true, fmt.Errorf("purge %s from the trash: %w", aside, errdefs.FromIO(err))
	}
	return true, nil
}

// purgeEvery is how often RunPurge looks for copies past their
// retention (more often when the retention is shorter).
const purgeEvery = time.Hour

// RunPurge purges the trash (Purge) now and then every hour
// until ctx ends. The daemon runs it once recovery has finished the
// interrupted deletes and restores.
func (t *Trash) RunPurge(ctx context.Context) {
	every := min(purgeEvery, t.cfg.Retention)
	tm := t.cfg.Clock.NewTimer(0)
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C():
		}
		if _, err := t.Purge(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("purging old copies from the trash failed; retried later", zap.Error(err))
		}
		tm.Reset(every)
	}
}
