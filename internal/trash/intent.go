package trash

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Intent operations.
const (
	opDelete  = "delete"
	opPurge   = "purge"
	opRestore = "restore"
)

// intent is a delete, purge or restore written down, durably, before it
// moves anything. A session is several names (its transcript, its session
// folder, a subagent's sidecar) that no single rename moves together, so
// without it a crash or a failing disk midway would leave the session half
// in place and half in the trash. Every step is idempotent, so whoever
// finds the intent (the next Delete or Restore of the session, or Recover
// at the next start) runs it again to the end and only then removes it.
// Meanwhile the session refuses writers: one could otherwise recreate a
// file the intent is about to move.
type intent struct {
	Op         string `json:"op"`
	ProjectKey string `json:"project_key"`
	SessionID  string `json:"session_id"`
	Subpath    string `json:"subpath,omitempty"`
	// Trash is the trash entry a delete fills, or the one a restore
	// empties and removes.
	Trash string `json:"trash,omitempty"`
	// Moves are [from, to] pairs; an empty to removes from (purge).
	Moves [][2]string `json:"moves"`
	// Merges are the transcripts a restore rebuilds from trashed copies
	// and the live file (see mergeTranscript), after the moves.
	Merges []mergeStep `json:"merges,omitempty"`
	// Entries are the trash entries a restore empties, oldest first; they
	// are removed last, newest first (see mergeTranscript for why).
	Entries []string `json:"entries,omitempty"`
	// All: the restore took every trashed copy (RestoreOptions.All).
	All bool `json:"all,omitempty"`

	path   string      // where the intent is stored
	merged mergeCounts // what this process's merges did
}

func (in *intent) key() layout.Key {
	return layout.Key{ProjectKey: in.ProjectKey, SessionID: in.SessionID, Subpath: in.Subpath}
}

func (t *Trash) intentDir() string { return filepath.Join(t.cfg.Layout.StateDir, "intents") }

// run records in durably, then carries it out. If carrying it out fails,
// the intent stays pending (on disk and in t.intents) until it is
// finished.
func (t *Trash) run(in *intent) error {
	if err := t.writeIntent(in); err != nil {
		return err
	}
	return t.finishIntent(in)
}

// maxIntentBytes bounds an intent file: a session with tens of thousands
// of subagent transcripts fits (a few hundred bytes a file).
const maxIntentBytes = 64 << 20

func (t *Trash) writeIntent(in *intent) error {
	FS, dir := t.cfg.FS, t.intentDir()
	if err := fsys.MkdirAll(FS, dir, 0o700); err != nil {
		return fmt.Errorf("record the %s: %w", in.Op, errdefs.FromIO(err))
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if len(body) > maxIntentBytes {
		// Refused before anything moves: an intent recovery could not
		// read back would leave the session half moved after a crash.
		return fmt.Errorf("the %s of %s would move %d files, more than one operation records (its intent is %d bytes, over %d); move some of its subagent transcripts away first: %w",
			in.Op, in.key(), len(in.Moves)+len(in.Merges), len(body), maxIntentBytes, errdefs.ErrFailedPrecondition)
	}
	name := uuid.NewString() + ".json"
	in.path = filepath.Join(dir, name)
	err = fsys.WriteFileAtomic(FS, in.path, "."+name+".tmp", 0o600, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		// The rename may have happened even though a later step failed:
		// then the intent will be found and carried out, so it must be
		// pending already.
		if _, serr := FS.Lstat(in.path); !errors.Is(serr, fs.ErrNotExist) {
			t.setPending(in)
		}
		return fmt.Errorf("record the %s: %w", in.Op, errdefs.FromIO(err))
	}
	return nil
}

func (t *Trash) setPending(in *intent) {
	t.mu.Lock()
	t.intents[familyOf(in.key())] = in
	t.mu.Unlock()
}

// pendingIntent returns the unfinished intent of k's session, if any.
func (t *Trash) pendingIntent(k layout.Key) *intent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.intents[familyOf(k)]
}

// finishPending finishes the pending intent of k's session, if there is
// one, and returns it. The caller holds the family lock.
func (t *Trash) finishPending(k layout.Key) (*intent, error) {
	in := t.pendingIntent(k)
	if in == nil {
		return nil, nil
	}
	if err := t.finishIntent(in); err != nil {
		return in, fmt.Errorf("an interrupted %s of %s could not be finished: %w", in.Op, in.key(), err)
	}
	t.log.Info("finished an interrupted operation", zap.String("op", in.Op), zap.Stringer("session", in.key()))
	return in, nil
}

