package journal

import (
	"fmt"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/layout"
)

// maxKeptScratch bounds the encode buffer the committer keeps between
// commits.
const maxKeptScratch = 4 << 20

// The committer is a role, not a goroutine of its own: the goroutine whose
// request finds nobody committing takes it (a session writer, for
// appends), commits everything queued from every stream at that moment
// (plus what arrives during the commit delay) with one write and one
// sync, answers every waiter, and hands the role to the oldest request
// that queued meanwhile, whose goroutine then commits the next group. One
// goroutine commits at a time, so commits never overlap; an agent alone
// pays no hand-off to an idle goroutine (a wake-up of another thread cost
// a lone client about 90 us per append here, a quarter of its latency).

// enqueue adds r to the queue and reports whether its goroutine must lead
// (nobody was committing).
func (l *Log) enqueue(r *request) (lead bool) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.queue = append(l.queue, r)
	if l.leading {
		select {
		case l.arrived <- struct{}{}:
		default:
		}
		return false
	}
	l.leading = true
	return true
}

// take removes from the queue what one write may carry: at least one
// request, then more up to MaxWrite bytes. Called with l.qmu held.
func (l *Log) take(group []*request, total int64) ([]*request, int64) {
	n := 0
	for n < len(l.queue) && (len(group) == 0 || total < l.opt.MaxWrite) {
		r := l.queue[n]
		if r.group != nil && len(group) > 0 {
			break // a test's group goes alone
		}
		group = append(group, r)
		total += r.bytes
		n++
		if r.group != nil {
			break
		}
	}
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = nil
	}
	return group, total
}

// lead commits one group, which holds the leader's own request (the oldest
// queued), then passes the role on.
func (l *Log) lead() {
	l.qmu.Lock()
	group, total := l.take(nil, 0)
	l.qmu.Unlock()
	if len(group) == 1 && group[0].group != nil {
		g := group[0]
		l.commit(g.group)
		close(g.done)
	} else {
		group = l.waitForSiblings(group, total)
		l.noteStreams(group)
		l.commit(group)
	}
	l.collect()
	l.pressure()
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if len(l.queue) == 0 {
		l.leading = false
		return
	}
	// The oldest waiter leads next; its goroutine is parked on lead.
	l.queue[0].lead <- struct{}{}
}

// planned is what one request will change once its write is durable.
type planned struct {
	r     *request
	ep    *epoch // the stream's epoch, new when bind
	bind  bool
	spans [][]Span
	seq   uint64 // the epoch's last batch seq after this request
}

func fail(group []*request, err error) {
	for _, r := range group {
		r.err = err
		close(r.done)
	}
}

// commit writes group in one synced write to the current segment, then
// makes its records visible and answers its requests, in that order: a
// request is answered only once its records are durable and recorded in
// the acknowledgement record.
func (l *Log) commit(group []*request) {
	if l.cur == nil {
		if err := l.roll(); err != nil {
			fail(group, fmt.Errorf("log: %w", err))
			return
		}
	}
	seg := l.cur
	l.mu.Lock()
	buf, plans, entries := l.encodeGroup(seg, group)
	l.mu.Unlock()
	for _, r := range group {
		if r.err != nil {
			close(r.done)
		}
	}
	if len(plans) == 0 {
		return
	}
	n := len(buf)
	buf = padAfter(buf, seg.end+int64(n), seg.id, int64(n))
	synced, err := l.write(seg, buf)
	if err != nil {
		for _, p := range plans {
			p.r.err = err
			close(p.r.done)
		}
		return
	}
	l.padding.Add(uint64(len(buf) - n))
	if l.opt.OnCommit != nil {
		l.opt.OnCommit(Commit{Entries: entries, Bytes: len(buf), Sync: synced})
	}
	l.publish(seg, plans, entries)
	// Recorded before anyone is told: a start after a kill then knows
	// how far this write was acknowledged (ackrec.go).
	_ = l.writeAck(false)
	for _, p := range plans {
		close(p.r.done)
	}
	l.rollIfFull(seg)
}

// encodeGroup encodes the records of every request of group for the end
// of seg into one buffer, and plans what each will change once the buffer
// is durable. A request that cannot be encoded gets its error and no plan.
// entries counts the entries encoded. Called with l.mu held.
func (l *Log) encodeGroup(seg *segment, group []*request) (buf []byte, plans []planned, entries int) {
	buf = l.scratch[:0]
	plans = make([]planned, 0, len(group))
	// Streams bound earlier in this same group, so a second request of a
	// stream finds the epoch the first one made.
	made := map[*Stream]*epoch{}
	for _, r := range group {
		ep, bind, err := l.epochFor(seg, r, made)
		if err != nil {
			r.err = err
			continue
		}
		p := planned{r: r, ep: ep, bind: bind != nil}
		if bind != nil {
			buf = frame.Append(buf, typeBind, bind, seg.id, int64(len(buf)))
		}
		made[r.st] = ep
		seq := ep.seq
		for _, pp := range plans {
			if pp.ep == ep && pp.seq > seq {
				seq = pp.seq
			}
		}
		var n int
		buf, p.spans, p.seq, n = encodeRequest(buf, seg, r, ep.Stream, seq)
		entries += n
		plans = append(plans, p)
	}
	return buf, plans, entries
}

