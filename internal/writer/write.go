package writer

import (
	"context"
	"errors"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
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
// runs in parallel and the writer only deduplicates and writes. The entries
// are stored without a copy when already compact: raw is the manager's
// once passed, and must not be changed by the caller.
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

// FlushResult describes one compacted session.
type FlushResult struct {
	Key              layout.Key
	CompactedEntries uint64
	CanonicalBytes   int64
}

// Flush compacts key's journal into its canonical file.
func (m *Manager) Flush(ctx context.Context, key layout.Key) (FlushResult, error) {
	return m.flush(ctx, key, session.Stay, session.ReasonFlush)
}

// flush is Flush; retire says whether the writer then retires at once
// (see session.Retire), reason why it compacts (session.Reason): only a
// caller's flush takes in first what another program appended.
func (m *Manager) flush(ctx context.Context, key layout.Key, retire session.Retire, reason session.Reason) (FlushResult, error) {
	var res FlushResult
	if err := key.Validate(); err != nil {
		return res, err
	}
	if absent(m.Exists(key)) {
		return res, m.NotFound(key)
	}
	err := m.doRetire(ctx, key, retire, func(st *session.State) error {
		if !st.Exists() {
			return m.NotFound(key)
		}
		if reason == session.ReasonFlush {
			if err := st.TakeIn(); err != nil {
				return err
			}
		}
		n := uint64(st.Pending())
		if err := st.Compact(reason); err != nil {
			return err
		}
		res = FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.CanonSize()}
		return nil
	})
	return res, err
}

// FlushAll compacts every session that has journaled entries: the open
// writers and the journals left by retired ones.
func (m *Manager) FlushAll(ctx context.Context) ([]FlushResult, error) {
	var out []FlushResult
	err := m.FlushEach(ctx, func(r FlushResult) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// FlushEach is FlushAll handing each session's result to fn once it is
// compacted, instead of gathering them. A session that fails is reported
// in the error returned at the end, after the others; fn's error stops at
// once.
func (m *Manager) FlushEach(ctx context.Context, fn func(FlushResult) error) error {
	keys := m.WriterKeys()
	var errs []error
	for _, k := range keys {
		r, err := m.flush(ctx, k, session.RetireIfOpened, session.ReasonFlush)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		if r.CompactedEntries > 0 {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return errors.Join(errs...)
}
