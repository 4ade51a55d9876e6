package session

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/writer/files"
)

// The shared file. On the defaults of both sides (sessiond's root and the
// agent's config dir both ~/.claude) the Claude Code CLI writes its own
// copy of every transcript line into the canonical file, then mirrors the
// same line to sessiond through the SDK's SessionStore (appends marked
// sessionstore.AppendOptions.SharedFile). It also writes lines it never
// mirrors (api-request...), and many lines it mirrors have no uuid, some
// repeated byte for byte. So before deduplicating a shared-file append the
// writer takes in what the CLI wrote: new whole lines past what it knows,
// counted and made durable (the CLI does not sync) without moving any line
// already served; a rewrite, or lines behind pending entries, go the long
// way (catchUpForeign). Every line without a uuid that another program
// wrote into the file goes into a multiset of unmatched foreign lines: an
// entry of a shared-file append without a uuid whose JSON value matches
// one takes it and is answered DUPLICATE; an entry with a uuid is deduplicated by uuid
// as any other. Only shared-file appends take from the multiset: a title
// appended through the store, identical to an older line, is a new line.
//
// The multiset outlives the writer: its mirrored copies may arrive after
// a retirement, a restart or a crash. Each line noted and each taken is
// recorded in the session's ledger (ledger.SharedOp), in order, and the
// next writer replays them as it opens (replayShared). A note rides in
// the record that names the file holding its line, never after it: so a
// crash keeps both or neither, and lines past the last record are found
// again (markOpenTail). A take is recorded once its group is durable and
// before its acknowledgement (takeMatched): a group refused takes nothing,
// and its retry matches again; a batch acknowledged is answered by its
// batch id when resent. The multiset is bounded (files.MaxUnmatched).

// sharedState is what a writer knows of the lines other programs wrote
// into its canonical file.
type sharedState struct {
	// unmatched: the lines without uuid other programs wrote that no
	// shared-file append has matched yet.
	unmatched files.Unmatched
	// absorbed counts the lines other programs wrote that the writer took
	// in since a shared-file append last claimed them (AppendResult.Absorbed).
	absorbed uint64
	// tailFrom, tailTo: what open found in the file past the ledger's last
	// record, not noted yet (it is read at the first shared-file append
	// only, and is still the same bytes then: a compaction keeps the
	// file's content as a prefix; a rewrite forgets it).
	tailFrom, tailTo int64
	tailBase         fingerprint // the file the ledger's record names
	// unsynced: lines were noted since the file was last synced;
	// recordDue: since the ledger last recorded the file (recordShared).
	unsynced  bool
	recordDue bool
}

// noteForeign notes lines another program wrote into the file (or the
// file a compaction replaced), one per element, each without its newline,
// and hands those without uuid to the ledger's next record.
func (st *State) noteForeign(lines [][]byte) {
	sh := &st.sh
	sh.absorbed += uint64(len(lines))
	sh.unsynced = sh.unsynced || len(lines) > 0
	ds := sh.unmatched.Note(lines)
	ops := make([][16]byte, len(ds))
	for i, d := range ds {
		ops[i] = d
	}
	st.acked.NoteShared(ops, files.MaxUnmatched)
}

// replayShared rebuilds, as the writer opens, the lines without uuid the
// CLI wrote that no mirrored copy matched yet, from the operations the
// ledger recorded: they survive the writer's retirement, a restart and a
// crash, so a mirrored copy arriving after any of them is still answered
// as a duplicate.
func (st *State) replayShared() {
	for _, op := range st.acked.ReplayShared() {
		if op.Take {
			st.sh.unmatched.Remove(files.Digest(op.Digest))
		} else {
			st.sh.unmatched.Add(files.Digest(op.Digest))
		}
	}
}

// markOpenTail remembers, as the writer opens, the part of the canonical
// file past what the ledger last recorded of it: lines another program
// wrote while no writer was open; and rebuilds the lines the CLI wrote
// before that no mirrored copy matched (replayShared).
func (st *State) markOpenTail() {
	st.replayShared()
	last, known := st.acked.LastRecorded()
	if known && st.canonExists && st.canon.size > last.Size {
		st.sh.tailFrom, st.sh.tailTo = last.Size, st.canon.size
		st.sh.tailBase = fingerprint{last.Size, last.Tail}
	}
}

// forgetOpenTail: another program rewrote the file, so the offsets open
// noted no longer name those lines.
func (st *State) forgetOpenTail() { st.sh.tailFrom, st.sh.tailTo = 0, 0 }

