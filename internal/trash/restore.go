package trash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// RestoreOptions choose what a restore brings back.
type RestoreOptions struct {
	// All brings back every trashed copy of the session, oldest first,
	// instead of only the newest.
	All bool
}

// RestoreOutcome tells what a restore did.
type RestoreOutcome struct {
	Copies int // trashed copies brought back
	// Merged: the session existed again (its agent went on writing after
	// the delete), and the trashed entries were merged into it.
	Merged bool
	// Entries are the transcript lines brought back from the trash;
	// Duplicates the lines dropped because the session, or an older copy,
	// held the same entry.
	Entries, Duplicates uint64
}

// Restore brings back the newest trashed copy of key's session
// (RestoreCopies without options).
func (t *Trash) Restore(ctx context.Context, key layout.Key) error {
	_, err := t.RestoreCopies(ctx, key, RestoreOptions{})
	return err
}

// RestoreCopies brings back the newest trashed copy of key's session, or
// with opt.All every one, oldest first. Where the session is not there,
// its files move back as they are. Where it exists again (an agent that
// kept appending after the delete recreated it), the copies are merged
// into it instead: each transcript gets its trashed entries first, then
// its own, every entry once (mergeTranscript); other files (sidecars, the
// archive mark) come back only where the session has none of its own.
//
// Like Delete it locks the session's writers out, compacts what they
// logged, and records every move and merge in a durable intent first, so a
// crash or a failing disk midway leaves the session as it was or as the
// restore makes it once finished (by a retried restore or the next start),
// never with an entry lost or twice.
func (t *Trash) RestoreCopies(ctx context.Context, key layout.Key, opt RestoreOptions) (RestoreOutcome, error) {
	var out RestoreOutcome
	if err := key.Validate(); err != nil {
		return out, err
	}
	unlock, err := t.lockFamily(key, "restored")
	if err != nil {
		return out, err
	}
	defer unlock()
	done, err := t.finishPending(key)
	if err != nil {
		return out, err
	}
	// A restore of this session interrupted before is done now: it was
	// this very one when it took the same copies, or when none is left.
	again := done != nil && done.Op == opRestore && done.Subpath == key.Subpath
	doneOutcome := func() RestoreOutcome {
		return RestoreOutcome{Copies: max(1, len(done.Entries)), Merged: len(done.Merges) > 0}
	}
	if again && done.All == opt.All {
		return doneOutcome(), nil
	}
	entries, err := t.entries(key)
	if err != nil {
		return out, fmt.Errorf("restore %s: %w", key, err)
	}
	if len(entries) == 0 {
		if again {
			return doneOutcome(), nil
		}
		return out, NotFound(key)
	}
	if !opt.All {
		entries = entries[len(entries)-1:]
	}
	if out.Merged, err = t.sessions.Exists(key); err != nil {
		return out, err
	}
	// Entries still logged for the session go into its files first: the
	// merge reads the files.
	if err := t.sessions.CompactLogged(key); err != nil {
		return out, err
	}
	p := &restorePlan{}
	if err := t.planRestore(p, t.cfg.Layout.ProjectDir(key.ProjectKey), entries, ""); err != nil {
		return out, fmt.Errorf("restore %s: %w", key, err)
	}
	in := &intent{Op: opRestore, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath,
		Moves: p.moves, Merges: p.merges, Entries: entries, All: opt.All}
	err = t.run(in)
	// Even a restore that failed midway may have moved files back.
	t.sessions.Moved(key, false)
	if err != nil {
		return out, fmt.Errorf("restore %s: %w", key, err)
	}
	out.Copies = len(entries)
	out.Entries = p.movedLines + in.merged.restored
	out.Duplicates = in.merged.dropped
	t.log.Info("restored session", zap.Stringer("session", key), zap.Int("copies", out.Copies), zap.Bool("merged", out.Merged),
		zap.Uint64("entries", out.Entries), zap.Uint64("duplicates", out.Duplicates))
	return out, nil
}