// epochFor finds the epoch r's records go to: the one its stream made
// earlier in this group, a new one (with the payload of its Bind record,
// to be written before r's records), or the stream's current one. Called
// with l.mu held.
func (l *Log) epochFor(seg *segment, r *request, made map[*Stream]*epoch) (ep *epoch, bind []byte, err error) {
	s := r.st
	if e := made[s]; e != nil {
		return e, nil, nil
	}
	if s.lazy != nil {
		b := *s.lazy
		b.Stream = l.newStreamID()
		return newEpoch(seg, s.key, b, Fingerprint{b.BaseSize, b.BaseTail})
	}
	e := l.epochs[s.key]
	if e == nil {
		return nil, nil, fmt.Errorf("log: %s has no stream (Begin was not called): %w", s.key, errdefs.ErrFailedPrecondition)
	}
	if len(e.Batches) == 0 && e.Compacted == nil && e.bindSeg != seg.seq && len(r.batches) > 0 {
		// The stream's first entries, and its Bind sits in an older
		// segment that nothing held while the stream was empty: it
		// may be gone already, or go before these entries do. Bind
		// the stream anew here, so recovery always finds the Bind of
		// a stream with entries (the old, empty one is superseded).
		b := bindRec{ProjectKey: s.key.ProjectKey, SessionID: s.key.SessionID, Subpath: s.key.Subpath,
			BaseSize: e.Base.Size, BaseTail: e.Base.Tail, Stream: l.newStreamID()}
		return newEpoch(seg, s.key, b, e.Base)
	}
	return e, nil, nil
}

// newEpoch is the epoch a Bind record b written to seg starts, and the
// record's payload.
func newEpoch(seg *segment, key layout.Key, b bindRec, base Fingerprint) (*epoch, []byte, error) {
	payload, err := encodeBind(b)
	if err != nil {
		return nil, nil, err
	}
	ep := &epoch{Epoch: Epoch{Key: key, Stream: b.Stream, Base: base},
		bindSeg: seg.seq, segs: map[uint64]struct{}{}}
	return ep, payload, nil
}

// encodeRequest appends r's records for stream id to buf, which will be
// written at the end of seg: each batch's entries, its meta record and its
// commit (numbered on from seq), then r's compaction marker. It returns
// where each batch's entries will be, the stream's last batch seq, and how
// many entries it encoded.
func encodeRequest(buf []byte, seg *segment, r *request, id, seq uint64) ([]byte, [][]Span, uint64, int) {
	entries := 0
	spans := make([][]Span, len(r.batches))
	for i, b := range r.batches {
		entries += len(b)
		sp := make([]Span, len(b))
		for k, e := range b {
			sp[k] = Span{Seg: seg.seq, Off: seg.end + int64(len(buf)), Len: len(e)}
			buf = frame.AppendParts(buf, typeEntry, seg.id, int64(len(buf)), putStream(nil, id), e)
		}
		spans[i] = sp
		if m := r.meta(i); m != nil {
			buf = frame.AppendParts(buf, typeMeta, seg.id, int64(len(buf)), putStream(nil, id), m)
		}
		seq++
		buf = frame.Append(buf, typeCommit, encodeCommit(id, seq, len(b)), seg.id, int64(len(buf)))
	}
	if r.marker != nil {
		buf = frame.Append(buf, typeCompacted, encodeMarker(id, *r.marker), seg.id, int64(len(buf)))
	}
	return buf, spans, seq, entries
}

// publish applies the plans of a durable write to seg to the log's
// epochs: new streams replace their predecessors, batches and markers
// become visible, and the segments they sit in are held.
func (l *Log) publish(seg *segment, plans []planned, entries int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range plans {
		e := p.ep
		e.Modified = now
		if p.bind {
			if old := l.epochs[e.Key]; old != nil && old != e {
				l.letGo(old)
			}
			l.epochs[e.Key] = e
			p.r.st.lazy = nil
			p.r.st.id = e.Stream
		}
		for i, sp := range p.spans {
			e.addBatch(Batch{Seq: e.seq + uint64(i) + 1, Entries: sp, Meta: clone(p.r.meta(i))})
		}
		if len(p.spans) > 0 {
			l.hold(e, e.bindSeg)
			l.hold(e, seg.seq)
		}
		if p.r.marker != nil {
			m := *p.r.marker
			e.Compacted = &m
			l.hold(e, seg.seq)
		}
		e.seq = p.seq
		p.r.spans = p.spans
	}
	seg.entries += uint64(entries)
}

