package mirror

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// FleetSession is a session as PostgreSQL lists it: every machine's that
// mirrors into the table, and any program's using the reference adapter.
type FleetSession struct {
	Key        layout.Key // Subpath ""
	ModifiedMs int64      // the reference adapter's list_sessions: max(mtime) of the main rows
	Entries    uint64     // main transcript's rows
	// Bytes: the main transcript's size on disk when sessiond mirrored it
	// (its cursor), else the rows' entries' text with a newline each.
	Bytes uint64
	// Title: the last custom title, else the last AI title, "" for none.
	Title string
}

// List lists projectKey's sessions ("" for every project's) from
// PostgreSQL, newest first.
func (mr *Mirror) List(ctx context.Context, projectKey string) ([]FleetSession, error) {
	if mr.pool == nil {
		return nil, fmt.Errorf("the mirror is not started: %w", errdefs.ErrUnavailable)
	}
	t := mr.cfg.Table
	// The reference adapter's list_sessions (session_id, max(mtime) over
	// the main rows), with the row count, the cursor's size and the
	// title beside it.
	q := fmt.Sprintf(`WITH s AS (
    SELECT project_key, session_id, max(mtime) AS mtime, count(*) AS n, sum(octet_length(entry::text) + 1) AS size
    FROM %[1]s WHERE subpath = '' AND ($1 = '' OR project_key = $1) GROUP BY project_key, session_id)
SELECT s.project_key, s.session_id, s.mtime, s.n, coalesce(c.bytes, s.size),
    coalesce((SELECT coalesce(e.entry->>'customTitle', e.entry->>'aiTitle') FROM %[1]s e
        WHERE e.project_key = s.project_key AND e.session_id = s.session_id AND e.subpath = ''
          AND e.entry->>'type' IN ('custom-title', 'ai-title')
        ORDER BY e.entry->>'type' = 'custom-title' DESC, e.seq DESC LIMIT 1), '')
FROM s LEFT JOIN sessiond_cursors c ON c.store_table = $2 AND c.project_key = s.project_key
    AND c.session_id = s.session_id AND c.subpath = ''
ORDER BY s.mtime DESC, s.session_id`, t)
	if err := mr.ensureSchema(ctx); err != nil {
		return nil, fmt.Errorf("list the sessions in PostgreSQL (%s): %s: %w", mr.Target(), mr.red.clean(err.Error()), errdefs.ErrUnavailable)
	}
	rows, err := mr.pool.Query(ctx, q, projectKey, t)
	if err != nil {
		return nil, fmt.Errorf("list the sessions in PostgreSQL (%s): %s: %w", mr.Target(), mr.red.clean(err.Error()), errdefs.ErrUnavailable)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetSession, error) {
		var f FleetSession
		var n, size int64
		err := r.Scan(&f.Key.ProjectKey, &f.Key.SessionID, &f.ModifiedMs, &n, &size, &f.Title)
		f.Entries, f.Bytes = uint64(n), uint64(size)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the sessions in PostgreSQL (%s): %s: %w", mr.Target(), mr.red.clean(err.Error()), errdefs.ErrUnavailable)
	}
	return out, nil
}
