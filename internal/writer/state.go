package writer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// tailWindow is how much of a canonical file's end its fingerprint covers.
const tailWindow = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fingerprint identifies a canonical file's content cheaply: its size and a
// checksum of its last bytes. A file "has" a fingerprint when it is at
// least that long and those bytes match, i.e. when the fingerprinted
// content is a prefix of it.
type fingerprint struct {
	size int64
	tail uint32
}

type pendingEntry struct {
	span journal.Span
	size int // line bytes without newline
}

// state is everything the writer goroutine owns. Nothing else touches it.
type state struct {
	m   *Manager
	cfg *Config
	fs  fsys.FS
	log *zap.Logger
	key layout.Key

	canonPath string
	dir       string
	jpath     string
	j         *journal.Journal

	canonExists  bool
	canon        fingerprint // the canonical file as this writer last saw it
	canonEntries uint64
	canonEndsNL  bool // false when the file ends in a torn line

	ids          idSet
	store        storeState // summary and recent batch ids (store.go)
	storeDirty   bool       // store holds what its sidecar does not
	agentMeta    []byte     // a subagent's .meta.json from its last agent_metadata entry, not yet written
	pending      []pendingEntry
	pendingBytes int64

	lineage uint64 // changes when lines already served may have moved
	changed chan struct{}
	failed  error

	opened         bool // open succeeded
	compactRetries int  // compactions restarted because another writer appended

	// ent is this session's listing entry (main sessions only), kept
	// current line by line and published to the index.
	ent *index.Entry
}

func newState(m *Manager, key layout.Key, log *zap.Logger) *state {
	canon := m.cfg.Layout.TranscriptPath(key)
	return &state{
		m: m, cfg: &m.cfg, fs: m.cfg.FS, log: log, key: key,
		canonPath: canon,
		dir:       filepath.Dir(canon),
		jpath:     m.cfg.Layout.JournalPath(key),
		ids:       newIDSet(),
		changed:   make(chan struct{}),
	}
}

func (st *state) exists() bool { return st.canonExists || len(st.pending) > 0 }

func (st *state) totalEntries() uint64 { return st.canonEntries + uint64(len(st.pending)) }

// tempPrefix names this session's compaction temp files. They start with a
// dot and end in ".tmp", so no reader ever takes them for a transcript.
func (st *state) tempPrefix() string {
	base := strings.TrimSuffix(filepath.Base(st.canonPath), ".jsonl")
	if len(base) > 200 {
		// Keep the temp name within the 255-byte limit of a file name while
		// still unique to this transcript.
		base = fmt.Sprintf("%s-%08x", base[:200], crc32.Checksum([]byte(base), castagnoli))
	}
	return "." + base + ".compact-"
}

// open loads the session from disk and replays its journal, deciding from
// the compaction marker and the canonical file's fingerprint whether the
// journaled entries already reached the canonical file.
func (st *state) open() error {
	if err := st.checkPath(); err != nil {
		return err
	}
	st.removeStaleTemps()
	st.store = readStore(st.fs, st.cfg.Layout, st.key, st.log)
	// After a failed write or sync, the journal may show records that never
	// reached the disk: openJournal cuts back to what was last synced.
	j, rec, err := st.m.openJournal(st.key, false)
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
	st.lineage = st.m.lineage.Add(1)
	st.opened = true
	if j == nil {
		st.publish()
		return nil
	}
	st.j = j
	if rec.TruncatedBytes > 0 {
		st.log.Warn("journal had a torn tail (entries never acknowledged); truncated", zap.Int64("bytes", rec.TruncatedBytes))
	}
	h := rec.Header
	if h.ProjectKey != st.key.ProjectKey || h.SessionID != st.key.SessionID || h.Subpath != st.key.Subpath {
		j.Close()
		st.j = nil
		return fmt.Errorf("journal %s belongs to %s/%s/%s, not %s: %w", st.jpath, h.ProjectKey, h.SessionID, h.Subpath, st.key, errdefs.ErrCorrupt)
	}
	var metas [][]byte
	for _, b := range rec.Batches {
		if b.Meta != nil {
			metas = append(metas, b.Meta)
		}
	}
	// Batch ids and summaries count whether or not the entries are still
	// pending: newGeneration saves them before it drops this journal.
	st.applyMetas(metas)
	if rec.Compacted != nil {
		ok, err := st.hasPrefix(fingerprint{rec.Compacted.Size, rec.Compacted.Tail})
		if err != nil {
			return err
		}
		if ok {
			// The last compaction renamed its file into place before the
			// journal was replaced: everything journaled is already there.
			// But a process killed between that rename and its folder
			// sync leaves the rename in the page cache only: make it
			// durable before the journal, the only other copy of the
			// entries, is replaced.
			if st.canon.size > rec.Compacted.Size {
				st.log.Warn("another program appended to the transcript after sessiond's last compaction; its lines are kept")
			}
			if err := st.syncCanonical(); err != nil {
				return err
			}
			st.publish()
			return st.newGeneration()
		}
	}
	base := fingerprint{h.BaseSize, h.BaseTail}
	if ok, err := st.hasPrefix(base); err != nil {
		return err
	} else if !ok {
		st.log.Warn("the transcript was rewritten by another program since sessiond journaled entries; journaled entries will follow its current content, duplicates by uuid dropped")
	} else if st.canon.size > base.size {
		st.log.Info("another program appended to the transcript; journaled entries will follow its lines")
	}
	var spans []journal.Span
	for _, b := range rec.Batches {
		spans = append(spans, b.Entries...)
	}
	dropped, err := st.replay(spans)
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
	st.publish()
	return nil
}

