package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/writer/files"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

// Outcome says what happened to one appended entry.
type Outcome int

const (
	Stored Outcome = iota + 1
	Duplicate
)

// Result is the fate of one appended entry.
type Result struct {
	Outcome Outcome
	UUID    string
	Index   uint64 // position in the session, for stored entries
	Size    int    // bytes of the stored line without its newline
}

// AppendResult answers one Append.
type AppendResult struct {
	Results []Result
	Entries uint64 // entries the session holds afterwards
	// DuplicateBatch: the transcript had stored a batch with this batch
	// id; nothing was written now.
	DuplicateBatch bool
	// SummaryVersion is the version of the session's summary in the
	// append's folder afterwards.
	SummaryVersion uint64
	// Absorbed counts the lines the agent's CLI wrote into the file that
	// a shared-file append's writer took in (shared.go).
	Absorbed uint64
}

func (st *State) addPending(p pendingEntry) {
	if len(st.pending) == 0 {
		st.pendingSince = st.Config.Clock.Now()
	}
	st.pending = append(st.pending, p)
	st.pendingBytes += int64(p.size) + 1
}

// commit is one group commit: deduplicate, journal everything in one write
// and one sync, then acknowledge each request. A request whose batch id
// the transcript already stored is answered as a duplicate batch; one whose
// summary was folded from another version is refused alone (ErrConflict),
// the rest of the group goes on.
func (st *State) commit(group []*AppendRequest) {
	group = st.catchUpShared(group)
	g := st.newGroupCommit()
	for _, r := range group {
		g.admit(r)
	}
	if len(g.batches) > 0 {
		if err := st.logGroup(g); err != nil {
			for _, r := range g.live {
				r.res = nil
				r.err = err
				close(r.done)
			}
			return
		}
	}
	st.saveSummaryOnly(g)
	st.takeMatched(g)
	st.recordShared()
	st.acknowledge(g)
	if len(g.batches) > 0 && st.sizeDue() {
		if err := st.Compact(ReasonSize); err != nil {
			st.log.Warn("compaction failed; entries stay in the journal", zap.Error(err))
		}
	}
}

// groupCommit is one group commit being put together: the batches of the
// requests that store something, and where each stored entry's result goes.
type groupCommit struct {
	st        *State
	now       time.Time
	seen      map[string]bool // uuids stored by the group so far
	seenBatch map[string]bool // batch ids stored by the group so far
	// versions are the summary versions, by folder, as batches are
	// added (version reads them).
	versions map[string]uint64
	lines    uint64 // the transcript's line count as batches are added

	// live are the requests to answer with a result once the group is
	// durable; batches, metaRecs and metas hold one element per request
	// that stores entries, order where each entry's result goes.
	live     []*AppendRequest
	batches  [][][]byte
	metaRecs [][]byte
	metas    []sessionstore.BatchMeta
	order    []entrySlot

	// absorbed: lines taken in from the agent's CLI that no shared-file
	// append claimed yet; summaryOnly (and their requests): summaries, or
	// batch ids alone, of shared-file appends that stored no entry
	// (shared.go).
	absorbed        uint64
	summaryOnly     []sessionstore.BatchMeta
	summaryOnlyReqs []*AppendRequest
	// taken counts, by digest, the CLI's unmatched lines the group's
	// mirrored entries matched; takes lists them by request. They leave
	// the unmatched lines only once the group is durable (takeMatched):
	// a request refused matched nothing, and its retry matches again.
	taken map[files.Digest]int
	takes map[*AppendRequest][]files.Digest
}

// entrySlot is an entry of a group: its request in live and its place in
// the request.
type entrySlot struct{ req, entry int }

func (st *State) newGroupCommit() *groupCommit {
	return &groupCommit{st: st, now: st.Config.Clock.Now(), seen: make(map[string]bool), seenBatch: make(map[string]bool),
		versions: make(map[string]uint64), lines: st.totalEntries(), absorbed: st.sh.absorbed}
}

