package mirror

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/lease"
)

// The reference adapter's schema (examples/session_stores/
// postgres_session_store.py of the official Python SDK), word for word:
// whatever a program using that adapter writes, sessiond reads, and the
// other way round.
const referenceDDL = `CREATE TABLE IF NOT EXISTS %[1]s (
    project_key text NOT NULL,
    session_id text NOT NULL,
    subpath text NOT NULL DEFAULT '',
    seq bigserial,
    entry jsonb NOT NULL,
    mtime bigint NOT NULL,
    PRIMARY KEY (project_key, session_id, subpath, seq)
);
CREATE INDEX IF NOT EXISTS %[1]s_list_idx ON %[1]s (project_key, session_id) WHERE subpath = '';`

// ReferenceDDL is the reference adapter's table and index for table (a
// name CheckTable accepts).
func ReferenceDDL(table string) string { return fmt.Sprintf(referenceDDL, table) }

// ReferenceAppendSQL is the reference adapter's append into table, word
// for word: $1 project_key, $2 session_id, $3 subpath, $4 the entries
// (jsonb[]), each a row in the array's order. The mirror itself inserts
// the same rows with their exact lines (insertRows); the benchmark's
// reference store and INSERT loop use this.
func ReferenceAppendSQL(table string) string {
	return `INSERT INTO ` + table + ` (project_key, session_id, subpath, entry, mtime)
SELECT $1, $2, $3, e, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
FROM unnest($4::jsonb[]) WITH ORDINALITY AS t(e, ord) ORDER BY ord`
}

// sessiond's own tables, beside it. store_table names the reference table
// the row belongs to, so several tables in one database keep apart.
//
// sessiond_cursors: per transcript, how much of the local transcript is
// in the table, advanced in the transaction that writes those rows.
// entries counts the transcript's lines covered (in order from the
// first), bytes their bytes with a newline each, rows the rows written for
// them (a line that is not a JSON object has none), digest the SHA-256
// of those bytes and chain the hash's state after them (to go on from
// there without reading them again); generation counts the times the
// transcript was replaced as a whole (a rewrite).
//
// sessiond_lines: each row's exact line, keyed like the reference table
// (seq is the row's), so that a pull restores the transcript byte for
// byte (jsonb keeps neither key order nor spacing).
//
// sessiond_sidecars: a session's sidecar files (sidecar.Names:
// archived.json, custom-title.json), each's exact bytes and its mtime on
// the machine that wrote the row, kept equal to that machine's files.
const ownDDL = `CREATE TABLE IF NOT EXISTS sessiond_cursors (
    store_table text NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    subpath text NOT NULL DEFAULT '',
    entries bigint NOT NULL,
    bytes bigint NOT NULL,
    rows bigint NOT NULL,
    digest bytea NOT NULL,
    chain bytea NOT NULL,
    generation bigint NOT NULL DEFAULT 1,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (store_table, project_key, session_id, subpath)
);
CREATE TABLE IF NOT EXISTS sessiond_lines (
    store_table text NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    subpath text NOT NULL DEFAULT '',
    seq bigint NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (store_table, project_key, session_id, subpath, seq)
);
CREATE TABLE IF NOT EXISTS sessiond_sidecars (
    store_table text NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    name text NOT NULL,
    body bytea NOT NULL,
    mtime bigint NOT NULL,
    PRIMARY KEY (store_table, project_key, session_id, name)
);`

// schemaLock serialises the schema's creation between sessiond processes
// sharing a database (CREATE ... IF NOT EXISTS races with itself).
const schemaLock = 0x5e55_10d0

func createSchema(ctx context.Context, pool *pgxpool.Pool, table string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, ReferenceDDL(table)); err != nil {
			return fmt.Errorf("create table %s: %w", table, err)
		}
		if _, err := tx.Exec(ctx, ownDDL); err != nil {
			return fmt.Errorf("create sessiond's tables: %w", err)
		}
		if _, err := tx.Exec(ctx, lease.DDL); err != nil {
			return fmt.Errorf("create sessiond's leases: %w", err)
		}
		return nil
	})
}

// cursor is a transcript's row of sessiond_cursors.
type cursor struct {
	exists     bool
	entries    uint64
	bytes      uint64
	rows       uint64
	digest     []byte
	chain      []byte
	generation int64
}