// noteOpenTail notes the lines markOpenTail found, if the file still
// starts with what the ledger last recorded.
func (st *State) noteOpenTail() error {
	from, to := st.sh.tailFrom, st.sh.tailTo
	if to <= from {
		return nil
	}
	if from > 0 {
		ok, err := st.hasPrefix(st.sh.tailBase)
		if err != nil {
			return err
		}
		if !ok {
			// Rewritten since: which lines are the CLI's is not known.
			st.forgetOpenTail()
			return nil
		}
		// The record may name the file as it was with a line being
		// written last: that line is the CLI's too.
		if from, err = files.LineStart(st.fs, st.canonPath, from); err != nil {
			return err
		}
	}
	if err := st.noteRange(from, to); err != nil {
		return err
	}
	st.forgetOpenTail()
	if err := st.syncShared(); err != nil {
		return err
	}
	st.sh.recordDue = true
	return nil
}

// syncShared makes the canonical file durable when lines another program
// wrote there were noted since it last was: the CLI does not sync what it
// writes, and a mirrored entry matched with one of those lines is answered
// as stored. A failure fails the writer (syncCanonical), which reopens.
func (st *State) syncShared() error {
	if !st.sh.unsynced {
		return nil
	}
	if err := st.syncCanonical(); err != nil {
		return err
	}
	st.sh.unsynced = false
	return nil
}

// noteRange notes the whole lines of the canonical file between from and
// to as another program's, reading them one at a time: the first open of
// a session the CLI wrote alone reads all of it, and such a file can be
// hundreds of megabytes.
func (st *State) noteRange(from, to int64) error {
	return files.ScanWholeLines(st.fs, st.canonPath, from, to, func(l []byte) { st.noteForeign([][]byte{l}) })
}

// recordShared records in the ledger, in one synced record before the
// group's acknowledgements, that the writer noted the lines other
// programs wrote into the file as it is now (when it took some in), so
// that the next open does not take them for new ones (markOpenTail), with
// the lines without uuid it noted and those the group matched (shared.go).
// A failure costs nothing stored: the lines are found again past the last
// record, and the Book's next record carries the operations.
func (st *State) recordShared() {
	var err error
	if st.sh.recordDue {
		err = st.acked.Absorbed(st.canon.ledger())
		st.sh.recordDue = err != nil
	}
	if err == nil {
		err = st.acked.RecordShared()
	}
	if err != nil {
		st.log.Warn("cannot record in the ledger the lines taken in from the agent's CLI, or those mirrored entries matched", zap.Error(err))
	}
}

// noteAbsorbed notes the lines another program appended to the file past
// old, which absorbForeign just took in, when they were appended (the
// file still starts with old, which ended in a whole line).
func (st *State) noteAbsorbed(old fingerprint, oldNL bool) error {
	if st.canon.size <= old.size {
		return nil
	}
	if ok, err := st.hasPrefix(old); err != nil || !ok {
		return err
	}
	from := old.size
	if !oldNL {
		// The file ended in a line being written (the CLI's, seen at
		// open): it is whole now, and as much the CLI's as what follows.
		start, err := files.LineStart(st.fs, st.canonPath, old.size)
		if err != nil {
			return err
		}
		from = start
	}
	return st.noteRange(from, st.canon.size)
}

// catchUpShared takes in what the agent's CLI wrote into the canonical
// file, before a group holding shared-file appends is deduplicated. A
// failure refuses those appends (stored without it, their entries could
// be stored twice) and leaves the others to the group, which it returns.
func (st *State) catchUpShared(group []*AppendRequest) []*AppendRequest {
	shared := false
	for _, r := range group {
		shared = shared || r.opt.SharedFile
	}
	if !shared {
		return group
	}
	err := st.takeInShared()
	if err == nil {
		return group
	}
	st.log.Warn("cannot take in the lines the agent's CLI wrote into the transcript; its mirrored appends are refused", zap.Error(err))
	kept := group[:0:0]
	for _, r := range group {
		if !r.opt.SharedFile {
			kept = append(kept, r)
			continue
		}
		r.res = nil
		r.err = fmt.Errorf("take in the lines the agent's CLI wrote into %s before its mirrored batch: %w", st.canonPath, err)
		close(r.done)
	}
	return kept
}

