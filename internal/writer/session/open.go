package session

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/writer/files"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// open loads the session from disk and replays its journal, deciding from
// the compaction marker and the canonical file's fingerprint whether the
// journaled entries already reached the canonical file.
func (st *State) open() error {
	if err := st.checkPath(); err != nil {
		return err
	}
	st.removeStaleTemps()
	if err := st.loadStore(); err != nil {
		return err
	}
	// After a failed write or sync, the journal may show records that never
	// reached the disk: Journal.Open cuts back to what was last synced.
	j, rec, err := st.Journal.Open(st.key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		j = nil
	case err != nil:
		return fmt.Errorf("open journal of %s: %w", st.key, err)
	}
	if err := st.scanCanonical(); err != nil {
		if j != nil {
			j.Close()
		}
		return err
	}
	st.publishSummary()
	st.lineage = st.lineages.Add(1)
	st.scanned = true
	if j == nil {
		st.Publish()
		return st.compareOpened()
	}
	if err := st.adoptJournal(j, rec); err != nil {
		return err
	}
	// Batch ids and summaries count whether or not the entries are still
	// pending: newGeneration saves them before it drops this journal.
	st.applyMetas(rec.Metas)
	if done, err := st.settledByCompaction(rec); done || err != nil {
		return err
	}
	if done, err := st.settledByOther(rec); done || err != nil {
		return err
	}
	dropped, err := st.replay(rec.Entries, rec.Foreign)
	if err != nil {
		return err
	}
	if dropped {
		// Journaled entries were dropped because the file already holds
		// them, written there by another program that may never have
		// synced them; the journal may go once nothing is pending, so the
		// file must be durable first.
		if err := st.syncCanonical(); err != nil {
			return err
		}
	}
	st.Publish()
	return st.compareOpened()
}

// compareOpened compares what the opened session holds with the entries
// its transcript was given (package ledger).
func (st *State) compareOpened() error { return st.acked.Compare(holdings{st}, true, "open") }

// adoptJournal takes j, the session's journal as recovered (rec), as the
// writer's, after checking that it is this session's.
func (st *State) adoptJournal(j *stream.Stream, rec *stream.Recovered) error {
	st.j = j
	if rec.Truncated > 0 {
		st.log.Warn("journal had a torn tail (entries never acknowledged); truncated", zap.Int64("bytes", rec.Truncated))
	}
	if h := rec.Owner; h != st.key {
		j.Close()
		st.j = nil
		return fmt.Errorf("journal %s belongs to %s/%s/%s, not %s: %w", rec.Name, h.ProjectKey, h.SessionID, h.Subpath, st.key, errdefs.ErrCorrupt)
	}
	return nil
}

// settledByCompaction reports whether the journal's last compaction marker
// shows the canonical file already holding every journaled entry; the
// journal is then replaced by a new, empty generation.
func (st *State) settledByCompaction(rec *stream.Recovered) (bool, error) {
	if rec.Compacted == nil {
		return false, nil
	}
	compacted := fingerprintOf(*rec.Compacted)
	ok, err := st.hasPrefix(compacted)
	if err != nil || !ok {
		return false, err
	}
	// The last compaction renamed its file into place before the journal
	// was replaced: everything journaled is already there. But a process
	// killed between that rename and its folder sync leaves the rename in
	// the page cache only: make it durable before the journal, the only
	// other copy of the entries, is replaced.
	if st.canon.size > compacted.size {
		st.log.Warn("another program appended to the transcript after sessiond's last compaction; its lines are kept")
	}
	return true, st.settle()
}

// settledByOther reports whether the canonical file already holds the
// journaled entries right after the content they followed, written by a
// compaction the journal does not know of; the journal is then replaced by
// a new, empty generation. Otherwise it says what the journaled entries
// will follow.
func (st *State) settledByOther(rec *stream.Recovered) (bool, error) {
	base := fingerprintOf(rec.Base)
	ok, err := st.hasPrefix(base)
	if err != nil {
		return false, err
	}
	if !ok {
		st.log.Warn("the transcript was rewritten by another program since sessiond journaled entries; journaled entries will follow its current content, duplicates by uuid dropped")
		return false, nil
	}
	if st.canon.size <= base.size {
		return false, nil
	}
	// The file may already hold the logged entries right after the base,
	// written by a compaction this log does not know of: a state folder
	// restored from a backup is older than the transcripts. Appending them
	// again would store the entries without a uuid twice.
	there, err := st.holdsLogged(base, rec)
	if err != nil {
		return false, err
	}
	if !there {
		st.log.Info("another program appended to the transcript; journaled entries will follow its lines")
		return false, nil
	}
	st.log.Warn("the transcript already holds the entries the journal has for it, after the content they followed: the state folder is older than the transcript (restored from a backup?); they are not appended again",
		zap.Int("entries", len(rec.Entries)))
	return true, st.settle()
}

