package trash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Config is what the trash works with.
type Config struct {
	Layout layout.Layout
	FS     fsys.FS
	Clock  clock.Clock
	Logger *zap.Logger
	// Retention is how long a deleted copy stays before Purge removes it.
	Retention time.Duration
	// TempName names the file a restore's merge writes before renaming it
	// over dst: a name the writers' recovery sweeps when a crash leaves
	// it behind.
	TempName func(dst string) string
}

// Sessions is what the trash needs of the session writers. Every call
// comes while the session's family is locked (lockFamily), so no writer of
// it runs meanwhile.
type Sessions interface {
	// StopFamily makes every live writer of key's session (its main
	// transcript and its subagents) finish what is queued, compact and
	// exit. New writers are kept out by Admit meanwhile.
	StopFamily(key layout.Key) error
	// CompactLogged moves what the journal still holds of key (of every
	// subagent too, for a main key) into the files, and fails when it
	// cannot: the files must not move without those entries.
	CompactLogged(key layout.Key) error
	// Logged reports whether the journal holds entries of key.
	Logged(key layout.Key) bool
	// Exists reports whether key's transcript is there, telling "no" from
	// "could not look".
	Exists(key layout.Key) (bool, error)
	// NotFound is the error for a transcript that does not exist.
	NotFound(key layout.Key) error
	// Moved tells the writers' watchers that key's files moved: into the
	// trash (gone), or back from it with its whole family.
	Moved(key layout.Key, gone bool)
}

// family is a session with all its subagent transcripts: delete and
// restore move them together.
type family struct{ projectKey, sessionID string }

func familyOf(k layout.Key) family { return family{k.ProjectKey, k.SessionID} }

// Trash moves sessions into the trash and back, and keeps the trash.
type Trash struct {
	cfg      Config
	log      *zap.Logger
	sessions Sessions

	// mu guards what follows. The writers take it under their own
	// registry's lock (Admit), so it is never held across a call to
	// Sessions.
	mu sync.Mutex
	// busy holds the sessions whose files a delete or restore is moving;
	// no writer of theirs may start meanwhile.
	busy map[family]string
	// intents holds the deletes and restores that were interrupted and
	// must be finished before their sessions take writers again.
	intents map[family]*intent
	// purging holds the sessions one of whose trashed copies Purge is
	// removing; the channel closes when it is done.
	purging map[family]chan struct{}
	// count is Usage's last count, made at countAt, while gen (bumped by
	// every change sessiond makes to the trash) still is what it was.
	count   *Usage
	countAt time.Time
	gen     uint64
}

// New returns the trash of cfg.Layout, moving the files of the sessions s
// writes.
func New(cfg Config, s Sessions) *Trash {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Trash{cfg: cfg, log: cfg.Logger, sessions: s,
		busy: make(map[family]string), intents: make(map[family]*intent), purging: make(map[family]chan struct{})}
}

// BusyError refuses a writer of a session that a delete or restore is
// moving: a passing state, so it is ErrUnavailable.
type BusyError struct {
	ProjectKey, SessionID string
	Why                   string // "deleted", "restored"
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("session %s/%s is being %s; retry", e.ProjectKey, e.SessionID, e.Why)
}

func (e *BusyError) Unwrap() error { return errdefs.ErrUnavailable }