// TakeIn takes in what other programs appended to the canonical file
// since the writer last saw it, as a shared-file append does first, and
// records it in the ledger. A flush runs it: the file is the transcript,
// so making a session current means sessiond's view too (Read, the
// listing, the ledger), not only the file with the journal. Without it a
// flush with nothing journaled left lines the CLI wrote alone (claude
// --resume in ~/.claude, no store) out of Read until the writer reopened.
func (st *State) TakeIn() error {
	// Only a file that grew past what the writer knows: one another
	// program removed, replaced or cut is left to the paths that judge
	// those (the next compaction's checks, the next open), as before.
	fi, err := st.fs.Lstat(st.canonPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("take in the lines another program wrote into %s: %w", st.canonPath, errdefs.FromIO(err))
	case !st.canonExists || fi.Size() <= st.canon.size:
		return nil
	}
	if err := st.takeInShared(); err != nil {
		return fmt.Errorf("take in the lines another program wrote into %s: %w", st.canonPath, err)
	}
	st.recordShared()
	return nil
}

// takeInShared notes the lines past the ledger's last record found at
// open, takes in what was appended since, and makes it durable: what a
// shared-file append and a flush do first.
func (st *State) takeInShared() error {
	err := st.noteOpenTail()
	if err == nil {
		err = st.absorbShared()
	}
	if err == nil {
		err = st.syncShared()
	}
	if err == nil && st.failed != nil {
		err = st.failed
	}
	return err
}

// absorbShared takes in the lines another program appended to the
// canonical file since the writer last saw it: only the new whole lines
// when the file just grew past what the writer knows and nothing is
// pending (no line served moves), else the whole file again
// (catchUpForeign).
func (st *State) absorbShared() error {
	if err := st.checkPath(); err != nil {
		return err
	}
	fi, err := st.fs.Lstat(st.canonPath)
	if errors.Is(err, fs.ErrNotExist) && !st.canonExists {
		return nil
	}
	if err == nil && st.canonExists && fi.Size() == st.canon.size {
		// A rewrite to the same size is left to the next compaction's
		// check, as for any other program's.
		return nil
	}
	if err == nil && fi.Size() > st.canon.size && len(st.pending) == 0 && st.canonEndsNL {
		if ok, err := st.hasPrefix(st.canon); err != nil || ok {
			if err != nil {
				return err
			}
			return st.absorbGrown(fi.Size())
		}
	}
	if _, err := st.catchUpForeign(); err != nil {
		return err
	}
	return st.syncShared()
}

// absorbGrown takes in the whole lines between the end of what the writer
// knows of the file and size, leaving a line still being written for
// later, and makes them durable before anything is acknowledged from them.
func (st *State) absorbGrown(size int64) error {
	data, err := files.ReadRange(st.fs, st.canonPath, st.canon.size, size)
	if err != nil {
		return err
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	if len(data) == 0 {
		return nil
	}
	lines := files.WholeLines(data)
	end := st.canon.size + int64(len(data))
	tail, mtime, err := files.TailAt(st.fs, st.canonPath, end)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if id, ok := rawjson.TopLevelString(l, "uuid"); ok && id != "" {
			st.ids.add(id)
		}
		if st.ent != nil {
			st.ent.Add(l, true)
		}
	}
	st.noteForeign(lines)
	st.canonExists = true
	st.canonEntries += uint64(len(lines))
	st.canon = fingerprint{end, tail}
	if st.ent != nil && mtime > st.ent.ModifiedMs {
		st.ent.ModifiedMs = mtime
	}
	if err := st.syncShared(); err != nil {
		return err
	}
	st.sh.recordDue = true
	st.Publish()
	st.notifyChange()
	return nil
}

// coversShared reports whether s, the summary of shared-file append, was
// folded from the lines before those the writer just took in from the
// agent's CLI (absorbed): the batch mirrors them, and the CLI's lines it
// never mirrors fold to nothing.
func (g *groupCommit) coversShared(r *AppendRequest) bool {
	s := r.opt.Summary
	return r.opt.SharedFile && g.absorbed > 0 && s.Covers+g.absorbed == g.lines
}

// claimAbsorbed gives r, a shared-file append the group admits, the count
// of lines taken in from the agent's CLI since the last one that its
// summary did not count (a reader may have opened the writer, which read
// them, before the adapter folded them in): the adapter takes its summary
// as covering them.
func (g *groupCommit) claimAbsorbed(r *AppendRequest) {
	if !r.opt.SharedFile {
		return
	}
	r.res.Absorbed = g.absorbed
	if s := r.opt.Summary; s != nil && s.CheckCoverage {
		r.res.Absorbed = g.lines - s.Covers
	}
	g.absorbed = 0
	g.st.sh.absorbed = 0
}

