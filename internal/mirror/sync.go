package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
	"github.com/sessiond/sessiond/internal/reader"
)

var (
	// errRewritten: the lines the cursor covers are not the transcript's
	// first lines any more (a repair, a restore merging copies, another
	// program's rewrite): the transcript is replaced as a whole.
	errRewritten = errors.New("the transcript was rewritten since it was mirrored")
	// errCursorMoved: the cursor is not what this mirror last saw (a
	// commit whose answer was lost went through, or another sessiond
	// wrote it): read it again.
	errCursorMoved = errors.New("the transcript's cursor moved meanwhile")
	// errForeignRows: rows another program wrote for the transcript, with
	// no cursor of sessiond's.
	errForeignRows = errors.New("rows that sessiond did not write")
)

// job is one turn at one transcript, on one worker.
type job struct {
	mr  *Mirror
	key layout.Key
	cur cursor
	// lineage under which cur's lines were last checked (0: none).
	lineage uint64
}

// sync brings key's rows up to date with the local transcript: appends
// what is new, replaces the whole transcript when it was rewritten, and
// deletes it when it went to the trash.
func (mr *Mirror) sync(ctx context.Context, k layout.Key) (err error) {
	if err := mr.leases.Fenced(k); err != nil {
		return err
	}
	mr.mu.Lock()
	ts := mr.keys[k]
	j := &job{mr: mr, key: k, cur: ts.cur, lineage: ts.lineage}
	moved := ts.moved // what this turn compares: told before it reads
	asked := ts.asked
	load := !ts.known || ts.stale
	gone, family := ts.gone, ts.family
	ts.gone, ts.family = false, false
	// The session's sidecars too, when one changed or at start.
	side := k.Subpath == "" && (ts.sideDirty || ts.sideScan)
	var sideRemote map[string][]byte
	if side && !ts.sideDirty && mr.sidecarsAtStart != nil {
		sideRemote = mr.sidecarsAtStart[k]
		if sideRemote == nil {
			sideRemote = map[string][]byte{} // none at start
		}
		delete(mr.sidecarsAtStart, k)
	}
	ts.sideDirty, ts.sideScan = false, false
	mr.mu.Unlock()
	defer func() {
		switch {
		case err == nil:
			mr.update(k, func(ts *tstate) { ts.answered = max(ts.answered, asked) })
		case side:
			mr.update(k, func(ts *tstate) { ts.sideDirty = true }) // compared again next time
		}
	}()

	if family && k.Subpath == "" {
		// A restore brought the session's subagents back too.
		subs, err := mr.src.Subkeys(k)
		if err != nil {
			return err
		}
		mr.mu.Lock()
		for _, s := range subs {
			mr.enqueueLocked(layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID, Subpath: s})
		}
		mr.mu.Unlock()
	}
	if load {
		c, err := loadCursor(ctx, mr.pool, mr.cfg.Table, k, false)
		if err != nil {
			return dbErr{err}
		}
		j.cur, j.lineage = c, 0
		mr.update(k, func(ts *tstate) { ts.cur, ts.known, ts.stale, ts.lineage, ts.added = c, true, false, 0, 0 })
	}
	total, lineage, err := j.push(ctx)
	if errors.Is(err, errRewritten) {
		if derr := mr.leases.Diverged(k); derr != nil {
			return derr
		}
		mr.log.Info("transcript rewritten since it was mirrored (a repair, a restore's merge or another program); replacing its rows",
			zap.Stringer("session", k), zap.Uint64("mirrored_entries", j.cur.entries))
		total, lineage, err = j.replace(ctx)
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		// Gone from the disk: deleted here (a main key takes its
		// subagents along, as the reference adapter's delete does).
		return j.remove(ctx, gone && k.Subpath == "")
	}
	if err != nil {
		return err
	}
	if side {
		if err := j.syncSidecars(ctx, sideRemote); err != nil {
			return err
		}
	}
	mr.update(k, func(ts *tstate) {
		ts.lineage, ts.checked = lineage, true
		ts.movedChecked = max(ts.movedChecked, moved)
		if !ts.localKnown || ts.local <= total {
			ts.local, ts.localBytes, ts.localKnown = total, int64(j.cur.bytes), true
		}
		ts.lag.mirrored(ts.cur.entries)
	})
	return nil
}

