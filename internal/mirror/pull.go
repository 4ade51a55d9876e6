package mirror

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Remote is a session as PostgreSQL holds it: its main transcript and
// its subagents', each line as it is to be written on disk.
type Remote struct {
	Key         layout.Key // Subpath ""
	Transcripts []RemoteTranscript
	// Sidecars: the session's sidecar files as sessiond_sidecars holds
	// them, by name. The names are as PostgreSQL gives them: the writer
	// checks them (sidecar.CheckName) before one becomes a path.
	Sidecars []sidecar.Sidecar
}

// RemoteTranscript is one transcript of a Remote.
type RemoteTranscript struct {
	Subpath string
	Lines   [][]byte
	// Meta is a subagent's .meta.json, from its last agent_metadata
	// entry (the SDKs' store form of the sidecar); nil when none.
	Meta []byte
}

// Connected reports whether PostgreSQL answered the mirror last time it
// tried.
func (mr *Mirror) Connected() bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.connected
}

// ErrNotMirrored is wrapped (beside errdefs.ErrNotFound) when PostgreSQL
// holds no row of the session asked for.
var ErrNotMirrored = errors.New("not in PostgreSQL")

// Fetch reads the session sessionID (in projectKey, or in whichever
// project holds it when projectKey is "") from PostgreSQL, in one
// snapshot: the exact line sessiond_lines keeps for a row where there is
// one, else the row's entry with "type" first (a row another program
// wrote). A transcript whose rows no cursor covers (another program's)
// gets a cursor covering them, in the same transaction, so that once the
// pulled file is here the mirror goes on after them instead of refusing
// the transcript as foreign.
func (mr *Mirror) Fetch(ctx context.Context, projectKey, sessionID string) (*Remote, error) {
	if mr.pool == nil {
		return nil, fmt.Errorf("the mirror is not started: %w", errdefs.ErrUnavailable)
	}
	err := mr.ensureSchema(ctx)
	var out *Remote
	if err == nil {
		err = pgx.BeginTxFunc(ctx, mr.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			r, err := mr.fetch(ctx, tx, projectKey, sessionID)
			out = r
			return err
		})
	}
	if err != nil {
		for _, k := range []error{errdefs.ErrNotFound, errdefs.ErrAmbiguous, errdefs.ErrCorrupt, errdefs.ErrInvalidArgument} {
			if errors.Is(err, k) {
				return nil, err // sessiond's own words: no secret in them
			}
		}
		return nil, fmt.Errorf("pull %s from PostgreSQL (%s): %s: %w", sessionID, mr.Target(), mr.red.clean(err.Error()), errdefs.ErrUnavailable)
	}
	return out, nil
}

// ensureSchema makes the tables unless the connector did already: a pull
// or a listing may come first.
func (mr *Mirror) ensureSchema(ctx context.Context) error {
	mr.mu.Lock()
	schema := mr.schema
	mr.mu.Unlock()
	if schema {
		return nil
	}
	if err := createSchema(ctx, mr.pool, mr.cfg.Table); err != nil {
		return err
	}
	mr.mu.Lock()
	mr.schema = true
	mr.mu.Unlock()
	return nil
}