// keepSummaryOnly keeps the summary of r, a shared-file append whose
// entries were all in the file already: its batch mirrors what the CLI
// wrote, so its summary covers the transcript as it is now. Without a
// summary, it keeps the batch id of one that matched lines without uuid:
// they are matched for good once it is acknowledged (takeMatched), so a
// retry after a lost answer must be answered by its batch id.
func (g *groupCommit) keepSummaryOnly(r *AppendRequest) {
	s := r.opt.Summary
	if !r.opt.SharedFile {
		return
	}
	if s == nil {
		if r.opt.BatchID != "" && len(g.takes[r]) > 0 {
			g.seenBatch[r.opt.BatchID] = true
			g.summaryOnly = append(g.summaryOnly, sessionstore.BatchMeta{BatchID: r.opt.BatchID, At: g.now.UnixMilli(), Entries: g.lines})
			g.summaryOnlyReqs = append(g.summaryOnlyReqs, r)
		}
		return
	}
	v := g.version(s.Folder) + 1
	g.versions[s.Folder] = v
	m := sessionstore.BatchMeta{BatchID: r.opt.BatchID, At: g.now.UnixMilli(), Entries: g.lines,
		Summary: s.Data, SummaryVersion: v, Folder: s.Folder}
	if m.BatchID != "" {
		g.seenBatch[m.BatchID] = true
	}
	g.summaryOnly = append(g.summaryOnly, m)
	g.summaryOnlyReqs = append(g.summaryOnlyReqs, r)
}

// saveSummaryOnly stores the summaries and batch ids keepSummaryOnly
// kept, in the store's sidecar (no journal record carries a summary
// without entries); a failure refuses their appends.
func (st *State) saveSummaryOnly(g *groupCommit) {
	if len(g.summaryOnly) == 0 {
		return
	}
	for _, m := range g.summaryOnly {
		st.store.Apply(m)
	}
	st.storeDirty = true
	st.publishSummary()
	summarized := slices.ContainsFunc(g.summaryOnly, func(m sessionstore.BatchMeta) bool { return m.Summary != nil })
	if st.ent != nil && summarized {
		// Listed before the acks, as acknowledge does for stored
		// entries: a caller that lists right after sees its summary.
		st.ent.ModifiedMs = max(st.ent.ModifiedMs, g.now.UnixMilli())
	}
	st.Publish()
	err := st.saveStore()
	if err == nil {
		return
	}
	err = fmt.Errorf("store the summary of %s: %w", st.key, err)
	for _, r := range g.summaryOnlyReqs {
		for i, l := range g.live {
			if l == r {
				g.live = append(g.live[:i], g.live[i+1:]...)
				break
			}
		}
		r.res, r.err = nil, err
		close(r.done)
	}
}

// match matches line, an entry without uuid of r, a shared-file append,
// with one of the CLI's unmatched lines not matched yet by the group, and
// reports whether there was one.
func (g *groupCommit) match(r *AppendRequest, line []byte) bool {
	d := files.DigestOf(line)
	if g.taken[d] >= g.st.sh.unmatched.Count(d) {
		return false
	}
	if g.taken == nil {
		g.taken = make(map[files.Digest]int)
		g.takes = make(map[*AppendRequest][]files.Digest)
	}
	g.taken[d]++
	g.takes[r] = append(g.takes[r], d)
	return true
}

// takeMatched takes the lines the group's appends still to be
// acknowledged matched out of the unmatched ones, once the group is
// durable (their batch ids remembered), for recordShared to record before
// the acknowledgements: matched again after a restart, a line would
// answer a mirrored copy the CLI wrote again, which then is lost. A crash
// between the two leaves the line unmatched, as a line the CLI never
// mirrors is: the CLI writes each line before it mirrors it, so a later
// mirrored copy has a line of its own to match, and the one left goes
// with the bound (files.MaxUnmatched). Once recorded, a retry of the
// append is answered by its batch id.
func (st *State) takeMatched(g *groupCommit) {
	for _, r := range g.live {
		for _, d := range g.takes[r] {
			st.sh.unmatched.Remove(d)
			st.acked.TakeShared(d)
		}
	}
}