// update runs fn on k's state under the lock.
func (mr *Mirror) update(k layout.Key, fn func(*tstate)) {
	mr.mu.Lock()
	fn(mr.stateLocked(k))
	mr.mu.Unlock()
}

// batch gathers the rows of one transaction.
type batch struct {
	// lines holds the rows' exact lines, one after the other, each but
	// the last followed by a newline (no line holds one): they go to
	// PostgreSQL as one text, split there. The buffer is used again
	// from batch to batch: a []string cost a copy of every line, and
	// pgx's array encoding another.
	lines []byte
	rows  int
	// entries[i], when not nil, is row i's jsonb text where it differs
	// from its line; entries stays nil while none does.
	entries []*string
	n       uint64 // transcript lines, rows or not
	bytes   uint64
	size    int
}

// add takes the transcript's next line. normalized: sessiond's Append
// validated it (reader.Entry.Normalized), so it is a JSON object and is
// not validated again.
func (b *batch) add(line []byte, normalized bool) {
	b.n++
	b.bytes += uint64(len(line)) + 1
	if !normalized && !isObject(line) {
		return
	}
	// The line goes to PostgreSQL once, its jsonb made from it there,
	// unless an escape jsonb refuses was replaced (then both go).
	if e := forJSONB(line); &e[0] != &line[0] {
		if b.entries == nil {
			b.entries = make([]*string, b.rows, max(b.rows+1, 16))
		}
		s := string(e)
		b.entries = append(b.entries, &s)
		b.size += len(s)
	} else if b.entries != nil {
		b.entries = append(b.entries, nil)
	}
	if b.rows > 0 {
		b.lines = append(b.lines, '\n')
	}
	b.lines = append(b.lines, line...)
	b.rows++
	b.size += len(line)
}

func (b *batch) full(mr *Mirror) bool {
	return b.rows >= mr.cfg.BatchEntries || b.size >= mr.cfg.BatchBytes
}

func (b *batch) reset() { *b = batch{lines: b.lines[:0]} }

// lineBufs holds batches' line buffers from one turn to the next: a turn
// under a steady load carries a few dozen lines, and growing a new buffer
// for each cost more than the lines themselves.
var lineBufs = sync.Pool{New: func() any { return new([]byte) }}

// newBatch returns an empty batch with a buffer from lineBufs; release
// gives it back.
func newBatch() *batch {
	return &batch{lines: (*lineBufs.Get().(*[]byte))[:0]}
}

func (b *batch) release() {
	buf := b.lines[:0]
	*b = batch{}
	if cap(buf) <= 2*DefaultBatchBytes { // not a huge line's
		lineBufs.Put(&buf)
	}
}