func (mr *Mirror) fetch(ctx context.Context, tx pgx.Tx, projectKey, sessionID string) (*Remote, error) {
	table := mr.cfg.Table
	q := fmt.Sprintf("SELECT DISTINCT project_key FROM %s WHERE session_id = $1", table)
	args := []any{sessionID}
	if projectKey != "" {
		q += " AND project_key = $2"
		args = append(args, projectKey)
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	projects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	switch len(projects) {
	case 0:
		where := "any project"
		if projectKey != "" {
			where = "project " + projectKey
		}
		return nil, fmt.Errorf("no session %s in %s of PostgreSQL's table %s: %w: %w", sessionID, where, table, ErrNotMirrored, errdefs.ErrNotFound)
	case 1:
	default:
		return nil, fmt.Errorf("session %s is in several projects in PostgreSQL (%v); name the project with --cwd or --project: %w", sessionID, projects, errdefs.ErrAmbiguous)
	}
	key := layout.Key{ProjectKey: projects[0], SessionID: sessionID}
	if err := layout.ValidateProjectKey(key.ProjectKey); err != nil {
		return nil, fmt.Errorf("PostgreSQL files session %s under a project key sessiond refuses: %w", sessionID, err)
	}
	rows, err = tx.Query(ctx, fmt.Sprintf("SELECT DISTINCT subpath FROM %s WHERE project_key = $1 AND session_id = $2 ORDER BY subpath", table),
		key.ProjectKey, key.SessionID)
	if err != nil {
		return nil, err
	}
	subs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := &Remote{Key: key}
	for _, sub := range subs {
		if sub != "" {
			if err := layout.ValidateSubpath(sub); err != nil {
				return nil, fmt.Errorf("PostgreSQL lists a subagent transcript of session %s that sessiond refuses, so nothing of it is pulled: %w", key, err)
			}
		}
		k := key
		k.Subpath = sub
		rt, err := mr.fetchTranscript(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		out.Transcripts = append(out.Transcripts, rt)
	}
	rows, err = tx.Query(ctx, `SELECT name, body, mtime FROM sessiond_sidecars
WHERE store_table = $1 AND project_key = $2 AND session_id = $3 ORDER BY name`, table, key.ProjectKey, key.SessionID)
	if err != nil {
		return nil, err
	}
	out.Sidecars, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (sidecar.Sidecar, error) {
		var sc sidecar.Sidecar
		err := r.Scan(&sc.Name, &sc.Body, &sc.MtimeMs)
		return sc, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fetchTranscript reads one transcript's lines, and adopts its rows with
// a cursor when none covers them.
func (mr *Mirror) fetchTranscript(ctx context.Context, tx pgx.Tx, k layout.Key) (RemoteTranscript, error) {
	table := mr.cfg.Table
	rows, err := queryRemoteLines(ctx, tx, table, k)
	if err != nil {
		return RemoteTranscript{}, err
	}
	defer rows.Close()
	rt := RemoteTranscript{Subpath: k.Subpath}
	for rows.Next() {
		l, err := scanRemoteLine(rows, k)
		if err != nil {
			return RemoteTranscript{}, err
		}
		if k.Subpath != "" {
			if meta, ok := transcript.AgentMetaSidecar(l); ok {
				rt.Meta = meta
			}
		}
		rt.Lines = append(rt.Lines, l)
	}
	if err := rows.Err(); err != nil {
		return RemoteTranscript{}, err
	}
	c, err := loadCursor(ctx, tx, table, k, false)
	if err != nil {
		return RemoteTranscript{}, err
	}
	if !c.exists && len(rt.Lines) > 0 {
		h := newChain()
		next := cursor{exists: true, generation: 1, entries: uint64(len(rt.Lines)), rows: uint64(len(rt.Lines))}
		for _, l := range rt.Lines {
			h.add(l)
			next.bytes += uint64(len(l)) + 1
		}
		next.digest, next.chain = h.digest(), h.state()
		if err := saveCursor(ctx, tx, table, k, next); err != nil {
			return RemoteTranscript{}, err
		}
	}
	return rt, nil
}

// queryRemoteLines reads k's rows in seq order, each with its exact line
// where sessiond_lines keeps one (scanRemoteLine makes them lines).
func queryRemoteLines(ctx context.Context, q queryer, table string, k layout.Key) (pgx.Rows, error) {
	return q.Query(ctx, fmt.Sprintf(`SELECT t.entry::text, l.line FROM %s t
LEFT JOIN sessiond_lines l ON l.store_table = $1 AND l.project_key = t.project_key AND l.session_id = t.session_id
    AND l.subpath = t.subpath AND l.seq = t.seq
WHERE t.project_key = $2 AND t.session_id = $3 AND t.subpath = $4 ORDER BY t.seq`, table),
		table, k.ProjectKey, k.SessionID, k.Subpath)
}

// scanRemoteLine is a row of queryRemoteLines as a pull writes it here:
// the exact line, else the entry with "type" first (a row another
// program wrote).
func scanRemoteLine(rows pgx.Rows, k layout.Key) ([]byte, error) {
	var entry string
	var line *string
	if err := rows.Scan(&entry, &line); err != nil {
		return nil, err
	}
	if line != nil {
		return []byte(*line), nil
	}
	l, err := TypeFirst([]byte(entry))
	if err != nil {
		return nil, fmt.Errorf("%s: a row's entry: %w: %w", k, err, errdefs.ErrCorrupt)
	}
	return l, nil
}

// TypeFirst turns a jsonb entry's text into a transcript line: compact,
// with its "type" member first as the official writers put it (jsonb
// orders keys by length), the others in jsonb's order.
func TypeFirst(entry []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(entry))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %.40q", entry)
	}
	type member struct {
		key []byte
		val json.RawMessage
	}
	var members []member
	first := -1
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var kb bytes.Buffer
		enc := json.NewEncoder(&kb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(name); err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if name == "type" && first < 0 {
			first = len(members)
		}
		members = append(members, member{bytes.TrimSpace(kb.Bytes()), v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the entry")
	}
	if first > 0 {
		t := members[first]
		copy(members[1:first+1], members[:first])
		members[0] = t
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m.key)
		b.WriteByte(':')
		if err := json.Compact(&b, m.val); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