// finishIntent carries out every step of in that is not done yet, makes
// all of it durable, then removes the intent.
func (t *Trash) finishIntent(in *intent) error {
	t.setPending(in)
	for _, mv := range in.Moves {
		if err := t.redoMove(mv[0], mv[1]); err != nil {
			return err
		}
	}
	for _, mg := range in.Merges {
		c, err := t.mergeTranscript(mg)
		if err != nil {
			return err
		}
		in.merged.add(c)
	}
	if in.Op == opRestore {
		// Newest first: while they go, the copies left of each merged
		// transcript stay the oldest ones, which a merge done again reads
		// as the start of the file it made (mergeTranscript).
		entries := append([]string{in.Trash}, in.Entries...)
		for i := len(entries) - 1; i >= 0; i-- {
			if entries[i] == "" {
				continue
			}
			if err := fsys.RemoveAll(t.cfg.FS, entries[i]); err != nil {
				return fmt.Errorf("clear trash entry %s: %w", entries[i], errdefs.FromIO(err))
			}
		}
		t.changed()
	}
	if err := t.cfg.FS.Remove(in.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errdefs.FromIO(err)
	}
	if err := t.cfg.FS.SyncDir(filepath.Dir(in.path)); err != nil {
		return errdefs.FromIO(err)
	}
	t.mu.Lock()
	if t.intents[familyOf(in.key())] == in {
		delete(t.intents, familyOf(in.key()))
	}
	t.mu.Unlock()
	return nil
}

// redoMove moves from to to (removes from when to is ""), or makes durable
// what an earlier attempt already did.
func (t *Trash) redoMove(from, to string) error {
	FS := t.cfg.FS
	// syncParents makes a move or removal seen here durable: an earlier
	// attempt that crashed may have renamed without syncing, and what the
	// page cache shows is not yet on disk.
	syncParents := func() error {
		for _, p := range []string{to, from} {
			if p == "" {
				continue
			}
			err := FS.SyncDir(filepath.Dir(p))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return errdefs.FromIO(err)
			}
		}
		return nil
	}
	sfi, err := FS.Lstat(from)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Moved (or removed) already; a move across filesystems
		// interrupted while it removed the source leaves it set aside,
		// its copy in place.
		if err := fsys.RemoveAll(FS, fsys.MovedAside(from)); err != nil {
			return errdefs.FromIO(err)
		}
		return syncParents()
	case err != nil:
		return errdefs.FromIO(err)
	case to == "":
		return errdefs.FromIO(fsys.RemoveAll(FS, from))
	}
	dfi, err := FS.Lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.FromIO(fsys.Move(FS, from, to))
	case err != nil:
		return errdefs.FromIO(err)
	}
	// Both names exist: the rename reached the target's folder, but the
	// crash came before the source's folder was synced, so both name one
	// file. Drop the old name only when that is provably so.
	if !sfi.Mode().IsRegular() || !dfi.Mode().IsRegular() {
		return fmt.Errorf("both %s and %s exist; left for a human to merge: %w", from, to, errdefs.ErrAlreadyExists)
	}
	same, err := sameContent(FS, from, to)
	if err != nil {
		return errdefs.FromIO(err)
	}
	if !same {
		return fmt.Errorf("both %s and %s exist with different content; left for a human to merge: %w", from, to, errdefs.ErrAlreadyExists)
	}
	if err := FS.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errdefs.FromIO(err)
	}
	return syncParents()
}