// version is folder's summary version with the group's batches so far.
func (g *groupCommit) version(folder string) uint64 {
	if v, ok := g.versions[folder]; ok {
		return v
	}
	return g.st.store.SummaryOf(folder).Version
}

// admit adds r to the group: answered at once when refused, a duplicate
// batch, or its entries deduplicated by uuid and the rest batched.
func (g *groupCommit) admit(r *AppendRequest) {
	st := g.st
	r.res = &AppendResult{Results: make([]Result, len(r.entries))}
	if id := r.opt.BatchID; id != "" && (g.seenBatch[id] || st.store.Seen(id, g.now)) {
		r.res.DuplicateBatch = true
		for ei, e := range r.entries {
			r.res.Results[ei] = Result{Outcome: Duplicate, UUID: e.UUID, Size: len(e.Line)}
		}
		g.live = append(g.live, r)
		return
	}
	if s := r.opt.Summary; s != nil && s.ExpectedVersion != g.version(s.Folder) {
		r.res, r.err = nil, sessionstore.SummaryConflict(st.key, s.ExpectedVersion, g.version(s.Folder))
		close(r.done)
		return
	}
	if s := r.opt.Summary; s != nil && s.CheckCoverage && s.Covers != g.lines && !g.coversShared(r) {
		r.res, r.err = nil, sessionstore.CoverageConflict(st.key, s.Covers, g.lines)
		close(r.done)
		return
	}
	ri := len(g.live)
	g.live = append(g.live, r)
	g.claimAbsorbed(r)
	batch := g.dedup(r, ri)
	if len(batch) == 0 {
		// Nothing stored, so no batch to remember and no summary
		// change: the summary follows what the transcript holds. But
		// a shared-file batch is in the file already, and its summary
		// is that of the file.
		g.keepSummaryOnly(r)
		return
	}
	g.lines += uint64(len(batch))
	m := sessionstore.BatchMeta{BatchID: r.opt.BatchID, At: g.now.UnixMilli(), Entries: g.lines}
	if s := r.opt.Summary; s != nil {
		v := g.version(s.Folder) + 1
		g.versions[s.Folder] = v
		m.Summary, m.SummaryVersion, m.Folder = s.Data, v, s.Folder
	}
	var rec []byte
	if m.BatchID != "" || m.Summary != nil {
		rec = m.Encode()
		if m.BatchID != "" {
			g.seenBatch[m.BatchID] = true
		}
	}
	g.batches = append(g.batches, batch)
	g.metaRecs = append(g.metaRecs, rec)
	g.metas = append(g.metas, m)
}

// dedup fills r's results, marking duplicate the entries whose uuid the
// session or the group already holds, and returns the lines to store;
// ri is r's place in live.
func (g *groupCommit) dedup(r *AppendRequest, ri int) [][]byte {
	var batch [][]byte
	for ei, e := range r.entries {
		res := &r.res.Results[ei]
		res.UUID = e.UUID
		res.Size = len(e.Line)
		if e.UUID != "" {
			if g.seen[e.UUID] || g.st.ids.has(e.UUID) {
				res.Outcome = Duplicate
				continue
			}
			g.seen[e.UUID] = true
		} else if r.opt.SharedFile && g.match(r, e.Line) {
			res.Outcome = Duplicate
			continue
		}
		res.Outcome = Stored
		batch = append(batch, e.Line)
		g.order = append(g.order, entrySlot{ri, ei})
	}
	return batch
}

// logGroup journals the group's batches and, once they are durable, makes
// their entries pending and the batch ids and summaries the store's.
func (st *State) logGroup(g *groupCommit) error {
	// While the ballast's room is kept for the compactions that
	// waited for it, appends do not take it (package space).
	if err := st.Space.AppendRoom(batchBytes(g.batches)); err != nil {
		return fmt.Errorf("journal append to %s: %w", st.key, err)
	}
	err := st.logBatches(g.batches, g.metaRecs, func(i int, sp stream.Span) {
		s := g.order[i]
		res := &g.live[s.req].res.Results[s.entry]
		res.Index = st.totalEntries()
		if res.UUID != "" {
			st.ids.add(res.UUID)
		}
		st.addPending(pendingEntry{span: sp, size: res.Size, uuid: res.UUID})
		line := g.live[s.req].entries[s.entry].Line
		if st.ent != nil {
			st.ent.AddValid(line)
		}
		st.noteAgentMeta(line)
	})
	if err != nil {
		return err
	}
	for i, m := range g.metas {
		if g.metaRecs[i] != nil {
			st.store.Apply(m)
			st.storeDirty = true
		}
	}
	st.publishSummary()
	return nil
}

