package session

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/space"
	"github.com/sessiond/sessiond/internal/writer/files"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// tempPrefix names this session's compaction temp files. They start with a
// dot and end in ".tmp", so no reader ever takes them for a transcript.
func (st *State) tempPrefix() string { return CompactTempPrefix(st.canonPath) }

// CompactTempPrefix starts the names of the temp files that replace the
// transcript at canonPath (a restore's merge uses them too).
func CompactTempPrefix(canonPath string) string {
	base := strings.TrimSuffix(filepath.Base(canonPath), ".jsonl")
	if len(base) > 200 {
		// Keep the temp name within the 255-byte limit of a file name while
		// still unique to this transcript.
		base = fmt.Sprintf("%s-%08x", base[:200], crc32.Checksum([]byte(base), files.Castagnoli))
	}
	return "." + base + ".compact-"
}

// newGeneration replaces the session's log with an empty one whose base is
// the canonical file as it is now.
func (st *State) newGeneration() error {
	// The journal about to be replaced may be the only copy of batch ids and a
	// summary: they go to the sidecar first.
	if err := st.saveSidecars(); err != nil {
		return err
	}
	l, err := st.Journal.Create(st.key, st.canon.inJournal(), st.j != nil)
	if err != nil {
		if st.j != nil {
			// Create may have renamed the new journal over the old one
			// before it failed, leaving this writer's handle on an
			// unlinked file: an entry appended through it would vanish at
			// the next crash. Only a reopen from disk knows which journal
			// is there.
			st.failed = err
		}
		return err
	}
	if st.j != nil {
		st.j.Close()
	}
	st.j = l
	st.pending = nil
	st.pendingBytes = 0
	return nil
}

func (st *State) sizeDue() bool {
	return st.pendingBytes >= st.Config.MinCompactBytes &&
		float64(st.pendingBytes) >= st.Config.CompactRatio*float64(st.canon.size)
}

// newDue: the transcript holds nothing yet (a new session, or one
// emptied), so a compaction costs only the journaled entries, and it
// puts the session where the official readers list it: an idle session
// gets it at once (loop.due).
func (st *State) newDue() bool {
	return st.pendingBytes > 0 && st.canon.size == 0
}

// staleDue: the oldest journaled entry has waited within, and the
// rewrite is worth it: the file is small (IdleFloor) or the journal holds
// at least 1/IdleRatio of it. A large file fed a trickle waits for the
// writer's retirement instead (loop.idleWork), so a few lines never cost
// a rewrite of many megabytes.
func (st *State) staleDue(now time.Time, within time.Duration) bool {
	return st.pendingBytes > 0 && now.Sub(st.pendingSince) >= within &&
		(st.canon.size <= st.Config.IdleFloor || float64(st.pendingBytes)*st.Config.IdleRatio >= float64(st.canon.size))
}

// Reason says why a compaction runs (logged with it).
type Reason string

// The reasons sessiond compacts for.
const (
	// Started by sessiond itself (automatic).
	ReasonSize    Reason = "size"    // the log holds a large share of the file (append.go)
	ReasonIdle    Reason = "idle"    // a new transcript, once its writer is idle (loop.go)
	ReasonStale   Reason = "stale"   // the oldest logged entry reached the bound (loop.go)
	ReasonRetire  Reason = "retire"  // the writer retires
	ReasonRelieve Reason = "relieve" // the log is over its bound and the session holds its oldest segment
	// Asked for.
	ReasonFlush    Reason = "flush"    // a caller's flush (sessionctl flush, the API): it takes another program's appended lines in first
	ReasonRetry    Reason = "retry"    // the space watcher retries one that waited for room
	ReasonReplay   Reason = "replay"   // recovery replays the log
	ReasonRepair   Reason = "repair"   // a repair puts lines back
	ReasonDelete   Reason = "delete"   // a delete saves the session to the trash
	ReasonShutdown Reason = "shutdown" // SIGTERM
)

// automatic reports whether a compaction for this reason is one sessiond
// starts by itself (after appends, when idle, before retiring, under the
// log's pressure), not one a caller, recovery or the shutdown asks for:
// while a session's compaction waits for space, only the watcher tries
// the automatic ones (package space).
func automatic(reason Reason) bool {
	switch reason {
	case ReasonSize, ReasonIdle, ReasonStale, ReasonRetire, ReasonRelieve:
		return true
	}
	return false
}

