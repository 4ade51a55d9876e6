// Package lease keeps one writer per session across the machines that
// share a PostgreSQL mirror. A session (with its subagents) is leased in
// sessiond_leases to the machine that appends to it: holder is that
// machine's id, token a fencing token drawn from a sequence (so it only
// grows: a takeover always bumps it), and expires_at when another machine
// may take it over. The holder renews it while it appends and releases it
// when the session has been idle (or sessiond stops). Every transaction
// that writes a session's rows locks its lease row and checks that this
// machine's token is still the current one (Leases.Fence): a former
// holder, paused or cut off past its expiry, can never write after a
// takeover.
//
// expires_at is computed from the machine's own clock (the injectable
// one, so tests move time): machines must keep their clocks within a
// small part of the lease duration of each other (NTP does). A skew only
// changes when a takeover is allowed; the token keeps the rows safe
// whatever the clocks say.
//
// The mirror owns the connection and the rows; this package owns the
// lease rows and this machine's view of them (Leases).
package lease

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/layout"
)

// DDL creates the leases' table and token sequence; the mirror runs it
// with its own tables.
const DDL = `CREATE SEQUENCE IF NOT EXISTS sessiond_lease_tokens;
CREATE TABLE IF NOT EXISTS sessiond_leases (
    store_table text NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (store_table, project_key, session_id)
);`

// Row is a session's row of sessiond_leases.
type Row struct {
	Holder  string
	Token   int64
	Expires time.Time
	// prev is, when this machine just took the lease, who held it
	// before ("" for none).
	prev string
}

// Querier is what the lease statements run on: a pool, a connection or
// a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Family is the key a session's lease is held under: the main
// transcript's, for the session and its subagents alike.
func Family(k layout.Key) layout.Key {
	return layout.Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID}
}

// Read reads k's session's lease, locking its row (in a transaction)
// when lock; ok is false when there is none.
func Read(ctx context.Context, q Querier, table string, k layout.Key, lock bool) (Row, bool, error) {
	sql, args := Query(table, k, lock)
	return Scan(q.QueryRow(ctx, sql, args...))
}

// Query is Read's statement, for a caller that sends it in a batch of its
// own and reads its answer with Scan.
func Query(table string, k layout.Key, lock bool) (string, []any) {
	k = Family(k)
	sql := `SELECT holder, token, expires_at FROM sessiond_leases WHERE store_table = $1 AND project_key = $2 AND session_id = $3`
	if lock {
		sql += " FOR UPDATE"
	}
	return sql, []any{table, k.ProjectKey, k.SessionID}
}

// Scan reads Query's row: false when there is none.
func Scan(row pgx.Row) (Row, bool, error) {
	var l Row
	err := row.Scan(&l.Holder, &l.Token, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
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
func tryAcquire(ctx context.Context, q Querier, table string, k layout.Key, holder string, _ int64, now time.Time, ttl time.Duration) (cur Row, ok bool, err error) {
	err = q.QueryRow(ctx, `WITH old AS (SELECT holder FROM sessiond_leases WHERE store_table = $1 AND project_key = $2 AND session_id = $3)
INSERT INTO sessiond_leases AS l (store_table, project_key, session_id, holder, token, expires_at)
VALUES ($1, $2, $3, $4, nextval('sessiond_lease_tokens'), $5)
ON CONFLICT (store_table, project_key, session_id) DO UPDATE SET
    holder = EXCLUDED.holder,
    token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE EXCLUDED.token END,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= $6
RETURNING holder, token, expires_at, coalesce((SELECT holder FROM old), '')`,
		table, k.ProjectKey, k.SessionID, holder, now.Add(ttl), now).Scan(&cur.Holder, &cur.Token, &cur.Expires, &cur.prev)
	return orCurrent(ctx, q, table, k, cur, err)
}

// orCurrent is a take's or renewal's answer: cur when its statement
// returned the lease (ok), else the lease as it stands.
func orCurrent(ctx context.Context, q Querier, table string, k layout.Key, cur Row, err error) (Row, bool, error) {
	if err == nil {
		return cur, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, err
	}
	cur, _, err = Read(ctx, q, table, k, false)
	return cur, false, err
}

// releaseLease gives k's session's lease up, if it still is holder's
// under token: it expires now, and keeps its token (the next holder's is
// larger).
func releaseLease(ctx context.Context, q Querier, table string, k layout.Key, holder string, token int64, now time.Time) error {
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
func renewLease(ctx context.Context, q Querier, table string, k layout.Key, holder string, token int64, now time.Time, ttl time.Duration) (cur Row, ok bool, err error) {
	err = q.QueryRow(ctx, `UPDATE sessiond_leases SET expires_at = $6
WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND holder = $4 AND token = $5
RETURNING holder, token, expires_at`, table, k.ProjectKey, k.SessionID, holder, token, now.Add(ttl)).Scan(&cur.Holder, &cur.Token, &cur.Expires)
	return orCurrent(ctx, q, table, k, cur, err)
}