// acknowledge answers the group's requests, after publishing what they
// stored: a caller holding its ack sees its entries in the listing and in
// what watchers are told.
func (st *State) acknowledge(g *groupCommit) {
	stored := len(g.batches) > 0
	if stored && st.ent != nil {
		// Before the acks: a caller that lists right after its append
		// must see it. The summaries stored now are as new as this.
		st.ent.ModifiedMs = g.now.UnixMilli()
		st.Publish()
	}
	total := st.totalEntries()
	for _, r := range g.live {
		for _, res := range r.res.Results {
			if res.Outcome == Stored {
				st.Stats.Stored.Add(1)
				st.unnoted++
			} else {
				st.Stats.Duplicate.Add(1)
			}
		}
		r.res.Entries = total
		folder := ""
		if r.opt.Summary != nil {
			folder = r.opt.Summary.Folder
		}
		r.res.SummaryVersion = st.store.SummaryOf(folder).Version
	}
	if stored {
		// Before the acks, as the listing above: once a caller holds its
		// ack, a watcher (the mirror's status, tail -f) already counts
		// the entries. Told after, a status read in between said
		// nothing was behind while an acknowledged entry was.
		st.notifyChange()
	}
	for _, r := range g.live {
		close(r.done)
	}
}

// logBatches writes batches to the session's log (creating it on first
// use) and calls stored for each entry, in order, once they are durable.
func (st *State) logBatches(batches [][][]byte, metas [][]byte, stored func(i int, sp stream.Span)) error {
	if st.j == nil {
		if err := st.newGeneration(); err != nil {
			return err
		}
	}
	spans, err := st.j.Append(batches, metas)
	if err != nil {
		if st.j.Broken() {
			// A write or sync failed: the journal is done for (see
			// *stream.Stream.broken); the writer reopens from disk.
			st.failed = err
		}
		// Otherwise the journal refused the batches before writing
		// anything (a record over its limit): the writer goes on.
		err = errdefs.FromIO(err)
		if errors.Is(err, errdefs.ErrNoSpace) {
			// Say where and how much (the caller is told which disk
			// to free), and free the reserves for the compactions.
			err = st.Space.Full(st.Config.Layout.JournalDir(), batchBytes(batches), err)
		}
		return fmt.Errorf("journal append to %s: %w", st.key, err)
	}
	i := 0
	for _, bs := range spans {
		for _, sp := range bs {
			st.Stats.JournalBytes.Add(uint64(sp.N))
			stored(i, sp)
			i++
		}
	}
	return nil
}

// batchBytes is about what batches take in the journal: their entries and a
// record header each.
func batchBytes(batches [][][]byte) int64 {
	var n int64
	for _, b := range batches {
		for _, e := range b {
			n += int64(len(e)) + 32
		}
	}
	return n
}

// idSet holds the uuids a session contains; canonical UUIDs are stored in
// 16 bytes to keep large sessions cheap.
type idSet struct {
	u map[uuid.UUID]struct{}
	s map[string]struct{}
}

func newIDSet() idSet { return idSet{u: make(map[uuid.UUID]struct{}), s: make(map[string]struct{})} }

func (x idSet) has(id string) bool {
	if u, ok := transcript.CanonicalUUID(id); ok {
		_, found := x.u[u]
		return found
	}
	_, found := x.s[id]
	return found
}

func (x idSet) add(id string) {
	if u, ok := transcript.CanonicalUUID(id); ok {
		x.u[u] = struct{}{}
		return
	}
	x.s[id] = struct{}{}
}