// restorePlan is what a restore does: moves of what comes back as it is,
// merges of transcripts the session has again or that several copies
// hold.
type restorePlan struct {
	moves      [][2]string
	merges     []mergeStep
	movedLines uint64 // lines of the transcripts moved back whole
}

// planRestore plans the restore of rel, a folder in each of roots (trash
// entries, oldest first), into the live folder live/rel. What the session
// lacks and one copy holds moves back whole (a folder at once); a
// transcript the session has, or several copies hold, is merged; any other
// file comes back from the newest copy holding it where the session has
// none (where it has, its own stays and the trashed ones go with the
// trash).
func (t *Trash) planRestore(p *restorePlan, live string, roots []string, rel string) error {
	FS := t.cfg.FS
	type held struct {
		root string
		dir  bool
	}
	holders := map[string][]held{}
	for _, r := range roots {
		ents, err := FS.ReadDir(filepath.Join(r, rel))
		if err != nil {
			return errdefs.FromIO(err)
		}
		for _, e := range ents {
			holders[e.Name()] = append(holders[e.Name()], held{r, e.IsDir()})
		}
	}
	names := make([]string, 0, len(holders))
	for n := range holders {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		hs, r := holders[n], filepath.Join(rel, n)
		dst := filepath.Join(live, r)
		fi, err := FS.Lstat(dst)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errdefs.FromIO(err)
		}
		dirs, paths := 0, make([]string, len(hs))
		for i, h := range hs {
			paths[i] = filepath.Join(h.root, r)
			if h.dir {
				dirs++
			}
		}
		newest := paths[len(paths)-1]
		_, transcript := t.cfg.Layout.ParseTranscriptPath(dst)
		transcript = transcript && dirs == 0
		switch {
		case !exists && len(hs) == 1:
			p.moves = append(p.moves, [2]string{newest, dst})
			if err := t.countMoved(p, newest); err != nil {
				return err
			}
		case dirs == len(hs) && (!exists || fi.IsDir()):
			var rs []string
			for _, h := range hs {
				rs = append(rs, h.root)
			}
			if err := t.planRestore(p, live, rs, r); err != nil {
				return err
			}
		case dirs > 0 || transcript && exists && !fi.Mode().IsRegular():
			// A folder where a file is (or the other way round), or a
			// link where a transcript goes: dropping either side could
			// lose entries, and sessiond never writes through a link.
			return fmt.Errorf("%s and its trashed copies %v are not all files or all folders; move it away (or merge by hand) before restoring: %w",
				dst, paths, errdefs.ErrAlreadyExists)
		case transcript:
			p.merges = append(p.merges, mergeStep{Dst: dst, Srcs: paths})
		case !exists:
			p.moves = append(p.moves, [2]string{newest, dst})
		}
		// Otherwise the session has a file of its own there (a sidecar,
		// the archive mark): it is kept, the trashed ones go with the
		// trash.
	}
	return nil
}

// countMoved adds the lines of the transcripts at path (a file or a
// folder moved back whole) to p.movedLines.
func (t *Trash) countMoved(p *restorePlan, path string) error {
	count := func(f string) error {
		if !strings.HasSuffix(f, layout.TranscriptExt) {
			return nil
		}
		n, err := countLines(t.cfg.FS, f)
		p.movedLines += n
		return errdefs.FromIO(err)
	}
	fi, err := t.cfg.FS.Lstat(path)
	if err != nil {
		return errdefs.FromIO(err)
	}
	if !fi.IsDir() {
		if fi.Mode().IsRegular() {
			return count(path)
		}
		return nil
	}
	err = fsys.Walk(t.cfg.FS, path, func(f string, d fs.DirEntry) error {
		if d.Type().IsRegular() {
			return count(f)
		}
		return nil
	})
	return errdefs.FromIO(err)
}