// settle drops the journal generation whose entries the canonical file
// holds, once the file is durable: the journal was the entries' only other
// copy.
func (st *State) settle() error {
	if err := st.syncCanonical(); err != nil {
		return err
	}
	st.Publish()
	if err := st.newGeneration(); err != nil {
		return err
	}
	return st.compareOpened()
}

// replay makes the journaled entries at spans pending after the canonical
// file's lines, dropping those whose uuid the session already holds, and
// reports whether it dropped any. It reads the journal twice, in large
// chunks: the first pass decides which entries stay, which fixes the size
// the transcript will have; the listing summary, told that size, then
// only searches the lines that can fall in its head and tail windows.
//
// foreign, when not nil, says which entries are rescued lines of another
// program (pendingEntry.foreign). An acknowledged entry dropped because
// the file holds its uuid goes to the ledger (Book.Dropped).
func (st *State) replay(spans []stream.Span, foreign []bool) (dropped bool, err error) {
	keep := make([]stream.Span, 0, len(spans))
	size := st.canon.size
	err = st.j.Read(spans, func(i int, line []byte) error {
		p := pendingEntry{span: spans[i], size: len(line), foreign: i < len(foreign) && foreign[i]}
		if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
			if st.ids.has(id) {
				dropped = true
				if !p.foreign {
					st.acked.Dropped(ledger.IDOf(spans[i].Pos(), id, nil))
				}
				return nil
			}
			st.ids.add(id)
			p.uuid = id
		}
		keep = append(keep, spans[i])
		st.addPending(p)
		st.noteAgentMeta(line)
		size += int64(len(line)) + 1
		return nil
	})
	if err == nil && st.ent != nil {
		st.ent.Sum.ExpectAtLeast(size)
		err = st.j.Read(keep, func(_ int, line []byte) error {
			// Journaled entries passed the transcript rules when they
			// were appended (AddValid, as the writer fed them then).
			// The one exception, lines another program appended during
			// a compaction's rename (rescue), counts as whole until the
			// next compaction's rescan of the file.
			st.ent.AddValid(line)
			return nil
		})
	}
	if err != nil {
		return false, fmt.Errorf("read journal of %s: %w", st.key, errdefs.FromIO(err))
	}
	return dropped, nil
}

// checkPath refuses a canonical path that is not a regular file: a
// symlink planted there must never be followed or overwritten.
func (st *State) checkPath() error {
	if st.canonPath == "" {
		// layout builds no path from a key that does not validate. The
		// edges (the server's resolver, the puller) refuse such keys with
		// the reason, so only an in-process caller that skipped them gets
		// here, once per writer: the rule's message for it.
		return st.key.Validate()
	}
	fi, err := st.fs.Lstat(st.canonPath)
	if err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s); sessiond never writes through links or over folders: move it away: %w", st.canonPath, fi.Mode().Type(), errdefs.ErrUnsafePath)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	return nil
}

// removeStaleTemps deletes this session's temp files left by a crash: a
// compaction's next to the canonical file and the sidecars' next to them.
// Only this writer creates them, and it is not running one; files.StaleTemps
// lists each folder once per process.
func (st *State) removeStaleTemps() {
	sweep := func(dir string, match func(string) bool) {
		for _, n := range st.temps.Take(st.fs, dir, match) {
			if err := st.fs.Remove(filepath.Join(dir, n)); err == nil {
				st.log.Info("removed a temp file left by a crash", zap.String("file", filepath.Join(dir, n)))
			}
		}
	}
	prefix := st.tempPrefix()
	sweep(st.dir, func(n string) bool { return strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".tmp") })
	for _, sp := range []string{st.Config.Layout.StorePath(st.key), sidecar.AgentMetaPath(st.canonPath)} {
		sprefix := sidecar.TempPrefix(sp)
		sweep(filepath.Dir(sp), func(n string) bool { return strings.HasPrefix(n, sprefix) && strings.HasSuffix(n, ".tmp") })
	}
}

// scanCanonical reads the canonical file once: its line count, the uuids
// it holds, whether it ends in a whole line, and its fingerprint. A file
// another program rewrote shorter while it was read is read again.
func (st *State) scanCanonical() error {
	for tries := 1; ; tries++ {
		err := st.scanCanonicalPromising(true)
		if !errors.Is(err, errShrank) {
			return err
		}
		if tries == 3 {
			return fmt.Errorf("%w, three times in a row; retry: %w", err, errdefs.ErrUnavailable)
		}
	}
}

