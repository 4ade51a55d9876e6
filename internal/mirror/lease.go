package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// One writer per session across machines (issue 16, part 4). A session
// (with its subagents) is leased in sessiond_leases to the machine that
// appends to it: holder is that machine's id, token a fencing token drawn
// from a sequence (so it only grows: a takeover always bumps it), and
// expires_at when another machine may take it over. The holder renews it
// while it appends and releases it when the session has been idle (or
// sessiond stops). Every transaction that writes a session's rows locks
// its lease row and checks that this machine's token is still the
// current one (fence): a former holder, paused or cut off past its
// expiry, can never write after a takeover.
//
// expires_at is computed from the machine's own clock (the injectable
// one, so tests move time): machines must keep their clocks within a
// small part of the lease duration of each other (NTP does). A skew only
// changes when a takeover is allowed; the token keeps the rows safe
// whatever the clocks say.
const leaseDDL = `CREATE SEQUENCE IF NOT EXISTS sessiond_lease_tokens;
CREATE TABLE IF NOT EXISTS sessiond_leases (
    store_table text NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (store_table, project_key, session_id)
);`

// lease is a session's row of sessiond_leases; prev is, when this
// machine just took it, who held it before ("" for none).
type lease struct {
	holder  string
	token   int64
	expires time.Time
	prev    string
}

// LeasedError refuses a write to a session another machine holds: an
// append (errdefs.ErrFailedPrecondition) or the mirror's rows.
type LeasedError struct {
	ProjectKey, SessionID string
	Holder                string
	Expires               time.Time
	// TakenOver: this machine held it and lost it (it was fenced).
	TakenOver bool
}

func (e *LeasedError) Error() string {
	if e.TakenOver {
		return fmt.Sprintf("session %s/%s was taken over by machine %q (its lease runs to %s): this machine was fenced and writes to it no more; "+
			"its local entries are kept. Append on %s, or wait until its lease expires and pull the session here",
			e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339), e.Holder)
	}
	return fmt.Sprintf("session %s/%s is leased to machine %q until %s (it is being written there): append on %s, or retry after the lease expires",
		e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339), e.Holder)
}

func (e *LeasedError) Unwrap() error { return errdefs.ErrLeased }

// errFenced marks a mirror transaction refused by fence.
var errFenced = errors.New("fenced")

type fencedError struct{ *LeasedError }

func (e fencedError) Unwrap() []error { return []error{errFenced, e.LeasedError} }

func familyKey(k layout.Key) layout.Key {
	return layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID}
}

// readLease reads k's session's lease, locking its row (in a transaction)
// when lock; ok is false when there is none.
func readLease(ctx context.Context, q querier, table string, k layout.Key, lock bool) (lease, bool, error) {
	sql, args := leaseQuery(table, k, lock)
	return scanLease(q.QueryRow(ctx, sql, args...))
}

func leaseQuery(table string, k layout.Key, lock bool) (string, []any) {
	sql := `SELECT holder, token, expires_at FROM sessiond_leases WHERE store_table = $1 AND project_key = $2 AND session_id = $3`
	if lock {
		sql += " FOR UPDATE"
	}
	return sql, []any{table, k.ProjectKey, k.SessionID}
}

// scanLease reads leaseQuery's row: false when there is none.
func scanLease(row pgx.Row) (lease, bool, error) {
	var l lease
	err := row.Scan(&l.holder, &l.token, &l.expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return lease{}, false, nil
	}
	return l, err == nil, err
}

// tryAcquire takes k's session's lease for holder until now+ttl: it is
// free, expired, or already holder's. A lease still holder's keeps its
// token (nobody took it over meanwhile, or the holder would have
// changed: this machine's earlier process, or another goroutine of this
// one, took it); a takeover draws a new, larger one. ok is false when
// another machine holds it; cur is the lease as it stands either way.
// (The unused token argument gives it renewLease's signature.)
func tryAcquire(ctx context.Context, q querier, table string, k layout.Key, holder string, _ int64, now time.Time, ttl time.Duration) (cur lease, ok bool, err error) {
	err = q.QueryRow(ctx, `WITH old AS (SELECT holder FROM sessiond_leases WHERE store_table = $1 AND project_key = $2 AND session_id = $3)
INSERT INTO sessiond_leases AS l (store_table, project_key, session_id, holder, token, expires_at)
VALUES ($1, $2, $3, $4, nextval('sessiond_lease_tokens'), $5)
ON CONFLICT (store_table, project_key, session_id) DO UPDATE SET
    holder = EXCLUDED.holder,
    token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE EXCLUDED.token END,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= $6
RETURNING holder, token, expires_at, coalesce((SELECT holder FROM old), '')`,
		table, k.ProjectKey, k.SessionID, holder, now.Add(ttl), now).Scan(&cur.holder, &cur.token, &cur.expires, &cur.prev)
	return orCurrent(ctx, q, table, k, cur, err)
}

// orCurrent is a take's or renewal's answer: cur when its statement
// returned the lease (ok), else the lease as it stands.
func orCurrent(ctx context.Context, q querier, table string, k layout.Key, cur lease, err error) (lease, bool, error) {
	if err == nil {
		return cur, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return lease{}, false, err
	}
	cur, _, err = readLease(ctx, q, table, k, false)
	return cur, false, err
}

// releaseLease gives k's session's lease up, if it still is holder's
// under token: it expires now, and keeps its token (the next holder's is
// larger).
func releaseLease(ctx context.Context, q querier, table string, k layout.Key, holder string, token int64, now time.Time) error {
	var n int
	err := q.QueryRow(ctx, `WITH u AS (UPDATE sessiond_leases SET expires_at = $6
WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND holder = $4 AND token = $5 RETURNING 1)
SELECT count(*) FROM u`, table, k.ProjectKey, k.SessionID, holder, token, now).Scan(&n)
	return err
}

// renewLease extends k's session's lease to now+ttl if it still is
// holder's under token; else ok is false and cur is the lease as it
// stands (another machine took it over meanwhile, or took it and let it
// go: either way rows may have been written under another token, so the
// former holder must not go on).
func renewLease(ctx context.Context, q querier, table string, k layout.Key, holder string, token int64, now time.Time, ttl time.Duration) (cur lease, ok bool, err error) {
	err = q.QueryRow(ctx, `UPDATE sessiond_leases SET expires_at = $6
WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND holder = $4 AND token = $5
RETURNING holder, token, expires_at`, table, k.ProjectKey, k.SessionID, holder, token, now.Add(ttl)).Scan(&cur.holder, &cur.token, &cur.expires)
	return orCurrent(ctx, q, table, k, cur, err)
}

// Short is the fencing as Status lists it.
func (e *LeasedError) Short() string {
	return fmt.Sprintf("%s/%s: fenced, taken over by %s (lease until %s)", e.ProjectKey, e.SessionID, e.Holder, e.Expires.UTC().Format(time.RFC3339))
}
