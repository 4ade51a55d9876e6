package writer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
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
	"github.com/sessiond/sessiond/internal/transcript"
)

// FlushResult describes one compacted session.
type FlushResult struct {
	Key              layout.Key
	CompactedEntries uint64
	CanonicalBytes   int64
}

// Flush compacts key's journal into its canonical file.
func (m *Manager) Flush(ctx context.Context, key layout.Key) (FlushResult, error) {
	return m.flush(ctx, key, stay)
}

// flush is Flush; retire says whether the writer then retires at once
// (see retireMode).
func (m *Manager) flush(ctx context.Context, key layout.Key, retire retireMode) (FlushResult, error) {
	var res FlushResult
	if err := key.Validate(); err != nil {
		return res, err
	}
	if !m.existsOnDisk(key) {
		return res, m.notFound(key)
	}
	err := m.doRetire(ctx, key, retire, func(st *state) error {
		if !st.exists() {
			return m.notFound(key)
		}
		n := uint64(len(st.pending))
		if err := st.compact("flush"); err != nil {
			return err
		}
		res = FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.canon.size}
		return nil
	})
	return res, err
}

// FlushAll compacts every session that has journaled entries: the open
// writers and the journals left by retired ones.
func (m *Manager) FlushAll(ctx context.Context) ([]FlushResult, error) {
	keys, err := m.journaledKeys()
	if err != nil {
		return nil, err
	}
	var out []FlushResult
	var errs []error
	for _, k := range keys {
		r, err := m.flush(ctx, k, retireIfOpened)
		if err != nil {
			if errdefs.Is(err, errdefs.ErrNotFound) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		if r.CompactedEntries > 0 {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// tempPrefix names this session's compaction temp files. They start with a
// dot and end in ".tmp", so no reader ever takes them for a transcript.
func (st *state) tempPrefix() string { return compactTempPrefix(st.canonPath) }

// compactTempPrefix starts the names of the temp files that replace the
// transcript at canonPath (a restore's merge uses them too).
func compactTempPrefix(canonPath string) string {
	base := strings.TrimSuffix(filepath.Base(canonPath), ".jsonl")
	if len(base) > 200 {
		// Keep the temp name within the 255-byte limit of a file name while
		// still unique to this transcript.
		base = fmt.Sprintf("%s-%08x", base[:200], crc32.Checksum([]byte(base), castagnoli))
	}
	return "." + base + ".compact-"
}

// newGeneration replaces the session's log with an empty one whose base is
// the canonical file as it is now.
func (st *state) newGeneration() error {
	// The log about to be replaced may be the only copy of batch ids and a
	// summary: they go to the sidecar first.
	if err := st.saveSidecars(); err != nil {
		return err
	}
	l, err := st.logs.create(st.key, st.canon, st.j != nil, st.log)
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
		st.j.close()
	}
	st.j = l
	st.pending = nil
	st.pendingBytes = 0
	return nil
}

func (st *state) sizeDue() bool {
	return st.pendingBytes >= st.cfg.MinCompactBytes &&
		float64(st.pendingBytes) >= st.cfg.CompactRatio*float64(st.canon.size)
}

func (st *state) idleDue() bool {
	return st.pendingBytes > 0 &&
		(st.canon.size <= st.cfg.IdleFloor || float64(st.pendingBytes)*st.cfg.IdleRatio >= float64(st.canon.size))
}

// compact moves the journaled entries into the canonical file: a temp file
// in the same folder gets the current content plus the entries, is synced,
// a marker naming the new content is journaled, the temp file is renamed
// over the canonical one, the folder is synced, and a new journal
// generation starts. A crash at any point leaves either the old file with
// the journal still holding the entries, or the new file with a marker that
// tells recovery the entries are already in it.
func (st *state) compact(reason string) error {
	if len(st.pending) == 0 || st.failed != nil {
		return st.failed
	}
	if err := st.checkPath(); err != nil {
		return err
	}
	if ok, err := st.hasPrefix(st.canon); err != nil {
		return err
	} else if !ok || st.canonStatChanged() {
		if err := st.absorbForeign(); err != nil {
			return err
		}
		if len(st.pending) == 0 {
			// Every journaled entry is in the file now, written there by
			// another program that may not have synced it: make it
			// durable before dropping the journal.
			if err := st.syncCanonical(); err != nil {
				return err
			}
			return st.newGeneration()
		}
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
		defer src.Close()
	}
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	newFP, err := st.writeTemp(tmpPath, src)
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
			return st.compact(reason)
		}
		return fmt.Errorf("compact %s: the transcript keeps changing under another writer; will retry later: %w", st.key, errdefs.ErrUnavailable)
	}
	// The sidecars go first: once the marker is down, recovery takes the
	// journal as compacted and no longer reads what it holds.
	if err := st.saveSidecars(); err != nil {
		st.fs.Remove(tmpPath)
		return fmt.Errorf("compact %s: %w", st.key, err)
	}
	// From here on a failure leaves the disk in a state only recovery may
	// judge, so the writer fails and reopens from disk.
	if err := st.j.markCompacted(newFP); err != nil {
		st.fs.Remove(tmpPath)
		st.failed = err
		return fmt.Errorf("compact %s: mark journal: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.fs.Rename(tmpPath, st.canonPath); err != nil {
		st.fs.Remove(tmpPath)
		st.failed = err
		return fmt.Errorf("compact %s: rename into place: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return fmt.Errorf("compact %s: %w", st.key, errdefs.FromIO(err))
	}
	var rescued []byte
	if src != nil {
		if fi, err := src.Stat(); err == nil && fi.Size() > st.canon.size {
			rescued = make([]byte, fi.Size()-st.canon.size)
			if _, err := src.ReadAt(rescued, st.canon.size); err != nil && err != io.EOF {
				st.failed = err
				return fmt.Errorf("compact %s: read lines appended during the rename: %w", st.key, errdefs.FromIO(err))
			}
		}
	}
	if fi, err := st.fs.Lstat(st.canonPath); err == nil && st.ent != nil {
		// Readers of the file list it by its mtime, which the rename just
		// set: list it so here too, as the listing does once the writer
		// has retired (the SDK's listSessions with a store and from disk
		// then agree).
		if ms := fi.ModTime().UnixMilli(); ms > st.ent.ModifiedMs {
			st.ent.ModifiedMs = ms
		}
	}
	n := len(st.pending)
	st.canonExists = true
	st.canonEntries += uint64(n)
	st.canonEndsNL = true
	old := st.canon.size
	st.canon = newFP
	if err := st.newGeneration(); err != nil {
		st.failed = err
		return err
	}
	st.stats.compactions.Add(1)
	st.stats.compactedBytes.Add(uint64(newFP.size))
	st.log.Debug("compacted", zap.String("reason", reason), zap.Int("entries", n),
		zap.Int64("from_bytes", old), zap.Int64("to_bytes", newFP.size))
	if len(rescued) > 0 {
		if err := st.rescue(rescued); err != nil {
			return err
		}
	}
	st.publish()
	st.notifyChange()
	return nil
}

// rescue journals lines another program appended to the old canonical
// file while compaction renamed the new one into place; they follow in the
// next compaction. Lines whose uuid the session holds are dropped.
func (st *state) rescue(data []byte) error {
	st.log.Warn("another program appended to the transcript during a compaction; its lines are kept", zap.Int("bytes", len(data)))
	var lines [][]byte
	for _, l := range bytes.SplitAfter(data, []byte{'\n'}) {
		l = bytes.TrimSuffix(l, []byte{'\n'})
		if len(l) == 0 {
			continue
		}
		if id, ok := transcript.TopLevelString(l, "uuid"); ok && id != "" {
			if st.ids.has(id) {
				continue
			}
			st.ids.add(id)
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return nil
	}
	return st.logBatches([][][]byte{lines}, nil, func(i int, sp span) {
		st.addPending(sp, len(lines[i]))
		if st.ent != nil {
			st.ent.Add(lines[i], true)
		}
	})
}

// canonStatChanged reports whether the canonical file's size differs from
// what this writer last saw (a cheap check before the tail checksum).
func (st *state) canonStatChanged() bool {
	fi, err := st.fs.Lstat(st.canonPath)
	if err != nil {
		return st.canonExists
	}
	return fi.Size() != st.canon.size
}

// absorbForeign rescans a canonical file another program changed and drops
// journaled entries whose uuid it now holds. Lines already served may have
// moved, so the lineage changes.
func (st *state) absorbForeign() error {
	st.log.Warn("the transcript was changed by another program; keeping its lines and appending sessiond's entries after them")
	pending := st.pending
	if err := st.scanCanonical(); err != nil {
		return err
	}
	st.pending = nil
	st.pendingBytes = 0
	spans := make([]span, len(pending))
	for i, p := range pending {
		spans[i] = p.span
	}
	if _, err := st.replay(spans); err != nil {
		st.failed = err
		return err
	}
	st.lineage = st.lineages.Add(1)
	st.publish()
	return nil
}

// writeTemp writes the current canonical content plus the pending entries
// to path and syncs it.
func (st *state) writeTemp(path string, src fsys.File) (fingerprint, error) {
	tmp, err := st.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fingerprint{}, err
	}
	defer tmp.Close()
	if err := st.keepAttrs(tmp); err != nil {
		return fingerprint{}, err
	}
	if src != nil {
		if _, err := fsys.CopyRange(tmp, src, 0, st.canon.size); err != nil {
			return fingerprint{}, err
		}
	}
	// A buffer no larger than what is written: a 1 MiB buffer for every
	// compaction of a small session is pure garbage.
	w := bufio.NewWriterSize(tmp, int(min(max(st.pendingBytes+1, 4096), 1<<20)))
	if !st.canonEndsNL {
		// A torn last line written by someone else stays its own line.
		w.WriteByte('\n')
	}
	spans := make([]span, len(st.pending))
	for i, p := range st.pending {
		spans[i] = p.span
	}
	err = st.j.read(spans, func(_ int, line []byte) error {
		w.Write(line)
		return w.WriteByte('\n')
	})
	if err != nil {
		return fingerprint{}, err
	}
	if err := w.Flush(); err != nil {
		return fingerprint{}, err
	}
	if err := tmp.Sync(); err != nil {
		return fingerprint{}, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return fingerprint{}, err
	}
	tail, err := tailCRC(tmp, fi.Size())
	if err != nil {
		return fingerprint{}, err
	}
	if err := tmp.Close(); err != nil {
		return fingerprint{}, err
	}
	return fingerprint{fi.Size(), tail}, nil
}

// keepAttrs gives tmp, about to replace the canonical file, that file's
// mode and owner (fsys.KeepAttrs); a new transcript stays 0600.
func (st *state) keepAttrs(tmp fsys.File) error {
	fi, err := st.fs.Lstat(st.canonPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return fsys.KeepAttrs(tmp, fi)
}

// dropEmptyJournal lets go of the session's stream in the log when nothing
// is pending as its writer closes: the log forgets a stream with nothing
// logged, so listings and recovery look only at sessions with something to
// replay, not at every session ever written.
func (st *state) dropEmptyJournal() {
	if st.j == nil || len(st.pending) > 0 || st.failed != nil {
		return
	}
	st.closeFiles()
}
