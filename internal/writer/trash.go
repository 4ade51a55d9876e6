package writer

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
	"github.com/sessiond/sessiond/internal/layout"
)

// lockFamily keeps every writer of k's session from starting until unlock:
// delete and restore move the files of the whole session.
func (m *Manager) lockFamily(k layout.Key, why string) (unlock func(), err error) {
	m.mu.Lock()
	if m.busy == nil {
		m.busy = make(map[family]string)
	}
	f := familyOf(k)
	// A purge of one of the session's trashed copies takes a moment and
	// must not run under a restore reading it: wait for it.
	for m.purging[f] != nil {
		done := m.purging[f]
		m.mu.Unlock()
		<-done
		m.mu.Lock()
	}
	if w, ok := m.busy[f]; ok {
		m.mu.Unlock()
		return nil, &busyError{family: f, why: w}
	}
	m.busy[f] = why
	var open []*session
	for key, s := range m.sessions {
		if familyOf(key) == f {
			open = append(open, s)
		}
	}
	m.mu.Unlock()
	unlock = func() {
		m.mu.Lock()
		delete(m.busy, f)
		m.mu.Unlock()
	}
	// Writers of the family finish what is queued, compact and exit.
	for _, s := range open {
		s.stop()
	}
	for _, s := range open {
		t := m.cfg.Clock.NewTimer(time.Minute)
		select {
		case <-s.exited:
			t.Stop()
		case <-t.C():
			unlock()
			return nil, fmt.Errorf("session %s did not close in time: %w", s.key, errdefs.ErrUnavailable)
		}
	}
	return unlock, nil
}

// Delete moves a session to the trash under the state folder (or removes
// it with purge): the main transcript with its session folder (subagents,
// archive mark) when key is a main session, or one subagent transcript
// (with its .meta.json sidecar). Pending entries are compacted first, so
// the trash holds everything that was acknowledged.
//
// The session's files are several names, which no single rename moves at
// once, so the moves are first recorded in a durable intent (see intent):
// a crash or a failing disk midway never leaves the session half in place
// and half in the trash for good. The next Delete or Restore of the
// session, or the next start, finishes the moves; until then the session
// refuses writers.
func (m *Manager) Delete(ctx context.Context, key layout.Key, purge bool) (string, error) {
	if err := key.Validate(); err != nil {
		return "", err
	}
	unlock, err := m.lockFamily(key, "deleted")
	if err != nil {
		return "", err
	}
	defer unlock()
	if done, err := m.finishPending(key); err != nil {
		return "", err
	} else if done != nil && done.Op != opRestore && done.Subpath == key.Subpath && (done.Op == opPurge) == purge {
		// This very delete was interrupted before; it is done now.
		return done.Trash, nil
	}
	L, FS := m.cfg.Layout, m.cfg.FS
	var moves [][2]string // what to move (or remove), relative to the trash entry
	if key.Subpath == "" {
		moves = append(moves, [2]string{L.TranscriptPath(key), key.SessionID + ".jsonl"},
			[2]string{L.SessionDir(key), key.SessionID})
	} else {
		p := L.TranscriptPath(key)
		rel := filepath.Join(key.SessionID, key.Subpath)
		moves = append(moves, [2]string{p, rel + ".jsonl"},
			[2]string{strings.TrimSuffix(p, ".jsonl") + ".meta.json", rel + ".meta.json"},
			[2]string{L.StorePath(key), rel + layout.StoreExt})
	}
	found := false
	for _, mv := range moves {
		if _, err := FS.Lstat(mv[0]); err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("delete %s: %w", key, errdefs.FromIO(err))
		}
	}
	if logged := m.logs.exists(key); logged {
		found = true
	}
	if !found {
		return "", m.notFound(key)
	}
	// The writers were compacted as they closed: journals hold nothing
	// that is not in the files, except for sessions whose compaction failed
	// (then they are kept and the delete stops).
	err = m.logs.drop(key, func(k layout.Key) error {
		_, err := m.flushLocked(k)
		return err
	})
	if err != nil {
		return "", err
	}
	in := &intent{Op: opDelete, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath}
	if purge {
		in.Op = opPurge
	} else {
		in.Trash = filepath.Join(L.StateDir, "trash", key.ProjectKey, key.SessionID+"-"+m.cfg.Clock.Now().UTC().Format("20060102T150405.000000000Z"))
		if key.Subpath != "" {
			in.Trash += "-" + trashSubpath(key.Subpath)
		}
	}
	for _, mv := range moves {
		if _, err := FS.Lstat(mv[0]); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		dst := ""
		if !purge {
			dst = filepath.Join(in.Trash, mv[1])
		}
		in.Moves = append(in.Moves, [2]string{mv[0], dst})
	}
	err = m.runIntent(in)
	if !purge {
		m.trashChanged()
	}
	if err != nil {
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	m.tell(Change{Key: key, Gone: true})
	m.log.Info("deleted session", zap.Stringer("session", key), zap.Bool("purge", purge), zap.String("trash", in.Trash))
	return in.Trash, nil
}

// flushLocked compacts key's journal while its family is locked: no
// writer of the family can start meanwhile, so the state machine runs right
// here instead of on a goroutine of its own.
func (m *Manager) flushLocked(key layout.Key) (FlushResult, error) {
	st := newState(&m.deps, key, m.log.With(zap.Stringer("session", key)))
	if err := st.open(); err != nil {
		return FlushResult{Key: key}, err
	}
	defer st.closeFiles()
	n := uint64(len(st.pending))
	if err := st.compact("delete"); err != nil {
		return FlushResult{Key: key}, err
	}
	return FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.canon.size}, nil
}

// NotInTrash is the error for a restore that finds nothing to restore;
// key.ProjectKey may be empty (no project's trash holds it).
func NotInTrash(key layout.Key) error {
	where := "the trash"
	if key.ProjectKey != "" {
		where += " of project " + key.ProjectKey
	}
	if key.Subpath != "" {
		return fmt.Errorf("no deleted subagent transcript %s of session %s in %s (only one deleted on its own is there; a whole session's comes back with it): %w", key.Subpath, key.SessionID, where, errdefs.ErrNotFound)
	}
	return fmt.Errorf("no deleted session %s in %s: %w", key.SessionID, where, errdefs.ErrNotFound)
}

// trashSubpath is how a lone subagent's subpath ends its trash entry's
// name.
func trashSubpath(subpath string) string { return strings.ReplaceAll(subpath, "/", "_") }