// Compact is compactNow, with what the disk space says: a compaction
// waiting for space is not tried by the automatic rules, one that fails
// for want of space waits for it (space.Space.CompactFailed), and one that
// succeeds ends the session's wait and its recovery failure.
func (st *State) Compact(reason Reason) error {
	if automatic(reason) && st.Space.Waiting(st.key) {
		return nil
	}
	need := st.canon.size + st.pendingBytes
	err := st.compactInSlot(reason)
	if err != nil && st.failed == nil && errors.Is(err, errdefs.ErrNoSpace) && st.Space.YieldRetained(space.FailedDir(err, st.dir)) {
		// The journal's retained segments gave their room back (package space):
		// the compaction may fit now, and a caller's flush need not
		// fail for room sessiond could free itself.
		err = st.compactInSlot(reason)
	}
	switch {
	case err != nil:
		return st.Space.CompactFailed(st.key, st.dir, need, err)
	case len(st.pending) == 0:
		st.Space.Compacted(st.key)
		st.Health.Healthy(st.key)
	}
	return nil
}

// errCompactAborted: Close ran out of time while the compaction waited
// for a slot; the journal keeps the entries for the next start's replay.
var errCompactAborted = fmt.Errorf("sessiond's time to stop ran out before this compaction could start; the journal keeps its entries for the next start: %w", errdefs.ErrUnavailable)

// compactInSlot is compactNow once one of the Config.CompactParallel
// slots is free (or at once when the writer's loop holds one already).
// A compaction waiting here blocks only its own session, and only when
// asked for (a flush, a size compaction in an append's turn, a stop):
// the idle ones wait in the loop's select instead (Writer.Run). The slot
// holders wait on nothing but the disk and the journal, never on
// another session, so the wait always ends, or Close's time runs out.
func (st *State) compactInSlot(reason Reason) error {
	if st.slotHeld {
		return st.compactNow(reason)
	}
	select {
	case st.CompactSlots <- struct{}{}:
	case <-st.abort:
		return fmt.Errorf("compact %s: %w", st.key, errCompactAborted)
	}
	defer func() { <-st.CompactSlots }()
	return st.compactNow(reason)
}