// Admit tells whether a writer of key may start: not while a delete or
// restore moves its session's files, nor while an interrupted one waits to
// be finished (a writer could recreate a file the intent is about to
// move). The writers ask it while they hold their registry's lock, so it
// takes no lock but the trash's own.
func (t *Trash) Admit(key layout.Key) error {
	f := familyOf(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if why, ok := t.busy[f]; ok {
		return &BusyError{ProjectKey: f.projectKey, SessionID: f.sessionID, Why: why}
	}
	if in := t.intents[f]; in != nil {
		return fmt.Errorf("session %s/%s: an interrupted %s must finish first; retry the %s: %w", key.ProjectKey, key.SessionID, in.Op, in.Op, errdefs.ErrUnavailable)
	}
	return nil
}

// lockFamily keeps every writer of k's session from starting until unlock,
// and stops those running: delete and restore move the files of the whole
// session. The family is marked busy before the writers are stopped, so a
// writer that Admit let in just before is among those stopped.
func (t *Trash) lockFamily(k layout.Key, why string) (unlock func(), err error) {
	f := familyOf(k)
	t.mu.Lock()
	// A purge of one of the session's trashed copies takes a moment and
	// must not run under a restore reading it: wait for it.
	for t.purging[f] != nil {
		done := t.purging[f]
		t.mu.Unlock()
		<-done
		t.mu.Lock()
	}
	if w, ok := t.busy[f]; ok {
		t.mu.Unlock()
		return nil, &BusyError{ProjectKey: f.projectKey, SessionID: f.sessionID, Why: w}
	}
	t.busy[f] = why
	t.mu.Unlock()
	unlock = func() {
		t.mu.Lock()
		delete(t.busy, f)
		t.mu.Unlock()
	}
	if err := t.sessions.StopFamily(k); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// Delete moves a session to the trash under the state folder (or removes
// it with purge): the main transcript with its session folder (subagents,
// archive mark) when key is a main session, or one subagent transcript
// (with its .meta.json sidecar). Pending entries are compacted first, so
// the trash holds everything that was acknowledged. It returns the trash
// entry ("" with purge).
//
// The session's files are several names, which no single rename moves at
// once, so the moves are first recorded in a durable intent (see intent):
// a crash or a failing disk midway never leaves the session half in place
// and half in the trash for good. The next Delete or Restore of the
// session, or the next start, finishes the moves; until then the session
// refuses writers.
func (t *Trash) Delete(ctx context.Context, key layout.Key, purge bool) (string, error) {
	if err := key.Validate(); err != nil {
		return "", err
	}
	unlock, err := t.lockFamily(key, "deleted")
	if err != nil {
		return "", err
	}
	defer unlock()
	if done, err := t.finishPending(key); err != nil {
		return "", err
	} else if done != nil && done.Op != opRestore && done.Subpath == key.Subpath && (done.Op == opPurge) == purge {
		// This very delete was interrupted before; it is done now.
		return done.Trash, nil
	}
	moves := t.deleteMoves(key)
	if err := t.deleteFound(key, moves); err != nil {
		return "", err
	}
	// The writers were compacted as they closed: the journal holds nothing
	// that is not in the files, except for sessions whose compaction failed
	// (then it is retried here, and the delete stops if it fails again).
	if err := t.sessions.CompactLogged(key); err != nil {
		return "", err
	}
	in := t.deleteIntent(key, moves, purge)
	err = t.run(in)
	if !purge {
		t.changed()
	}
	if err != nil {
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	t.sessions.Moved(key, true)
	t.log.Info("deleted session", zap.Stringer("session", key), zap.Bool("purge", purge), zap.String("trash", in.Trash))
	return in.Trash, nil
}

// deleteMoves lists what a delete of key moves (or removes), each with
// where it goes relative to the trash entry.
func (t *Trash) deleteMoves(key layout.Key) [][2]string {
	L := t.cfg.Layout
	if key.Subpath == "" {
		return [][2]string{{L.TranscriptPath(key), key.SessionID + ".jsonl"}, {L.SessionDir(key), key.SessionID}}
	}
	p := L.TranscriptPath(key)
	rel := filepath.Join(key.SessionID, key.Subpath)
	return [][2]string{{p, rel + ".jsonl"},
		{strings.TrimSuffix(p, ".jsonl") + ".meta.json", rel + ".meta.json"},
		{L.StorePath(key), rel + layout.StoreExt}}
}

// deleteFound fails with not found when key has neither files to move nor
// entries in the journal.
func (t *Trash) deleteFound(key layout.Key, moves [][2]string) error {
	found := false
	for _, mv := range moves {
		if _, err := t.cfg.FS.Lstat(mv[0]); err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", key, errdefs.FromIO(err))
		}
	}
	if found || t.sessions.Logged(key) {
		return nil
	}
	return t.sessions.NotFound(key)
}

// deleteIntent writes down a delete of key: each of moves that is there,
// into a new trash entry (or removed, with purge).
func (t *Trash) deleteIntent(key layout.Key, moves [][2]string, purge bool) *intent {
	in := &intent{Op: opDelete, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath}
	if purge {
		in.Op = opPurge
	} else {
		in.Trash = filepath.Join(t.root(), key.ProjectKey, key.SessionID+"-"+t.cfg.Clock.Now().UTC().Format(stampLayout))
		if key.Subpath != "" {
			in.Trash += "-" + loneName(key.Subpath)
		}
	}
	for _, mv := range moves {
		if _, err := t.cfg.FS.Lstat(mv[0]); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		dst := ""
		if !purge {
			dst = filepath.Join(in.Trash, mv[1])
		}
		in.Moves = append(in.Moves, [2]string{mv[0], dst})
	}
	return in
}

// NotFound is the error for a restore that finds nothing to restore;
// key.ProjectKey may be empty (no project's trash holds it).
func NotFound(key layout.Key) error {
	where := "the trash"
	if key.ProjectKey != "" {
		where += " of project " + key.ProjectKey
	}
	if key.Subpath != "" {
		return fmt.Errorf("no deleted subagent transcript %s of session %s in %s (only one deleted on its own is there; a whole session's comes back with it): %w", key.Subpath, key.SessionID, where, errdefs.ErrNotFound)
	}
	return fmt.Errorf("no deleted session %s in %s: %w", key.SessionID, where, errdefs.ErrNotFound)
}

// loneName is how a lone subagent's subpath ends its trash entry's name.
func loneName(subpath string) string { return strings.ReplaceAll(subpath, "/", "_") }