// replay makes the journaled entries at spans pending after the canonical
// file's lines, dropping those whose uuid the session already holds, and
// reports whether it dropped any. It reads the journal twice, in large
// chunks: the first pass decides which entries stay, which fixes the size
// the transcript will have; the listing summary, told that size, then
// only searches the lines that can fall in its head and tail windows.
func (st *state) replay(spans []journal.Span) (dropped bool, err error) {
	keep := make([]journal.Span, 0, len(spans))
	size := st.canon.size
	err = st.j.ReadEntries(spans, func(i int, line []byte) error {
		if id, ok := transcript.TopLevelString(line, "uuid"); ok && id != "" {
			if st.ids.has(id) {
				dropped = true
				return nil
			}
			st.ids.add(id)
		}
		keep = append(keep, spans[i])
		st.addPending(spans[i], len(line))
		st.noteAgentMeta(line)
		size += int64(len(line)) + 1
		return nil
	})
	if err == nil && st.ent != nil {
		st.ent.Sum.ExpectAtLeast(size)
		err = st.j.ReadEntries(keep, func(_ int, line []byte) error {
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
func (st *state) checkPath() error {
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
// compaction's next to the canonical file and a journal generation's next
// to the journal. Only this writer creates them, and it is not running one.
func (st *state) removeStaleTemps() {
	sweep := func(dir string, match func(string) bool) {
		ents, err := st.fs.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if n := e.Name(); match(n) {
				if err := st.fs.Remove(filepath.Join(dir, n)); err == nil {
					st.log.Info("removed a temp file left by a crash", zap.String("file", filepath.Join(dir, n)))
				}
			}
		}
	}
	prefix := st.tempPrefix()
	sweep(st.dir, func(n string) bool { return strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".tmp") })
	jprefix := filepath.Base(st.jpath) + ".tmp-"
	sweep(filepath.Dir(st.jpath), func(n string) bool { return strings.HasPrefix(n, jprefix) })
	for _, sp := range []string{st.cfg.Layout.StorePath(st.key), strings.TrimSuffix(st.canonPath, layout.TranscriptExt) + ".meta.json"} {
		sprefix := storeTempPrefix(sp)
		sweep(filepath.Dir(sp), func(n string) bool { return strings.HasPrefix(n, sprefix) && strings.HasSuffix(n, ".tmp") })
	}
}

// scanCanonical reads the canonical file once: its line count, the uuids
// it holds, whether it ends in a whole line, and its fingerprint.
func (st *state) scanCanonical() error { return st.scanCanonicalPromising(true) }

// scanCanonicalPromising is scanCanonical; with promise, the listing
// summary is told the file's size first, so it only searches the lines
// that can fall in its windows (transcript.Summary.ExpectAtLeast).
func (st *state) scanCanonicalPromising(promise bool) error {
	st.ids = newIDSet()
	st.canonEntries = 0
	st.canonEndsNL = true
	st.canon = fingerprint{}
	st.canonExists = false
	if st.key.Subpath == "" {
		st.ent = &index.Entry{Key: st.key, Owned: true}
		st.ent.Sum.SetSidecarTitle(st.m.titleSidecar(st.key))
		// Until the next append the session was last modified when its
		// files were: a writer opened to read it must not list it as
		// modified in 1970 (sorted last, and never what --continue picks).
		_, st.ent.ModifiedMs = st.m.stamp(st.key)
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
		if id, ok := transcript.TopLevelString(line, "uuid"); ok && id != "" {
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
	tail, err := tailCRC(f, size)
	if err != nil {
		return fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	st.canon = fingerprint{size, tail}
	return nil
}

// hasPrefix reports whether the canonical file on disk starts with the
// content fp describes.
func (st *state) hasPrefix(fp fingerprint) (bool, error) {
	if fp.size == 0 {
		return true, nil
	}
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, errdefs.FromIO(err)
	}
	if fi.Size() < fp.size {
		return false, nil
	}
	t, err := tailCRC(f, fp.size)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	return t == fp.tail, nil
}

// syncCanonical makes the canonical file as this process sees it durable:
// its content and its name. It runs before a journal generation whose
// entries the file is believed to hold is dropped, because what the page
// cache shows (a rename by a killed process, lines another program never
// synced) may not be on disk yet.
func (st *state) syncCanonical() error {
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing to rely on, nothing to make durable
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	err = f.Sync()
	f.Close()
	if err == nil {
		err = st.fs.SyncDir(st.dir)
	}
	if err != nil {
		st.failed = err
		return fmt.Errorf("sync %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	return nil
}

func tailCRC(r io.ReaderAt, size int64) (uint32, error) {
	n := int64(tailWindow)
	if size < n {
		n = size
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-n); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return 0, err
	}
	return crc32.Checksum(buf, castagnoli), nil
}

func (st *state) addPending(sp journal.Span, size int) {
	st.pending = append(st.pending, pendingEntry{span: sp, size: size})
	st.pendingBytes += int64(size) + 1
}

// newGeneration replaces the journal with an empty one whose base is the
// canonical file as it is now.
func (st *state) newGeneration() error {
	// The journal about to be replaced may be the only copy of batch ids
	// and a summary: they go to the sidecar first.
	if err := st.saveSidecars(); err != nil {
		return err
	}
	if err := fsys.MkdirAll(st.fs, filepath.Dir(st.jpath), 0o700); err != nil {
		return fmt.Errorf("create journal folder for %s: %w", st.key, errdefs.FromIO(err))
	}
	j, err := journal.Create(st.fs, st.jpath, journal.Header{
		ProjectKey: st.key.ProjectKey, SessionID: st.key.SessionID, Subpath: st.key.Subpath,
		BaseSize: st.canon.size, BaseTail: st.canon.tail,
	}, st.m.journalOptions())
	if err != nil {
		err = fmt.Errorf("start journal of %s: %w", st.key, errdefs.FromIO(err))
		if st.j != nil {
			// Create may have renamed the new journal over the old one
			// before it failed, leaving this writer's handle on an
			// unlinked file: an entry appended through it would vanish at
			// the next crash. Only a reopen from disk knows which journal
			// is there.
			st.failed = err
		} else {
			st.discardNewJournal()
		}
		return err
	}
	if st.j != nil {
		st.j.Close()
	}
	st.j = j
	st.pending = nil
	st.pendingBytes = 0
	return nil
}

// commit is one group commit: deduplicate, journal everything in one write
// and one sync, then acknowledge each request. A request whose batch id
// the transcript already stored is answered as a duplicate batch; one whose
// summary was folded from another version is refused alone (ErrConflict),
// the rest of the group goes on.
func (st *state) commit(group []*appendReq) {
	now := time.Now()
	seen := make(map[string]bool)
	seenBatch := make(map[string]bool)
	version := st.store.SummaryVersion
	lines := st.totalEntries() // the transcript's line count as batches are added
	var metaRecs [][]byte
	var lineBatches [][][]byte
	var metas []batchMeta
	type slot struct{ req, entry int }
	var order []slot
	live := group[:0:0]
	for _, r := range group {
		r.res = &AppendResult{Results: make([]Result, len(r.entries))}
		if id := r.opt.BatchID; id != "" && (seenBatch[id] || st.store.seen(id, now)) {
			r.res.DuplicateBatch = true
			for ei, e := range r.entries {
				r.res.Results[ei] = Result{Outcome: Duplicate, UUID: e.UUID, Size: len(e.Line)}
			}
			live = append(live, r)
			continue
		}
		if s := r.opt.Summary; s != nil && s.ExpectedVersion != version {
			r.res, r.err = nil, summaryConflict(st.key, s.ExpectedVersion, version)
			close(r.done)
			continue
		}
		if s := r.opt.Summary; s != nil && s.CheckCoverage && s.Covers != lines {
			r.res, r.err = nil, coverageConflict(st.key, s.Covers, lines)
			close(r.done)
			continue
		}
		ri := len(live)
		live = append(live, r)
		var batch [][]byte
		for ei, e := range r.entries {
			res := &r.res.Results[ei]
			res.UUID = e.UUID
			res.Size = len(e.Line)
			if e.UUID != "" {
				if seen[e.UUID] || st.ids.has(e.UUID) {
					res.Outcome = Duplicate
					continue
				}
				seen[e.UUID] = true
			}
			res.Outcome = Stored
			batch = append(batch, e.Line)
			order = append(order, slot{ri, ei})
		}
		if len(batch) == 0 {
			// Nothing stored, so no batch to remember and no summary
			// change: the summary follows what the transcript holds.
			continue
		}
		lines += uint64(len(batch))
		m := batchMeta{BatchID: r.opt.BatchID, At: now.UnixMilli(), Entries: lines}
		if s := r.opt.Summary; s != nil {
			version++
			m.Summary, m.SummaryVersion = s.Data, version
		}
		var rec []byte
		if m.BatchID != "" || m.Summary != nil {
			rec = m.encode()
			if m.BatchID != "" {
				seenBatch[m.BatchID] = true
			}
		}
		lineBatches = append(lineBatches, batch)
		metaRecs = append(metaRecs, rec)
		metas = append(metas, m)
	}
	if len(lineBatches) > 0 {
		err := st.journalBatches(lineBatches, metaRecs, func(i int, sp journal.Span) {
			s := order[i]
			res := &live[s.req].res.Results[s.entry]
			res.Index = st.totalEntries()
			if res.UUID != "" {
				st.ids.add(res.UUID)
			}
			st.addPending(sp, res.Size)
			line := live[s.req].entries[s.entry].Line
			if st.ent != nil {
				st.ent.AddValid(line)
			}
			st.noteAgentMeta(line)
		})
		if err != nil {
			for _, r := range live {
				r.res = nil
				r.err = err
				close(r.done)
			}
			return
		}
		for i, m := range metas {
			if metaRecs[i] != nil {
				st.store.apply(m)
				st.storeDirty = true
			}
		}
		st.publishSummary()
	}
	if len(lineBatches) > 0 && st.ent != nil {
		// Before the acks: a caller that lists right after its append
		// must see it. The summaries stored now are as new as this.
		st.ent.ModifiedMs = now.UnixMilli()
		st.publish()
	}
	total := st.totalEntries()
	for _, r := range live {
		for _, res := range r.res.Results {
			if res.Outcome == Stored {
				st.m.stats.stored.Add(1)
			} else {
				st.m.stats.duplicate.Add(1)
			}
		}
		r.res.Entries = total
		r.res.SummaryVersion = st.store.SummaryVersion
		close(r.done)
	}
	if len(lineBatches) > 0 {
		st.notifyChange()
		if st.sizeDue() {
			if err := st.compact("size"); err != nil {
				st.log.Warn("compaction failed; entries stay in the journal", zap.Error(err))
			}
		}
	}
}

// journalBatches writes batches to the journal (creating it on first use)
// and calls stored for each entry, in order, once they are durable.
func (st *state) journalBatches(batches [][][]byte, metas [][]byte, stored func(i int, sp journal.Span)) error {
	if st.j == nil {
		if err := st.newGeneration(); err != nil {
			return err
		}
	}
	spans, err := st.j.AppendMeta(batches, metas)
	if err != nil {
		if st.j.Err() != nil {
			// A write or sync failed: the journal is done for (see
			// journal.Journal); the writer reopens from disk.
			st.failed = err
		}
		// Otherwise the journal refused the batches before writing
		// anything (a record over its limit): the writer goes on.
		return fmt.Errorf("journal append to %s: %w", st.key, errdefs.FromIO(err))
	}
	st.m.stats.syncs.Add(1)
	i := 0
	for _, bs := range spans {
		for _, sp := range bs {
			st.m.stats.journalBytes.Add(uint64(sp.Len))
			stored(i, sp)
			i++
		}
	}
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
	if err := st.j.MarkCompacted(journal.Marker{Size: newFP.size, Tail: newFP.tail}); err != nil {
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
	st.m.stats.compactions.Add(1)
	st.m.stats.compactedBytes.Add(uint64(newFP.size))
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
	return st.journalBatches([][][]byte{lines}, nil, func(i int, sp journal.Span) {
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
	spans := make([]journal.Span, len(pending))
	for i, p := range pending {
		spans[i] = p.span
	}
	if _, err := st.replay(spans); err != nil {
		st.failed = err
		return err
	}
	st.lineage = st.m.lineage.Add(1)
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
	spans := make([]journal.Span, len(st.pending))
	for i, p := range st.pending {
		spans[i] = p.span
	}
	err = st.j.ReadEntries(spans, func(_ int, line []byte) error {
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

// dropEmptyJournal removes the journal of a session that has nothing
// pending as its writer closes: recovery at start then opens only sessions
// with something to replay, instead of every session ever written.
func (st *state) dropEmptyJournal() {
	if st.j == nil || len(st.pending) > 0 || st.failed != nil {
		return
	}
	st.closeFiles()
	if err := st.fs.Remove(st.jpath); err == nil {
		st.fs.SyncDir(filepath.Dir(st.jpath))
	}
}

// discardNewJournal removes what a failed first journal.Create may have
// left at the journal's path: a header and no entry, since a writer
// without a journal found none when it opened. Left there, the refused
// append would leave a session behind that every listing opens a writer
// (and its files) to look at, however short of descriptors the daemon is.
// If the removal fails too, the next writer to open the session finds the
// empty journal and drops it when it retires or stops.
func (st *state) discardNewJournal() {
	err := st.fs.Remove(st.jpath)
	if err == nil {
		err = st.fs.SyncDir(filepath.Dir(st.jpath))
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.log.Warn("cannot remove the journal a refused append started; the next writer drops it", zap.Error(err))
	}
}

// publish hands a copy of the listing entry to the index.
func (st *state) publish() {
	if st.ent != nil {
		st.ent.Pending = uint64(len(st.pending))
		st.ent.Absent = !st.exists()
		st.m.ix.Put(*st.ent)
	}
}

// release publishes the final entry with the files' stamp, as the writer
// closes: from now on the index checks the files for foreign changes.
func (st *state) release() {
	if st.ent == nil || !st.opened {
		return
	}
	e := *st.ent
	if st.failed != nil {
		// What this writer saw may not be what is on disk: let the index
		// rebuild the entry from the files.
		e.Stamp, e.ModifiedMs = index.Stamp{}, 0
		st.m.ix.Release(e)
		return
	}
	e.Stamp, e.ModifiedMs = st.m.stamp(st.key)
	st.m.ix.Release(e)
}

func (st *state) notifyChange() {
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *state) closeFiles() {
	if st.j != nil {
		st.noteJournalFailure()
		st.j.Close()
		st.j = nil
	}
}

// noteJournalFailure records, when the journal failed a write or a sync,
// where its last synced write ended, for the next writer of the session
// (see journal.Options.DurableEnd).
func (st *state) noteJournalFailure() {
	if st.j != nil && st.j.Err() != nil {
		gen, end := st.j.DurableEnd()
		st.m.noteDurableEnd(st.key, durableEnd{gen, end})
	}
}

// idSet holds the uuids a session contains; canonical UUIDs are stored in
// 16 bytes to keep large sessions cheap.
type idSet struct {
	u map[uuid.UUID]struct{}
	s map[string]struct{}
}

func newIDSet() idSet { return idSet{u: make(map[uuid.UUID]struct{}), s: make(map[string]struct{})} }

func compactID(id string) (uuid.UUID, bool) {
	if len(id) != 36 {
		return uuid.UUID{}, false
	}
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return uuid.UUID{}, false
	}
	return u, true
}

func (x idSet) has(id string) bool {
	if u, ok := compactID(id); ok {
		_, found := x.u[u]
		return found
	}
	_, found := x.s[id]
	return found
}

func (x idSet) add(id string) {
	if u, ok := compactID(id); ok {
		x.u[u] = struct{}{}
		return
	}
	x.s[id] = struct{}{}
}