// errShrank says the canonical file ended before a size read from it a
// moment earlier: another program rewrote it meanwhile (a truncating
// save). Not the disk's fault, and the next read sees the new file.
var errShrank = errors.New("the transcript shrank while it was read (another program rewrote it)")

// scanCanonicalPromising is scanCanonical; with promise, the listing
// summary is told the file's size first, so it only searches the lines
// that can fall in its windows (listing.Summary.ExpectAtLeast).
func (st *State) scanCanonicalPromising(promise bool) error {
	st.ids = newIDSet()
	st.canonEntries = 0
	st.canonEndsNL = true
	st.canon = fingerprint{}
	st.canonExists = false
	if st.key.Subpath == "" {
		st.ent = &index.Entry{Key: st.key, Owned: true}
		title, err := st.TitleSidecar(st.key)
		if err != nil {
			return err
		}
		st.ent.Sum.SetSidecarTitle(title)
		// Until the next append the session was last modified when its
		// files were: a writer opened to read it must not list it as
		// modified in 1970 (sorted last, and never what --continue picks).
		_, st.ent.ModifiedMs = st.Stamp(st.key)
	}
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	st.canonExists = true
	var promised int64
	if st.ent != nil && promise {
		if fi, err := f.Stat(); err == nil {
			promised = fi.Size()
			st.ent.Sum.ExpectAtLeast(promised)
		}
	}
	sc := transcript.NewLineScannerAt(f)
	var size int64
	for sc.Scan() {
		line := sc.Line()
		st.canonEntries++
		size = sc.Offset() + int64(len(line))
		if sc.HasNewline() {
			size++
		} else {
			st.canonEndsNL = false
		}
		if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
			st.ids.add(id)
		}
		if st.ent != nil {
			st.ent.Add(line, sc.HasNewline())
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	if size < promised {
		// The file shrank during the scan (another program rewrote it):
		// the promise was false and the summary may have skipped lines of
		// its tail window. Scan again, searching every line.
		st.log.Warn("the transcript shrank while it was read; reading it again", zap.Int64("was", promised), zap.Int64("read", size))
		return st.scanCanonicalPromising(false)
	}
	tail, err := files.TailCRC(f, size)
	if files.Shrank(err) {
		// Rewritten shorter between the scan and this read: scanned
		// again by scanCanonical.
		return fmt.Errorf("read %s: %w", st.canonPath, errShrank)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	st.canon = fingerprint{size, tail}
	return nil
}

// hasPrefix reports whether the canonical file on disk starts with the
// content fp describes.
func (st *State) hasPrefix(fp fingerprint) (bool, error) {
	return files.HasPrefix(st.fs, st.canonPath, fp.size, fp.tail)
}

// holdsLogged reports whether the canonical file holds, right after the
// base content, exactly the logged entries of rec, each a line, in order:
// what sessiond's own compaction of them writes.
func (st *State) holdsLogged(base fingerprint, rec *stream.Recovered) (bool, error) {
	need := base.size
	for _, sp := range rec.Entries {
		need += int64(sp.N) + 1
	}
	if len(rec.Entries) == 0 || st.canon.size < need {
		return false, nil
	}
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.NewSectionReader(f, base.size, need-base.size), 1<<16)
	same := true
	var buf []byte
	err = st.j.Read(rec.Entries, func(_ int, entry []byte) error {
		if !same {
			return nil
		}
		buf = slices.Grow(buf[:0], len(entry)+1)[:len(entry)+1]
		if _, err := io.ReadFull(r, buf); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// Cut since the scan: it does not hold them.
				same = false
				return nil
			}
			// A read that failed tells nothing: taken for "not
			// there", the entries would be replayed a second time.
			return &canonReadError{err}
		}
		same = bytes.Equal(buf[:len(entry)], entry) && buf[len(entry)] == '\n'
		return nil
	})
	var cr *canonReadError
	if errors.As(err, &cr) {
		return false, fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(cr.err))
	}
	if err != nil {
		return false, fmt.Errorf("read journal of %s: %w", st.key, errdefs.FromIO(err))
	}
	return same, nil
}

// canonReadError carries a failed read of the canonical file out of a
// journal read's callback, told apart from the journal's own errors.
type canonReadError struct{ err error }

func (e *canonReadError) Error() string { return e.err.Error() }
func (e *canonReadError) Unwrap() error { return e.err }

// syncCanonical makes the canonical file as this process sees it durable:
// its content and its name. It runs before a journal generation whose
// entries the file is believed to hold is dropped, because what the page
// cache shows (a rename by a killed process, lines another program never
// synced) may not be on disk yet.
func (st *State) syncCanonical() error {
	opened, err := files.SyncFile(st.fs, st.canonPath)
	if err != nil && opened {
		st.failed = err
	}
	return err
}
