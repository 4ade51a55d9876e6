package writer

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/trash"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// Trash is where deleted sessions go (package trash): Delete, Restore,
// the trash's listing and purge.
func (m *Manager) Trash() *trash.Trash { return m.trash }

// newTrash makes the trash of m's folders, moving the files of the
// sessions m writes.
func newTrash(m *Manager) *trash.Trash {
	return trash.New(trash.Config{
		Layout: m.cfg.Layout, FS: m.cfg.FS, Clock: m.cfg.Clock, Logger: m.log, Retention: m.cfg.TrashRetention,
		// A compaction's temp name: recovery sweeps what a crash left.
		TempName: func(dst string) string {
			return filepath.Join(filepath.Dir(dst), session.CompactTempPrefix(dst)+uuid.NewString()[:8]+".tmp")
		},
	}, trashSessions{m})
}

// trashSessions is what the trash asks of the writers (trash.Sessions).
type trashSessions struct{ m *Manager }

// StopFamily stops the live writers of k's session and waits for them to
// exit. The trash has marked the family busy before, so acquire starts no
// new one meanwhile.
func (h trashSessions) StopFamily(k layout.Key) error {
	m := h.m
	open := m.reg.live(func(key layout.Key) bool {
		return key.ProjectKey == k.ProjectKey && key.SessionID == k.SessionID
	})
	// Writers of the family finish what is queued, compact and exit.
	for _, s := range open {
		s.Stop()
	}
	for _, s := range open {
		t := m.cfg.Clock.NewTimer(time.Minute)
		select {
		case <-s.Exited():
			t.Stop()
		case <-t.C():
			return fmt.Errorf("session %s did not close in time: %w", s.Key(), errdefs.ErrUnavailable)
		}
	}
	return nil
}

func (h trashSessions) CompactLogged(key layout.Key) error {
	return h.m.logs.Drop(key, func(k layout.Key) error {
		_, err := h.flushLocked(k)
		return err
	})
}

// flushLocked compacts key's journal while its family is locked: no
// writer of the family can start meanwhile, so the state machine runs right
// here instead of on a goroutine of its own.
func (h trashSessions) flushLocked(key layout.Key) (FlushResult, error) {
	m := h.m
	st, err := session.Open(m.env, key, m.log.With(zap.Stringer("session", key)))
	if err != nil {
		return FlushResult{Key: key}, err
	}
	defer st.Close()
	n := uint64(st.Pending())
	if err := st.Compact(session.ReasonDelete); err != nil {
		return FlushResult{Key: key}, err
	}
	return FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.CanonSize()}, nil
}

func (h trashSessions) Logged(key layout.Key) bool { return h.m.logs.Exists(key) }

func (h trashSessions) Exists(key layout.Key) (bool, error) { return h.m.Exists(key) }

func (h trashSessions) NotFound(key layout.Key) error { return h.m.NotFound(key) }

func (h trashSessions) Moved(key layout.Key, gone bool) {
	h.m.env.Tell(Change{Key: key, Gone: gone, Family: !gone})
}
