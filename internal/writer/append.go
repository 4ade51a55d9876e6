package writer

import (
	"context"
	"fmt"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// What one Append stored (package session's group commit says it).
type (
	AppendResult = session.AppendResult
	Result       = session.Result
	Outcome      = session.Outcome
)

// The outcomes of an appended entry.
const (
	Stored    = session.Stored
	Duplicate = session.Duplicate
)

// Append validates entries and stores them atomically in key's session.
// A key whose files or folders run through a symbolic link is refused
// (errdefs.ErrUnsafePath), checked once per live writer. Validation
// happens here, in the caller's goroutine, so the CPU work of many callers
// runs in parallel and the writer only deduplicates and writes.
func (m *Manager) Append(ctx context.Context, key layout.Key, raw [][]byte) (*AppendResult, error) {
	return m.AppendBatch(ctx, key, raw, sessionstore.AppendOptions{})
}

// AppendBatch is Append with the SessionStore options: a batch id that
// makes a resent batch a no-op, and a summary replaced with the batch.
func (m *Manager) AppendBatch(ctx context.Context, key layout.Key, raw [][]byte, opt sessionstore.AppendOptions) (*AppendResult, error) {
	if err := opt.Validate(key); err != nil {
		return nil, err
	}
	entries := make([]transcript.Entry, len(raw))
	total := 0
	for i, r := range raw {
		e, err := transcript.Normalize(r, m.cfg.MaxEntryBytes)
		if err != nil {
			return nil, fmt.Errorf("entry %d of %d: %w", i+1, len(raw), err)
		}
		entries[i] = e
		total += len(e.Line) + 1
	}
	checked := m.reg.pathChecked(key)
	if !checked {
		if err := m.cfg.Layout.CheckOnDisk(key); err != nil {
			return nil, err
		}
	}
	if g := m.cfg.AppendGate; g != nil {
		if err := g(ctx, key); err != nil {
			return nil, err
		}
	}
	m.stats.appends.Add(1)
	req := session.NewAppend(opt, entries, total)
	err := m.submit(ctx, key, &req.Reply, func(w *session.Writer) bool {
		if !checked {
			w.MarkPathChecked()
		}
		return w.QueueAppend(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return req.Result(), nil
}
