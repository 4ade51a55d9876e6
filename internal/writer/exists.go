package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// What the writers know of a session beyond its files (entries in the
// journal, a live writer), for themselves and for the catalog (package
// catalog), which lists and finds sessions through these methods.

// Exists reports whether key's transcript is here: a live writer with
// content, entries in the journal or a canonical file, so reads of unknown
// sessions fail without starting a writer. An error says it could not look:
// a refusal because the session exists must not be the answer to a
// failing disk.
func (m *Manager) Exists(key layout.Key) (bool, error) {
	s := m.reg.lookup(key)
	if s != nil && s.HasContent() {
		return true, nil
	}
	// The journal first, then the file: a compaction running meanwhile
	// renames the file into place before it begins the session's next
	// (empty) stream, so whichever moment the journal is asked at, one of the
	// two still shows the entries (asked the other way round, a look at
	// the file just before the rename and at the journal just after found
	// neither, and a Flush right after an Append said "not found").
	logged := m.logs.Exists(key)
	if logged {
		return true, nil
	}
	path := m.cfg.Layout.TranscriptPath(key)
	if path == "" {
		// No path for a key that does not validate (see checkPath).
		return false, key.Validate()
	}
	_, err := m.cfg.FS.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("session %s: %w", key, errdefs.FromIO(err))
	}
	return false, nil
}

// absent takes what Exists says, for callers that only need to know
// whether to go on: a disk that cannot tell counts as present, so that the
// operation runs and reports the disk's error instead of "not found".
func absent(ok bool, err error) bool { return !ok && err == nil }

// NotFound is the error for a transcript that does not exist. For a
// subagent transcript of a session that does, it says so: the user is
// looking for a subpath, not for a missing session.
func (m *Manager) NotFound(key layout.Key) error {
	if key.Subpath != "" && !absent(m.Exists(key.Main())) {
		return fmt.Errorf("session %s/%s has no subagent transcript %s (sessionctl subkeys %s lists the ones it has): %w",
			key.ProjectKey, key.SessionID, key.Subpath, key.SessionID, errdefs.ErrNotFound)
	}
	return fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
}

// WriterKeys lists the open sessions and every session with entries in
// the journal, sorted by name.
func (m *Manager) WriterKeys() []layout.Key {
	set := make(map[layout.Key]bool)
	for _, s := range m.reg.live(nil) {
		set[s.Key()] = true
	}
	for _, k := range m.logs.Keys() {
		set[k] = true
	}
	keys := make([]layout.Key, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}

// Publish has key's writer publish its listing entry to the index when
// key has one live or entries in the journal, and reports whether it did.
// A writer opened only for this (a journal left behind by a writer whose
// last compaction failed) moves the journal into the file and retires at
// once (retireIfOpened), so that a listing of many such sessions does not
// hold a writer open for each.
func (m *Manager) Publish(ctx context.Context, key layout.Key) (bool, error) {
	if !m.logs.Exists(key) && !m.IsActive(key) {
		return false, nil
	}
	err := m.doRetire(ctx, key, session.RetireIfOpened, func(st *session.State) error {
		if !st.Exists() {
			return m.NotFound(key)
		}
		st.Publish()
		return nil
	})
	return err == nil, err
}

// Stamp is the stat stamp of key's files (transcript and journal) and
// their newest mtime (ms).
func (m *Manager) Stamp(key layout.Key) (index.Stamp, int64) { return m.env.Stamp(key) }

// StoreSummaries reads key's SessionStore summaries from its store
// sidecar, without a writer. A damaged sidecar reads as no summary: the writer that
// next opens the session keeps a copy of it and starts the summary afresh.
func (m *Manager) StoreSummaries(key layout.Key) (index.StoreSummaries, error) {
	s, err := sessionstore.Read(m.cfg.FS, m.cfg.Layout, key)
	var dmg *sessionstore.DamagedError
	if errors.As(err, &dmg) {
		m.log.Error("the session's store sidecar is damaged; its summary is listed empty", zap.Stringer("session", key),
			zap.String("path", dmg.Path), zap.Error(dmg.Err))
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return s.ListingSummaries(), nil
}