// sameContent compares two files byte by byte.
func sameContent(FS fsys.FS, a, b string) (bool, error) {
	fa, err := FS.OpenFile(a, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := FS.OpenFile(b, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		ea := errors.Is(erra, io.EOF) || errors.Is(erra, io.ErrUnexpectedEOF)
		eb := errors.Is(errb, io.EOF) || errors.Is(errb, io.ErrUnexpectedEOF)
		// A failed read first: it proves nothing about the content, and
		// "different" would leave the session for a human for nothing.
		switch {
		case erra != nil && !ea:
			return false, erra
		case errb != nil && !eb:
			return false, errb
		case !bytes.Equal(ba[:na], bb[:nb]):
			return false, nil
		case ea || eb:
			return ea && eb, nil
		}
	}
}

// Recover runs, at start, every intent a crash left unfinished, after
// removing the temp files of intents a crash cut short. The writers call
// it before any writer of those sessions may start. It returns the
// intents that could not be finished (their sessions keep refusing
// writers) or that are damaged (said at Error level and left in place for
// a human). An intent that cannot be read at all is err: its session is
// not known, so no writer could be kept from recreating a file it is about
// to move, and sessiond must not serve until it is read.
func (t *Trash) Recover() (failed []error, err error) {
	FS, dir := t.cfg.FS, t.intentDir()
	t.sweepTemps()
	ents, err := FS.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Unreadable("the interrupted deletes and restores in "+dir, err)
	}
	synced := false
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		// A process killed right after writing an intent may have left it
		// in the page cache only; acting on it before it is durable would
		// let a power loss take it away halfway through its moves.
		if !synced {
			if err := FS.SyncDir(dir); err != nil {
				return failed, fmt.Errorf("sync %s: %w", dir, errdefs.FromIO(err))
			}
			synced = true
		}
		in, err := t.readIntent(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // finished by whoever removed it
		case errors.Is(err, errdefs.ErrCorrupt):
			t.log.Error("an intent of an interrupted delete or restore is damaged; it is left in place for a human", zap.String("intent", filepath.Join(dir, name)), zap.Error(err))
			failed = append(failed, fmt.Errorf("intent %s: %w", name, err))
			continue
		case err != nil:
			return failed, err
		}
		if err := t.finishIntent(in); err != nil {
			t.log.Error("an interrupted delete or restore could not be finished", zap.String("intent", name), zap.Error(err))
			failed = append(failed, fmt.Errorf("intent %s: %w", name, err))
			continue
		}
		t.log.Info("finished an interrupted operation", zap.String("op", in.Op), zap.Stringer("session", in.key()))
	}
	return failed, nil
}

// sweepTemps removes the temp files of intents whose write a crash cut
// short: never renamed into place, so never acted on.
func (t *Trash) sweepTemps() {
	dir := t.intentDir()
	ents, _ := t.cfg.FS.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".json.tmp") {
			continue
		}
		if err := t.cfg.FS.Remove(filepath.Join(dir, n)); err == nil {
			t.log.Info("removed a temp file left by a crash", zap.String("file", filepath.Join(dir, n)))
		}
	}
}

// readIntent loads and checks an intent file. Every path in it must lie
// inside the transcripts root or the state folder: the file is trusted no
// further than that.
func (t *Trash) readIntent(path string) (*intent, error) {
	f, err := t.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, errdefs.Unreadable("the intent "+path, err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxIntentBytes+1))
	if err != nil {
		return nil, errdefs.Unreadable("the intent "+path, err)
	}
	if len(body) > maxIntentBytes {
		return nil, fmt.Errorf("is over %d bytes, more than sessiond writes: %w", maxIntentBytes, errdefs.ErrCorrupt)
	}
	if err := f.Sync(); err != nil { // see Recover: durable before acted on
		return nil, fmt.Errorf("sync the intent %s: %w", path, errdefs.FromIO(err))
	}
	in := &intent{path: path}
	if err := json.Unmarshal(body, in); err != nil {
		return nil, fmt.Errorf("does not decode: %v: %w", err, errdefs.ErrCorrupt)
	}
	if err := in.key().Validate(); err != nil {
		return nil, fmt.Errorf("names no session sessiond could hold (%v): %w", err, errdefs.ErrCorrupt)
	}
	if in.Op != opDelete && in.Op != opPurge && in.Op != opRestore {
		return nil, fmt.Errorf("unknown operation %q: %w", in.Op, errdefs.ErrCorrupt)
	}
	inside := func(p string) bool {
		for _, root := range []string{t.cfg.Layout.ProjectsDir(), t.cfg.Layout.StateDir} {
			if strings.HasPrefix(p, root+string(filepath.Separator)) && filepath.Clean(p) == p {
				return true
			}
		}
		return false
	}
	for _, e := range append([]string{in.Trash}, in.Entries...) {
		if e != "" && !inside(e) {
			return nil, fmt.Errorf("trash entry %s lies outside sessiond's folders: %w", e, errdefs.ErrCorrupt)
		}
	}
	for _, mg := range in.Merges {
		if !inside(mg.Dst) || len(mg.Srcs) == 0 || in.Op != opRestore {
			return nil, fmt.Errorf("merge into %q lies outside sessiond's folders: %w", mg.Dst, errdefs.ErrCorrupt)
		}
		for _, s := range mg.Srcs {
			if !inside(s) {
				return nil, fmt.Errorf("merge from %q lies outside sessiond's folders: %w", s, errdefs.ErrCorrupt)
			}
		}
	}
	for _, mv := range in.Moves {
		if !inside(mv[0]) || mv[1] != "" && !inside(mv[1]) || mv[1] == "" && in.Op != opPurge {
			return nil, fmt.Errorf("move %q lies outside sessiond's folders: %w", mv, errdefs.ErrCorrupt)
		}
	}
	t.setPending(in)
	return in, nil
}