// push checks that the transcript still starts with the lines the cursor
// covers (reading them again unless the writer's lineage vouches for
// them) and appends the lines after them, a batch per transaction. It
// returns the transcript's entries and the lineage it read under.
func (j *job) push(ctx context.Context) (uint64, uint64, error) {
	mr := j.mr
	h := newChain()
	from, under := uint64(0), uint64(0)
	if j.lineage != 0 && j.cur.exists {
		if c, err := resume(j.cur.chain); err == nil {
			h, from, under = c, j.cur.entries, j.lineage
		}
	}
	b := newBatch()
	defer b.release()
	lineage, total, err := mr.src.ReadLines(ctx, j.key, from, under, func(es []reader.Entry) error {
		for _, e := range es {
			if e.Index < from {
				// The lineage moved since the last turn (a writer that
				// opened the file since, another program's rewrite, a
				// repair): every line comes, to be checked from the
				// start, however many there are now.
				h, from = newChain(), 0
			}
			if e.Index < j.cur.entries {
				h.add(e.Data)
				if e.Index == j.cur.entries-1 && !bytes.Equal(h.digest(), j.cur.digest) {
					return errRewritten
				}
				continue
			}
			b.add(e.Data, e.Normalized)
			h.add(e.Data)
			if b.full(mr) {
				if err := j.commit(ctx, b, h); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if total < j.cur.entries {
		return j.short(ctx)
	}
	if b.n > 0 {
		if err := j.commit(ctx, b, h); err != nil {
			return 0, 0, err
		}
	}
	return total, lineage, nil
}

// short decides what a transcript holding fewer lines than its cursor
// covers is. When this mirror checked the cursor's lines here (the job
// has a lineage), the transcript lost lines since: a rewrite. Otherwise
// the cursor was read from PostgreSQL and other machines may have moved
// it: a copy pulled here before another machine wrote more holds the
// first of PostgreSQL's lines and is behind, not rewritten. Taken for a
// rewrite it would be pushed back, dropping that machine's later lines,
// and, that machine holding the lease, this one would be fenced for a
// copy that never parted from the fleet's. So the lines here are compared
// with PostgreSQL's rows: when they are the first of them there is
// nothing to write (the lineage returned is 0: the cursor's lines are not
// checked here, and the next turn compares again). A copy cut short here
// that no writer had open (another program's, or while sessiond was
// down) looks the same; its rows are replaced at its next change, which
// no longer matches them.
func (j *job) short(ctx context.Context) (uint64, uint64, error) {
	if j.lineage != 0 {
		return 0, 0, errRewritten
	}
	mr := j.mr
	rows, err := queryRemoteLines(ctx, mr.pool, mr.cfg.Table, j.key)
	if err != nil {
		return 0, 0, dbErr{err}
	}
	defer rows.Close()
	first := true // the lines here are the first of the rows
	_, total, err := mr.src.ReadLines(ctx, j.key, 0, 0, func(es []reader.Entry) error {
		for _, e := range es {
			if !e.Normalized && !isObject(e.Data) {
				continue // no row (batch.add)
			}
			if !rows.Next() {
				first = false
				return errStop
			}
			l, err := scanRemoteLine(rows, j.key)
			if err != nil {
				return dbErr{err}
			}
			if !bytes.Equal(l, e.Data) {
				first = false
				return errStop
			}
		}
		return nil
	})
	rows.Close()
	switch {
	case rows.Err() != nil:
		return 0, 0, dbErr{rows.Err()}
	case errors.Is(err, errStop):
	case err != nil:
		return 0, 0, err
	case total >= j.cur.entries:
		// Appended to meanwhile: the turn starts over.
		return 0, 0, fmt.Errorf("%w (the transcript grew while it was compared with the rows)", errCursorMoved)
	}
	if !first {
		return 0, 0, errRewritten
	}
	return total, 0, nil
}

// commit appends b's rows and advances the cursor over b's lines, in one
// transaction, provided the cursor is still the one this job holds.
func (j *job) commit(ctx context.Context, b *batch, h chain) error {
	mr := j.mr
	next := j.cur
	next.exists = true
	next.cover(b)
	next.digest, next.chain = h.digest(), h.state()
	if next.generation == 0 {
		next.generation = 1
	}
	if !mr.leases.Holds(j.key) {
		// Taking the lease fences this machine when another holds it: the
		// lines must be new to PostgreSQL first, not lines a pull brought
		// here after this job's cursor was read (the cursor check in the
		// transaction comes after the lease).
		if c, err := loadCursor(ctx, mr.pool, mr.cfg.Table, j.key, false); err != nil {
			return dbErr{err}
		} else if !c.same(j.cur) {
			return errCursorMoved
		}
	}
	if err := mr.leases.Ensure(ctx, j.key); err != nil {
		return j.dbError(err)
	}
	if err := j.pipelined(ctx, b, next); err != nil {
		return j.dbError(err)
	}
	j.advanced(next, uint64(b.rows))
	b.reset()
	return nil
}

// pipelined runs commit's transaction in two round trips: BEGIN and every
// statement in one pipeline, then COMMIT, or ROLLBACK when a statement
// failed or a check on what the locking statements returned does. Under
// a steady load a turn carries a few dozen lines, and a round trip per
// statement (six) cost sessiond more than the lines.
func (j *job) pipelined(ctx context.Context, b *batch, next cursor) (err error) {
	mr := j.mr
	conn, err := mr.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left in a transaction (a ROLLBACK that failed) is
	// closed by the pool, not reused.
	defer conn.Release()
	var (
		got             cursor
		held            lease.Row
		leased, foreign bool
		q               pgx.Batch
	)
	q.Queue("BEGIN")
	sql, args := cursorQuery(mr.cfg.Table, j.key, true)
	q.Queue(sql, args...).QueryRow(func(r pgx.Row) (err error) {
		got, err = scanCursor(r)
		return err
	})
	sql, args = lease.Query(mr.cfg.Table, j.key, true)
	q.Queue(sql, args...).QueryRow(func(r pgx.Row) (err error) {
		held, leased, err = lease.Scan(r)
		return err
	})
	if !j.cur.exists {
		sql, args = hasRowsQuery(mr.cfg.Table, j.key)
		q.Queue(sql, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&foreign) })
	}
	if b.rows > 0 {
		sql, args = insertQuery(mr.cfg.Table, j.key, b)
		q.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error { return checkInserted(tag, mr.cfg.Table, b) })
	}
	sql, args = saveCursorQuery(mr.cfg.Table, j.key, next)
	q.Queue(sql, args...)
	err = conn.SendBatch(ctx, &q).Close()
	switch {
	case err != nil:
	case !got.same(j.cur):
		err = errCursorMoved
	default:
		err = leaseVerdict(mr.leases.Check(j.key, held, leased))
	}
	if err == nil && foreign {
		err = fmt.Errorf("%s: table %s holds %w for this transcript (another program's, or left by a mirror whose cursor is gone); it is not mirrored until they are removed",
			j.key, mr.cfg.Table, errForeignRows)
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return err
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return err
}

// lock takes the cursor's row lock in tx and checks that the cursor is
// still the one this job holds, and that this sessiond may write the
// transcript (fence).
func (j *job) lock(ctx context.Context, tx pgx.Tx) (cursor, error) {
	got, err := loadCursor(ctx, tx, j.mr.cfg.Table, j.key, true)
	if err != nil {
		return cursor{}, err
	}
	if !got.same(j.cur) {
		return cursor{}, errCursorMoved
	}
	return got, j.mr.fence(ctx, tx, j.key)
}

// fence is lease.Leases.Fence in one of the mirror's transactions.
func (mr *Mirror) fence(ctx context.Context, tx pgx.Tx, key layout.Key) error {
	return leaseVerdict(mr.leases.Fence(ctx, tx, key))
}

// leaseVerdict is a lease check's error as the mirror handles it: a lease
// released meanwhile is like a cursor that moved (read it again, and the
// retry takes the lease again).
func leaseVerdict(err error) error {
	if errors.Is(err, lease.ErrGone) {
		return fmt.Errorf("%w (%w)", errCursorMoved, err)
	}
	return err
}

// cover advances c over b's lines and rows.
func (c *cursor) cover(b *batch) {
	c.entries += b.n
	c.bytes += b.bytes
	c.rows += uint64(b.rows)
}

// advanced records a committed cursor.
func (j *job) advanced(next cursor, rows uint64) {
	j.cur = next
	j.mr.mu.Lock()
	defer j.mr.mu.Unlock()
	j.mr.rows += rows
	ts := j.mr.stateLocked(j.key)
	ts.cur, ts.known, ts.stale = next, true, false
	ts.lag.mirrored(next.entries)
}

// replace writes the transcript anew, in one transaction: its rows and
// lines go, every current line goes in, and the cursor starts over (its
// generation counted up). Readers of the table see the old rows or the
// new, never a mix.
func (j *job) replace(ctx context.Context) (uint64, uint64, error) {
	mr := j.mr
	var next cursor
	var lineage, total, rows uint64
	if err := mr.leases.Ensure(ctx, j.key); err != nil {
		return 0, 0, j.dbError(err)
	}
	if err := mr.leases.Diverged(j.key); err != nil {
		return 0, 0, err
	}
	err := pgx.BeginFunc(ctx, mr.pool, func(tx pgx.Tx) error {
		got, err := j.lock(ctx, tx)
		if err != nil {
			return err
		}
		if err := deleteRows(ctx, tx, mr.cfg.Table, j.key, false); err != nil {
			return err
		}
		h := newChain()
		b := newBatch()
		defer b.release()
		next = cursor{exists: true, generation: got.generation + 1}
		flush := func() error {
			if err := insertRows(ctx, tx, mr.cfg.Table, j.key, b); err != nil {
				return dbErr{err}
			}
			next.cover(b)
			b.reset()
			return nil
		}
		lineage, total, err = mr.src.ReadLines(ctx, j.key, 0, 0, func(es []reader.Entry) error {
			for _, e := range es {
				b.add(e.Data, e.Normalized)
				h.add(e.Data)
				if b.full(mr) {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		next.digest, next.chain = h.digest(), h.state()
		rows = next.rows
		return saveCursor(ctx, tx, mr.cfg.Table, j.key, next)
	})
	if err != nil {
		return 0, 0, j.dbError(err)
	}
	j.advanced(next, rows)
	return total, lineage, nil
}

// remove deletes the transcript's rows, lines and cursor (cascade: the
// whole session's).
func (j *job) remove(ctx context.Context, cascade bool) error {
	mr := j.mr
	if err := mr.leases.Ensure(ctx, j.key); err != nil {
		return j.dbError(err)
	}
	err := pgx.BeginFunc(ctx, mr.pool, func(tx pgx.Tx) error {
		if err := mr.fence(ctx, tx, j.key); err != nil {
			return err
		}
		return deleteRows(ctx, tx, mr.cfg.Table, j.key, cascade)
	})
	if err != nil {
		return j.dbError(err)
	}
	mr.log.Info("deleted a transcript's rows (the session was deleted here)", zap.Stringer("session", j.key), zap.Bool("with_subagents", cascade))
	mr.mu.Lock()
	defer mr.mu.Unlock()
	for k, ts := range mr.keys {
		if k == j.key || cascade && k.ProjectKey == j.key.ProjectKey && k.SessionID == j.key.SessionID {
			ts.cur, ts.known, ts.stale, ts.lineage, ts.checked = cursor{}, true, false, 0, true
			ts.movedChecked = ts.moved
			ts.local, ts.localBytes, ts.localKnown, ts.added = 0, 0, true, 0
			ts.lag = lagMarks{}
		}
	}
	return nil
}

// dbError marks an error of the transaction as PostgreSQL's, unless it
// is one of the mirror's own verdicts or the local transcript's.
func (j *job) dbError(err error) error {
	var de dbErr
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, errRewritten), errors.Is(err, errCursorMoved), errors.Is(err, errForeignRows), errors.Is(err, lease.ErrFenced),
		errors.Is(err, lease.ErrDiverged), errors.As(err, &de):
		return err
	case errors.As(err, &pe) && pe.Code == "23505":
		// Another sessiond made the cursor first.
		return fmt.Errorf("%w: %v", errCursorMoved, err)
	case errors.As(err, &pe):
		return dbErr{err}
	}
	if errdefs.Tagged(err) {
		return err // the local transcript's (a read that failed)
	}
	return dbErr{err}
}
