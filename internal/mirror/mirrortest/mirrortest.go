// Package mirrortest holds what the mirror's tests and the end-to-end
// tests share: the reference adapter's load, and the comparison of rows
// with entries the contract asks for (deep equality as JSON: jsonb keeps
// neither key order nor spacing).
package mirrortest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/layout"
)

// Load is the reference adapter's load of key from table (its SQL): the
// entries' texts in seq order.
func Load(t testing.TB, dsn, table string, key layout.Key) []string {
	t.Helper()
	return Texts(t, dsn, fmt.Sprintf(`SELECT entry FROM %s WHERE project_key = $1 AND session_id = $2 AND subpath = $3 ORDER BY seq`, table),
		key.ProjectKey, key.SessionID, key.Subpath)
}

// ExactLines are sessiond's exact copies of key's rows in table
// (sessiond_lines), in seq order.
func ExactLines(t testing.TB, dsn, table string, key layout.Key) []string {
	t.Helper()
	return Texts(t, dsn, `SELECT line FROM sessiond_lines WHERE store_table = $1 AND project_key = $2 AND session_id = $3 AND subpath = $4 ORDER BY seq`,
		table, key.ProjectKey, key.SessionID, key.Subpath)
}

// Texts runs a query of one text (or jsonb) column and returns its
// values.
func Texts(t testing.TB, dsn, sql string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var e string
		err := r.Scan(&e)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SameEntries fails t unless rows are entries, in order, each deep equal
// as JSON.
func SameEntries(t testing.TB, what string, rows, entries []string) {
	t.Helper()
	if err := Same(rows, entries); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Same says how rows differ from entries (nil: they are the same, in
// order, each deep equal as JSON).
func Same(rows, entries []string) error {
	if len(rows) != len(entries) {
		return fmt.Errorf("%d rows for %d entries", len(rows), len(entries))
	}
	for i := range rows {
		var r, e any
		if err := json.Unmarshal([]byte(rows[i]), &r); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		if err := json.Unmarshal([]byte(entries[i]), &e); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if !reflect.DeepEqual(r, e) {
			return fmt.Errorf("row %d differs:\n row   %s\n entry %s", i, rows[i], entries[i])
		}
	}
	return nil
}

// Sidecars are key's session's rows of sessiond_sidecars for table: each
// sidecar's exact bytes, by name.
func Sidecars(t testing.TB, dsn, table string, key layout.Key) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT name, body FROM sessiond_sidecars WHERE store_table = $1 AND project_key = $2 AND session_id = $3`,
		table, key.ProjectKey, key.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var name string
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&name, &body}, func() error {
		out[name] = string(body)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// WaitSidecars waits (up to a minute) until PostgreSQL holds want as
// key's session's sidecars.
func WaitSidecars(t testing.TB, dsn, table string, key layout.Key, want map[string]string, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := Sidecars(t, dsn, table, key)
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: PostgreSQL's sidecars of %s: %q, want %q", what, key, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