// compactNow moves the journaled entries into the canonical file: a temp file
// in the same folder gets the current content plus the entries, is synced,
// the entries are added to the ledger (package ledger), a marker naming the new
// content is journaled, the temp file is renamed over the canonical one,
// the folder is synced, and a new journal generation starts. A crash at
// any point leaves either the old file with the journal still holding the
// entries, or the new file with a marker that tells recovery the entries
// are already in it; either way the ledger or the journal lists them.
func (st *State) compactNow(reason Reason) error {
	if st.failed != nil {
		return st.failed
	}
	// Lines appended late to the file the last compaction replaced join
	// the pending ones first (foreign.go).
	st.rescueLate(true)
	st.held.Drop()
	if len(st.pending) == 0 || st.failed != nil {
		return st.failed
	}
	if done, err := st.catchUpForeign(); done || err != nil {
		return err
	}
	if err := fsys.MkdirAll(st.fs, st.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", st.dir, errdefs.FromIO(err))
	}
	// Keep the current file open across the rename: an agent appending to
	// it directly at that moment writes to this inode, and what it wrote
	// is rescued below instead of vanishing with the old file.
	var src fsys.File
	if st.canonExists && st.canon.size > 0 {
		f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
		if err != nil {
			return fmt.Errorf("compact %s: %w", st.key, errdefs.FromIO(err))
		}
		src = f
		defer func() {
			if src != nil {
				src.Close()
			}
		}()
	}
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	newFP, acked, moved, err := st.writeTemp(tmpPath, src)
	if err != nil {
		st.fs.Remove(tmpPath)
		return fmt.Errorf("compact %s: %w", st.key, errdefs.FromIO(err))
	}
	if st.canonStatChanged() {
		// Someone appended while the temp file was written: start over, so
		// their lines are kept in place.
		st.fs.Remove(tmpPath)
		if depth := st.compactRetries; depth < 3 {
			st.compactRetries++
			defer func() { st.compactRetries = depth }()
			return st.compactNow(reason)
		}
		return fmt.Errorf("compact %s: the transcript keeps changing under another writer; will retry later: %w", st.key, errdefs.ErrUnavailable)
	}
	if err := st.beforeMarker(newFP, acked); err != nil {
		st.fs.Remove(tmpPath)
		return fmt.Errorf("compact %s: %w", st.key, err)
	}
	// From here on a failure leaves the disk in a state only recovery may
	// judge, so the writer fails and reopens from disk.
	if err := st.j.MarkCompacted(newFP.inJournal()); err != nil {
		st.fs.Remove(tmpPath)
		st.failed = err
		return fmt.Errorf("compact %s: mark journal: %w", st.key, errdefs.FromIO(err))
	}
	// Under a lease on the old file, closed at once if nobody opened it
	// (foreign.go).
	rep, err := st.renameOver(tmpPath, src)
	if rep.Closed {
		src = nil
	}
	if err != nil {
		st.fs.Remove(tmpPath)
		st.failed = err
		return fmt.Errorf("compact %s: rename into place: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return fmt.Errorf("compact %s: %w", st.key, errdefs.FromIO(err))
	}
	n, old := len(st.pending), st.canon
	if err := st.installed(newFP, moved); err != nil {
		return err
	}
	st.Stats.Compactions.Add(1)
	st.Stats.CompactedBytes.Add(uint64(newFP.size))
	st.log.Debug("compacted", zap.String("reason", string(reason)), zap.Int("entries", n),
		zap.Int64("from_bytes", old.size), zap.Int64("to_bytes", newFP.size))
	if rep.Old {
		// The replaced file: what another program appended to it during
		// the rename is rescued now; held (no lease said nobody else can
		// write to it), what it appends late too (foreign.go).
		f := src
		src = nil
		st.rescueAt = newFP.size
		if err := st.replaced(f, old, rep); err != nil {
			return err
		}
	}
	st.Publish()
	st.notifyChange()
	return nil
}

// catchUpForeign takes in what another program did to the file since the
// writer last saw it, before a compaction: lines it appended join the
// pending ones, and a rewrite is compared with the ledger. done: nothing
// is pending any more (the file held every entry), so the compaction is
// over.
func (st *State) catchUpForeign() (done bool, err error) {
	if err := st.checkPath(); err != nil {
		return false, err
	}
	// The CLI's lines found at open are noted before the compaction's
	// record names a file past them (shared.go).
	if err := st.noteOpenTail(); err != nil {
		return false, err
	}
	if ok, err := st.hasPrefix(st.canon); err != nil {
		return false, err
	} else if !ok || st.canonStatChanged() {
		old, oldNL := st.canon, st.canonEndsNL
		if err := st.absorbForeign(); err != nil {
			return false, err
		}
		if ok {
			// Lines appended: those without uuid may come again,
			// mirrored by the agent that wrote them (shared.go).
			if err := st.noteAbsorbed(old, oldNL); err != nil {
				return false, err
			}
		}
		if !ok {
			// Rewritten, not just appended to: rescued lines have no
			// place of their own any more, and did the rewrite keep
			// every entry sessiond acknowledged?
			st.rescueAt = -1
			st.acked.Rewritten()
			st.forgetOpenTail()
		}
	}
	if err := st.acked.CompareIfRewritten(holdings{st}); err != nil {
		return false, fmt.Errorf("compact %s: %w", st.key, err)
	}
	if len(st.pending) == 0 {
		// Every journaled entry is in the file now (absorbForeign found
		// them there), written by another program that may not have
		// synced it: make it durable before dropping the journal (and
		// listing the entries the file holds in the ledger, which the
		// journal listed until now).
		if err := st.syncCanonical(); err != nil {
			return false, err
		}
		if st.acked.HasDropped() {
			if err := st.acked.Compacted(st.canon.ledger(), nil); err != nil {
				return false, fmt.Errorf("compact %s: %w", st.key, err)
			}
		}
		return true, st.newGeneration()
	}
	return false, nil
}

// beforeMarker makes durable what must be before a compaction's marker
// goes to the journal: once it is down, recovery takes the journal as
// compacted and no longer reads what it holds. So the sidecars first, then
// the ledger's record of the entries acked, compacted into the file about
// to be newFP.
func (st *State) beforeMarker(newFP fingerprint, acked []ledger.ID) error {
	if err := st.saveSidecars(); err != nil {
		return err
	}
	if !st.canonExists {
		// The file is made now: a ledger at this key is an earlier
		// transcript's, deleted (package ledger).
		if err := st.acked.Reset(); err != nil {
			return err
		}
	}
	return st.acked.Compacted(newFP.ledger(), acked)
}

// installed updates what the writer knows of the file once the compaction
// put newFP in place, and starts the journal's new generation.
func (st *State) installed(newFP fingerprint, moved bool) error {
	if fi, err := st.fs.Lstat(st.canonPath); err == nil && st.ent != nil {
		// Readers of the file list it by its mtime, which the rename just
		// set: list it so here too, as the listing does once the writer
		// has retired (the SDK's listSessions with a store and from disk
		// then agree).
		if ms := fi.ModTime().UnixMilli(); ms > st.ent.ModifiedMs {
			st.ent.ModifiedMs = ms
		}
	}
	st.canonExists = true
	st.canonEntries += uint64(len(st.pending))
	st.canonEndsNL = true
	st.canon = newFP
	st.rescueAt = -1
	if moved {
		// Rescued lines went in before lines appended after them (see
		// foreign.go): lines already served moved.
		st.lineage = st.lineages.Add(1)
	}
	if err := st.newGeneration(); err != nil {
		st.failed = err
		return err
	}
	return nil
}

// tempWriters buffer the lines a compaction writes from the journal; a
// fresh buffer per compaction was a third of the daemon's allocations
// under many small sessions.
var tempWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// writeTemp writes the current canonical content plus the pending entries
// to path and syncs it. It returns the new file's fingerprint, the
// acknowledged entries it wrote (for the ledger), and whether rescued
// lines went in before lines already in the file (see foreign.go).
func (st *State) writeTemp(path string, src fsys.File) (fp fingerprint, acked []ledger.ID, moved bool, err error) {
	tmp, err := st.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fingerprint{}, nil, false, err
	}
	defer tmp.Close()
	if err := st.keepAttrs(tmp); err != nil {
		return fingerprint{}, nil, false, err
	}
	// Rescued lines go where the last compaction's content ended, before
	// what was appended after it (lines written later), when the file
	// still has that content.
	at := st.canon.size
	var rescued, rest []pendingEntry
	for _, p := range st.pending {
		if p.foreign && st.rescueAt >= 0 && st.rescueAt <= st.canon.size {
			rescued = append(rescued, p)
			// Moved when it goes before a line served before it.
			moved = moved || len(rest) > 0 || st.rescueAt < st.canon.size
		} else {
			rest = append(rest, p)
		}
	}
	if len(rescued) > 0 {
		at = st.rescueAt
	}
	w := tempWriters.Get().(*bufio.Writer)
	w.Reset(tmp)
	defer func() {
		w.Reset(nil)
		tempWriters.Put(w)
	}()
	copySrc := func(from, to int64) error {
		if src == nil || to <= from {
			return nil
		}
		if err := w.Flush(); err != nil {
			return err
		}
		_, err := fsys.CopyRange(tmp, src, from, to-from)
		return err
	}
	writeLines := func(ps []pendingEntry) error {
		spans := make([]stream.Span, len(ps))
		for i, p := range ps {
			spans[i] = p.span
		}
		return st.j.Read(spans, func(i int, line []byte) error {
			if p := ps[i]; !p.foreign {
				acked = append(acked, ledger.IDOf(p.span.Pos(), p.uuid, line))
			}
			w.Write(line)
			return w.WriteByte('\n')
		})
	}
	if err := copySrc(0, at); err != nil {
		return fingerprint{}, nil, false, err
	}
	if len(rescued) > 0 {
		if err := writeLines(rescued); err != nil {
			return fingerprint{}, nil, false, err
		}
		if err := copySrc(at, st.canon.size); err != nil {
			return fingerprint{}, nil, false, err
		}
	}
	if !st.canonEndsNL && len(rest) > 0 {
		// A torn last line written by someone else stays its own line.
		w.WriteByte('\n')
	}
	if err := writeLines(rest); err != nil {
		return fingerprint{}, nil, false, err
	}
	if err := w.Flush(); err != nil {
		return fingerprint{}, nil, false, err
	}
	if err := tmp.Sync(); err != nil {
		return fingerprint{}, nil, false, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return fingerprint{}, nil, false, err
	}
	tail, err := files.TailCRC(tmp, fi.Size())
	if err != nil {
		return fingerprint{}, nil, false, err
	}
	if err := tmp.Close(); err != nil {
		return fingerprint{}, nil, false, err
	}
	return fingerprint{fi.Size(), tail}, acked, moved, nil
}

// keepAttrs gives tmp, about to replace the canonical file, that file's
// mode and owner (fsys.KeepAttrs); a new transcript stays 0600.
func (st *State) keepAttrs(tmp fsys.File) error {
	fi, err := st.fs.Lstat(st.canonPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return fsys.KeepAttrs(tmp, fi)
}

// dropEmptyJournal lets go of the session's stream in the journal when nothing
// is pending as its writer closes: the journal forgets a stream with nothing
// logged, so listings and recovery look only at sessions with something to
// replay, not at every session ever written.
func (st *State) dropEmptyJournal() {
	if st.j == nil || len(st.pending) > 0 || st.failed != nil {
		return
	}
	st.closeFiles()
}
