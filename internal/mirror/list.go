package mirror

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript/listing"
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
	// Title: the last custom title entry, else the title of the
	// session's custom-title.json (sessiond_sidecars), else the last AI
	// title; "" for none.
	Title string
	// Archived: the session's archived.json (sessiond_sidecars) marks it
	// archived and the last main row that is a user prompt (type "user",
	// no "tool_result" in it, no top-level isMeta or isCompactSummary
	// true) has a timestamp no later than the mark's "at" (or there is
	// none, or it does not parse): listing.Archived, the official rule.
	Archived bool
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
    coalesce((SELECT e.entry->>'customTitle' FROM %[1]s e
        WHERE e.project_key = s.project_key AND e.session_id = s.session_id AND e.subpath = ''
          AND e.entry->>'type' = 'custom-title' ORDER BY e.seq DESC LIMIT 1), ''),
    coalesce((SELECT e.entry->>'aiTitle' FROM %[1]s e
        WHERE e.project_key = s.project_key AND e.session_id = s.session_id AND e.subpath = ''
          AND e.entry->>'type' = 'ai-title' ORDER BY e.seq DESC LIMIT 1), ''),
    ct.body, ar.body,
    (SELECT p.entry->>'timestamp' FROM %[1]s p
        WHERE ar.body IS NOT NULL AND p.project_key = s.project_key AND p.session_id = s.session_id AND p.subpath = ''
          AND p.entry->>'type' = 'user' AND position('"tool_result"' in p.entry::text) = 0
          AND p.entry->'isMeta' IS DISTINCT FROM 'true'::jsonb AND p.entry->'isCompactSummary' IS DISTINCT FROM 'true'::jsonb
        ORDER BY p.seq DESC LIMIT 1)
FROM s LEFT JOIN sessiond_cursors c ON c.store_table = $2 AND c.project_key = s.project_key
    AND c.session_id = s.session_id AND c.subpath = ''
LEFT JOIN sessiond_sidecars ct ON ct.store_table = $2 AND ct.project_key = s.project_key
    AND ct.session_id = s.session_id AND ct.name = 'custom-title.json'
LEFT JOIN sessiond_sidecars ar ON ar.store_table = $2 AND ar.project_key = s.project_key
    AND ar.session_id = s.session_id AND ar.name = 'archived.json'
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
		var custom, ai string
		var titleFile, mark []byte
		var prompt *string
		if err := r.Scan(&f.Key.ProjectKey, &f.Key.SessionID, &f.ModifiedMs, &n, &size, &custom, &ai, &titleFile, &mark, &prompt); err != nil {
			return f, err
		}
		f.Entries, f.Bytes = uint64(n), uint64(size)
		f.Title = custom
		if f.Title == "" && titleFile != nil {
			f.Title = listing.ParseTitleSidecar(titleFile)
		}
		if f.Title == "" {
			f.Title = ai
		}
		if mark != nil {
			var promptMs int64
			if prompt != nil {
				if ts, err := time.Parse(time.RFC3339Nano, *prompt); err == nil {
					promptMs = ts.UnixMilli()
				}
			}
			f.Archived = listing.Archived(mark, promptMs)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the sessions in PostgreSQL (%s): %s: %w", mr.Target(), mr.red.clean(err.Error()), errdefs.ErrUnavailable)
	}
	return out, nil
}
