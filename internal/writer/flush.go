package writer

import (
	"context"
	"errors"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// FlushResult describes one compacted session.
type FlushResult struct {
	Key              layout.Key
	CompactedEntries uint64
	CanonicalBytes   int64
}

// Flush compacts key's journal into its canonical file.
func (m *Manager) Flush(ctx context.Context, key layout.Key) (FlushResult, error) {
	return m.flush(ctx, key, session.Stay, "flush")
}

// flush is Flush; retire says whether the writer then retires at once
// (see session.Retire), reason why it compacts (see automatic).
func (m *Manager) flush(ctx context.Context, key layout.Key, retire session.Retire, reason string) (FlushResult, error) {
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
		r, err := m.flush(ctx, k, session.RetireIfOpened, "flush")
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
