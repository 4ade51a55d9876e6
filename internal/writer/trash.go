package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
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
	if logged, _ := m.logs.exists(key); logged {
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
	if err := m.runIntent(in); err != nil {
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
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

// Restore brings back the newest trashed copy of key's session. It refuses
// when a session with that id exists again. Like Delete, it records its
// moves in a durable intent first, so it is never left half done.
func (m *Manager) Restore(ctx context.Context, key layout.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	unlock, err := m.lockFamily(key, "restored")
	if err != nil {
		return err
	}
	defer unlock()
	if done, err := m.finishPending(key); err != nil {
		return err
	} else if done != nil && done.Op == opRestore && done.Subpath == key.Subpath {
		return nil // this very restore was interrupted before; it is done now
	}
	entry, err := m.newestTrash(key)
	if err != nil {
		return err
	}
	L, FS := m.cfg.Layout, m.cfg.FS
	if ok, err := m.existsOnDiskErr(key); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("session %s exists again; delete or move it before restoring: %w", key, errdefs.ErrAlreadyExists)
	}
	// What Delete moved into the trash entry, and where it goes back.
	var moves [][2]string
	if key.Subpath == "" {
		if _, err := FS.Lstat(L.SessionDir(key)); err == nil {
			return fmt.Errorf("session folder %s exists again; move it away before restoring: %w", L.SessionDir(key), errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		moves = [][2]string{{key.SessionID + ".jsonl", L.TranscriptPath(key)}, {key.SessionID, L.SessionDir(key)}}
	} else {
		p := L.TranscriptPath(key)
		rel := filepath.Join(key.SessionID, key.Subpath)
		meta := strings.TrimSuffix(p, ".jsonl") + ".meta.json"
		if _, err := FS.Lstat(meta); err == nil {
			return fmt.Errorf("%s exists again; move it away before restoring: %w", meta, errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		moves = [][2]string{{rel + ".jsonl", p}, {rel + ".meta.json", meta}, {rel + layout.StoreExt, L.StorePath(key)}}
	}
	in := &intent{Op: opRestore, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath, Trash: entry}
	for _, mv := range moves {
		src := filepath.Join(entry, mv[0])
		if _, err := FS.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		in.Moves = append(in.Moves, [2]string{src, mv[1]})
	}
	if err := m.runIntent(in); err != nil {
		return fmt.Errorf("restore %s: %w", key, err)
	}
	return nil
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

// TrashedProjects lists the projects whose trash holds sessionID (or,
// with a subpath, that subagent transcript of it, deleted on its own).
func (m *Manager) TrashedProjects(sessionID, subpath string) []string {
	root := filepath.Join(m.cfg.Layout.StateDir, "trash")
	projects, _ := m.cfg.FS.ReadDir(root)
	var out []string
	for _, p := range projects {
		k := layout.Key{ProjectKey: p.Name(), SessionID: sessionID, Subpath: subpath}
		if _, err := m.newestTrash(k); err == nil {
			out = append(out, p.Name())
		}
	}
	return out
}

func (m *Manager) newestTrash(key layout.Key) (string, error) {
	dir := filepath.Join(m.cfg.Layout.StateDir, "trash", key.ProjectKey)
	ents, err := m.cfg.FS.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", errdefs.FromIO(err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || !strings.HasPrefix(n, key.SessionID+"-") {
			continue
		}
		// A whole session's entry is <sid>-<stamp>, a lone subagent's
		// <sid>-<stamp>-<subpath with / as _> (Delete; the stamp has no
		// "-"), and the names sort by stamp.
		stamp, sub, lone := strings.Cut(n[len(key.SessionID)+1:], "-")
		if stamp == "" || lone != (key.Subpath != "") || lone && sub != trashSubpath(key.Subpath) {
			continue
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", NotInTrash(key)
	}
	sort.Strings(names)
	return filepath.Join(dir, names[len(names)-1]), nil
}
