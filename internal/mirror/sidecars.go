package mirror

import (
	"bytes"
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
)

// A session's sidecar files (sidecar.Names: the archive mark,
// the title file) are kept equal in sessiond_sidecars to the files here,
// byte for byte: a sidecar written here is upserted, one removed here is
// deleted. They are compared when the writer says one was written
// (Change.Sidecars), when a restore brings the session back, and at start
// for every local session (against the rows loaded in one query). Writes
// go under the session's lease like its rows: Leases.Ensure first, fence in
// the transaction, so a fenced machine writes no sidecar either.

// queryer runs a query on the pool or in a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// loadSidecars reads the sidecars PostgreSQL holds for key's session.
func loadSidecars(ctx context.Context, q queryer, table string, key layout.Key) (map[string][]byte, error) {
	rows, err := q.Query(ctx, `SELECT name, body FROM sessiond_sidecars
WHERE store_table = $1 AND project_key = $2 AND session_id = $3`, table, key.ProjectKey, key.SessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var name string
		var body []byte
		if err := rows.Scan(&name, &body); err != nil {
			return nil, err
		}
		out[name] = body
	}
	return out, rows.Err()
}

// loadAllSidecars reads every session's sidecars of the table, for the
// scan at start.
func loadAllSidecars(ctx context.Context, pool *pgxpool.Pool, table string) (map[layout.Key]map[string][]byte, error) {
	rows, err := pool.Query(ctx, `SELECT project_key, session_id, name, body FROM sessiond_sidecars WHERE store_table = $1`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[layout.Key]map[string][]byte{}
	for rows.Next() {
		var k layout.Key
		var name string
		var body []byte
		if err := rows.Scan(&k.ProjectKey, &k.SessionID, &name, &body); err != nil {
			return nil, err
		}
		if out[k] == nil {
			out[k] = map[string][]byte{}
		}
		out[k][name] = body
	}
	return out, rows.Err()
}

// sameSidecars reports whether the local sidecars are PostgreSQL's.
func sameSidecars(local []sidecar.Sidecar, remote map[string][]byte) bool {
	if len(local) != len(remote) {
		return false
	}
	for _, sc := range local {
		body, ok := remote[sc.Name]
		if !ok || !bytes.Equal(body, sc.Body) {
			return false
		}
	}
	return true
}

// syncSidecars makes PostgreSQL's sidecars of the job's session (a main
// key) the local ones. remote is what PostgreSQL held at start when
// known (the scan at start), else nil: it is read. Nothing is written,
// and no lease taken, when they are equal.
func (j *job) syncSidecars(ctx context.Context, remote map[string][]byte) error {
	mr := j.mr
	local, err := mr.src.Sidecars(j.key)
	if err != nil {
		return err
	}
	if remote == nil {
		if remote, err = loadSidecars(ctx, mr.pool, mr.cfg.Table, j.key); err != nil {
			return dbErr{err}
		}
	}
	if sameSidecars(local, remote) {
		return nil
	}
	if err := mr.leases.Ensure(ctx, j.key); err != nil {
		return j.dbError(err)
	}
	var put, removed []string
	err = pgx.BeginFunc(ctx, mr.pool, func(tx pgx.Tx) error {
		put, removed = nil, nil
		if err := mr.fence(ctx, tx, j.key); err != nil {
			return err
		}
		// Both again, under the lease: taking it over may have pulled
		// PostgreSQL's here, and the lease row is locked until commit.
		local, err := mr.src.Sidecars(j.key)
		if err != nil {
			return err
		}
		remote, err := loadSidecars(ctx, tx, mr.cfg.Table, j.key)
		if err != nil {
			return err
		}
		for _, sc := range local {
			if body, ok := remote[sc.Name]; ok && bytes.Equal(body, sc.Body) {
				delete(remote, sc.Name)
				continue
			}
			delete(remote, sc.Name)
			if _, err := tx.Exec(ctx, `INSERT INTO sessiond_sidecars (store_table, project_key, session_id, name, body, mtime)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (store_table, project_key, session_id, name) DO UPDATE SET body = EXCLUDED.body, mtime = EXCLUDED.mtime`,
				mr.cfg.Table, j.key.ProjectKey, j.key.SessionID, sc.Name, sc.Body, sc.MtimeMs); err != nil {
				return err
			}
			put = append(put, sc.Name)
		}
		for name := range remote {
			if _, err := tx.Exec(ctx, `DELETE FROM sessiond_sidecars WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND name = $4`,
				mr.cfg.Table, j.key.ProjectKey, j.key.SessionID, name); err != nil {
				return err
			}
			removed = append(removed, name)
		}
		return nil
	})
	if err != nil {
		return j.dbError(err)
	}
	if len(put)+len(removed) > 0 {
		mr.log.Debug("mirrored a session's sidecars", zap.Stringer("session", j.key), zap.Strings("written", put), zap.Strings("removed", removed))
	}
	return nil
}