func (c cursor) same(o cursor) bool {
	return c.exists == o.exists && c.entries == o.entries && c.bytes == o.bytes && c.rows == o.rows &&
		string(c.digest) == string(o.digest) && c.generation == o.generation
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadCursor reads key's cursor; lock takes its row lock (in a
// transaction) so that nobody moves it until the transaction ends.
func loadCursor(ctx context.Context, q querier, table string, key layout.Key, lock bool) (cursor, error) {
	sql, args := cursorQuery(table, key, lock)
	return scanCursor(q.QueryRow(ctx, sql, args...))
}

func cursorQuery(table string, key layout.Key, lock bool) (string, []any) {
	sql := `SELECT entries, bytes, rows, digest, chain, generation FROM sessiond_cursors
WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND subpath = $4`
	if lock {
		sql += " FOR UPDATE"
	}
	return sql, []any{table, key.ProjectKey, key.SessionID, key.Subpath}
}

// scanCursor reads cursorQuery's row: no row is no cursor.
func scanCursor(row pgx.Row) (cursor, error) {
	var c cursor
	var entries, bytes, rows int64
	err := row.Scan(&entries, &bytes, &rows, &c.digest, &c.chain, &c.generation)
	if errors.Is(err, pgx.ErrNoRows) {
		return cursor{}, nil
	}
	if err != nil {
		return cursor{}, err
	}
	c.exists, c.entries, c.bytes, c.rows = true, uint64(entries), uint64(bytes), uint64(rows)
	return c, nil
}

// loadCursors reads every cursor of the table, for the scan at start.
func loadCursors(ctx context.Context, pool *pgxpool.Pool, table string) (map[layout.Key]cursor, error) {
	rows, err := pool.Query(ctx, `SELECT project_key, session_id, subpath, entries, bytes, rows, digest, chain, generation
FROM sessiond_cursors WHERE store_table = $1`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[layout.Key]cursor{}
	for rows.Next() {
		var k layout.Key
		var c cursor
		var entries, bytes, n int64
		if err := rows.Scan(&k.ProjectKey, &k.SessionID, &k.Subpath, &entries, &bytes, &n, &c.digest, &c.chain, &c.generation); err != nil {
			return nil, err
		}
		c.exists, c.entries, c.bytes, c.rows = true, uint64(entries), uint64(bytes), uint64(n)
		out[k] = c
	}
	return out, rows.Err()
}

func saveCursor(ctx context.Context, tx pgx.Tx, table string, key layout.Key, c cursor) error {
	sql, args := saveCursorQuery(table, key, c)
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

func saveCursorQuery(table string, key layout.Key, c cursor) (string, []any) {
	return `INSERT INTO sessiond_cursors
    (store_table, project_key, session_id, subpath, entries, bytes, rows, digest, chain, generation, updated_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint)
ON CONFLICT (store_table, project_key, session_id, subpath) DO UPDATE SET
    entries = EXCLUDED.entries, bytes = EXCLUDED.bytes, rows = EXCLUDED.rows, digest = EXCLUDED.digest,
    chain = EXCLUDED.chain, generation = EXCLUDED.generation, updated_ms = EXCLUDED.updated_ms`,
		[]any{table, key.ProjectKey, key.SessionID, key.Subpath, int64(c.entries), int64(c.bytes), int64(c.rows),
			c.digest, c.chain, c.generation}
}

// insertRows appends b's rows for key in order, and their exact lines
// beside them, in one statement (one round trip): the rows are what the
// reference adapter's append makes (seq from the table's own sequence in
// the lines' order, mtime from the clock at each row), each row's entry
// the jsonb of its line (or of b.entries[i] when that is not nil: the
// line with an escape jsonb refuses replaced), and each line is stored
// under its row's seq. The lines cross the wire once, as one text split
// at its newlines there. The CTE is materialized, so nextval runs once
// per line, in order (the planner evaluates a volatile target list after
// the ORDER BY). The table's sequence is looked up once per statement
// (an uncorrelated subquery): looked up for each row, it took 13-16 %
// of the statement's time (1,000 rows of 1 KiB, measured).
func insertRows(ctx context.Context, tx pgx.Tx, table string, key layout.Key, b *batch) error {
	if b.rows == 0 {
		return nil
	}
	sql, args := insertQuery(table, key, b)
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	return checkInserted(tag, table, b)
}

func insertQuery(table string, key layout.Key, b *batch) (string, []any) {
	return fmt.Sprintf(`WITH s AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('%[1]s', 'seq')::regclass)) AS seq, coalesce(e, l)::jsonb AS e, l
    FROM ROWS FROM (string_to_table($4::text, E'\n'), unnest($5::text[])) WITH ORDINALITY AS t(l, e, ord) ORDER BY ord),
r AS (INSERT INTO %[1]s (project_key, session_id, subpath, seq, entry, mtime)
    SELECT $1, $2, $3, seq, e, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint FROM s)
INSERT INTO sessiond_lines (store_table, project_key, session_id, subpath, seq, line)
SELECT $6, $1, $2, $3, seq, l FROM s`, table),
		[]any{key.ProjectKey, key.SessionID, key.Subpath, b.lines, b.entries, table}
}

func checkInserted(tag pgconn.CommandTag, table string, b *batch) error {
	if n := tag.RowsAffected(); n != int64(b.rows) {
		return fmt.Errorf("insert into %s: %d rows for %d lines", table, n, b.rows)
	}
	return nil
}

// deleteRows removes key's rows, lines and cursor: for a main key the
// whole session with its subagents (the reference adapter's delete
// cascades so), for a subagent's key that transcript alone. A main key's
// sidecars go with it: they belong to the session's main transcript.
func deleteRows(ctx context.Context, tx pgx.Tx, table string, key layout.Key, cascade bool) error {
	where, args := "project_key = $1 AND session_id = $2 AND subpath = $3", []any{key.ProjectKey, key.SessionID, key.Subpath}
	if cascade {
		where, args = "project_key = $1 AND session_id = $2", args[:2]
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", table, where), args...); err != nil {
		return err
	}
	own := append(append([]any(nil), args...), table)
	ownWhere := fmt.Sprintf("%s AND store_table = $%d", where, len(own))
	for _, t := range []string{"sessiond_lines", "sessiond_cursors"} {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", t, ownWhere), own...); err != nil {
			return err
		}
	}
	if key.Subpath == "" {
		if _, err := tx.Exec(ctx, "DELETE FROM sessiond_sidecars WHERE store_table = $1 AND project_key = $2 AND session_id = $3",
			table, key.ProjectKey, key.SessionID); err != nil {
			return err
		}
	}
	return nil
}

// hasRows reports whether the table holds rows for key that no cursor
// covers (another program's).
func hasRows(ctx context.Context, q querier, table string, key layout.Key) (bool, error) {
	var ok bool
	sql, args := hasRowsQuery(table, key)
	err := q.QueryRow(ctx, sql, args...).Scan(&ok)
	return ok, err
}

func hasRowsQuery(table string, key layout.Key) (string, []any) {
	return fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE project_key = $1 AND session_id = $2 AND subpath = $3)`, table),
		[]any{key.ProjectKey, key.SessionID, key.Subpath}
}