// rollIfFull starts a new segment once seg has reached its size.
func (l *Log) rollIfFull(seg *segment) {
	if seg.end < l.opt.SegmentSize {
		return
	}
	if err := l.roll(); err != nil {
		// The next commit tries again; this one is durable.
		l.mu.Lock()
		l.cur = nil
		l.mu.Unlock()
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// write puts b at the segment's end in one write and syncs, and says how
// long the sync took. On failure the segment is cut back to its last
// synced write (best effort) and sealed: the next commit starts a new
// segment that records where this one ends.
func (l *Log) write(seg *segment, b []byte) (time.Duration, error) {
	if cap(b) <= maxKeptScratch {
		l.scratch = b[:0]
	} else {
		l.scratch = nil
	}
	synced, err := frame.WriteSyncedTimed(seg.f, b, seg.end)
	if err != nil {
		err = errdefs.FromIO(fmt.Errorf("journal segment %s: %w", seg.path, err))
		l.mu.Lock()
		l.cur = nil
		l.prevEnd = seg.end
		l.mu.Unlock()
		// This write fails either way; the client's retry may find room.
		l.freeOnFull(err)
		return 0, err
	}
	l.syncs.Add(1)
	l.bytes.Add(uint64(len(b)))
	l.mu.Lock()
	seg.end += int64(len(b))
	l.mu.Unlock()
	return synced, nil
}

// Commit delay (PostgreSQL's commit_delay and commit_siblings): when many
// sessions append now and then, each at its own moment, requests rarely
// queue behind a sync, and every one would cost a sync of its own. So when
// a commit of appends would carry fewer than siblingTarget requests while
// at least commitSiblings other streams appended within the last
// siblingWindow, the committer waits up to Options.CommitDelay for more
// before writing. A lone client, a busy log whose groups are already
// large, and compactions (markers, new streams) never wait. A single
// caller appending to many sessions in turn would wait each time: agents
// do not do that.
const (
	commitSiblings = 3
	siblingTarget  = 8
	// siblingWindow is how recent another stream's append must be to
	// count (Log.window; tests widen it).
	siblingWindow = 50 * time.Millisecond
)

// noteStreams remembers which streams committed recently. Called by the
// committer only.
func (l *Log) noteStreams(group []*request) {
	now := time.Now()
	for _, r := range group {
		if len(r.batches) > 0 {
			l.recent[r.st] = now
		}
	}
	if len(l.recent) > 4096 || now.Sub(l.pruned) > l.window {
		for s, at := range l.recent {
			if now.Sub(at) > l.window {
				delete(l.recent, s)
			}
		}
		l.pruned = now
	}
}

// waitForSiblings applies the commit delay to group (see above).
func (l *Log) waitForSiblings(group []*request, total int64) []*request {
	if l.opt.CommitDelay <= 0 || len(group) >= siblingTarget {
		return group
	}
	for _, r := range group {
		if len(r.batches) == 0 {
			// A compaction's marker or a new stream: the caller is a
			// compaction (a replay runs hundreds one after another),
			// not an agent whose siblings are about to append.
			return group
		}
	}
	if l.awaited(group, commitSiblings) < commitSiblings {
		return group
	}
	if l.delay == nil {
		l.delay = time.NewTimer(l.opt.CommitDelay)
	} else {
		l.delay.Reset(l.opt.CommitDelay)
	}
	defer l.delay.Stop()
	for len(group) < siblingTarget && total < l.opt.MaxWrite {
		select {
		case <-l.arrived:
			l.qmu.Lock()
			group, total = l.take(group, total)
			l.qmu.Unlock()
			// Every stream that appended lately is in: nobody else is
			// coming (a few clients, each waiting for its own append,
			// would otherwise wait out the delay at every commit).
			if l.awaited(group, 1) == 0 {
				return group
			}
		case <-l.delay.C:
			return group
		}
	}
	return group
}

// awaited counts, up to enough, the streams that appended within the
// window and are not in group: the siblings a commit delay waits for.
func (l *Log) awaited(group []*request, enough int) int {
	now := time.Now()
	n := 0
	for s, at := range l.recent {
		if now.Sub(at) <= l.window && !inGroup(group, s) {
			if n++; n >= enough {
				break
			}
		}
	}
	return n
}

func inGroup(group []*request, s *Stream) bool {
	for _, r := range group {
		if r.st == s {
			return true
		}
	}
	return false
}
