package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/reader"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// Snapshots is the writers' side of reads (reader.Source): a session's
// snapshot taken on its writer goroutine, and holding a writer open while
// it is followed. Package reader serves the entries from there.
type Snapshots struct{ m *Manager }

// NewSnapshots returns m's reader.Source.
func NewSnapshots(m *Manager) *Snapshots { return &Snapshots{m: m} }

// Exists is Manager.Exists.
func (s *Snapshots) Exists(key layout.Key) (bool, error) { return s.m.Exists(key) }

// NotFound is Manager.NotFound.
func (s *Snapshots) NotFound(key layout.Key) error { return s.m.NotFound(key) }

// Snapshot takes key's snapshot as mode says (reader.Live, reader.Passing).
func (s *Snapshots) Snapshot(ctx context.Context, key layout.Key, mode reader.Mode) (*reader.Snapshot, error) {
	m := s.m
	retire := session.Stay
	if mode == reader.Passing {
		if logged := m.logs.Exists(key); !logged && !m.IsActive(key) {
			path := m.cfg.Layout.TranscriptPath(key)
			f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, m.NotFound(key)
			}
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
			}
			return &reader.Snapshot{Canon: f, Direct: true, Exists: true}, nil
		}
		// A writer opened for this (a journal left behind) retires after
		// it: CheckAll views every session.
		retire = session.RetireIfOpened
	}
	var sn *reader.Snapshot
	err := m.doRetire(ctx, key, retire, func(st *session.State) error {
		var err error
		sn, err = st.Snapshot()
		return err
	})
	return sn, err
}

// Hold keeps key's live writer from retiring while a follower waits on it.
func (s *Snapshots) Hold(key layout.Key) (reader.Hold, error) {
	sess, err := s.m.reg.follow(key)
	if err != nil {
		return nil, err
	}
	return held{s.m, sess}, nil
}

type held struct {
	m *Manager
	s *session.Writer
}

func (h held) Live() bool { return h.m.reg.isLive(h.s) }

func (h held) Release() { h.m.reg.unfollow(h.s) }

// View calls fn with a reader over key's whole content (reader.Reader.View).
func (m *Manager) View(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error {
	return reader.New(NewSnapshots(m)).View(ctx, key, fn)
}
