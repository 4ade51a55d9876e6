package writer

import (
	"context"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// AppendMetadata appends one metadata line (custom-title, tag) to an
// existing session, as the official writers do: never creating one.
func (m *Manager) AppendMetadata(ctx context.Context, key layout.Key, line []byte) error {
	if key.Subpath != "" {
		// The official readers take a session's title and tag from its
		// main transcript only: in a subagent's it would change nothing.
		return fmt.Errorf("a title or tag applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if absent(m.Exists(key)) {
		return m.NotFound(key)
	}
	_, err := m.Append(ctx, key, [][]byte{line})
	return err
}

// SetArchived writes the session's archived.json marker as the official
// archiveSession / unarchiveSession do.
func (m *Manager) SetArchived(ctx context.Context, key layout.Key, archived bool) error {
	if key.Subpath != "" {
		return fmt.Errorf("archive applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if absent(m.Exists(key)) {
		return m.NotFound(key)
	}
	if g := m.cfg.AppendGate; g != nil {
		// One writer per session across machines: the mark is mirrored
		// under the session's lease, as its entries are, so it is asked
		// for (and taken) first; a session leased elsewhere is refused.
		if err := g(ctx, key); err != nil {
			return err
		}
	}
	body := sidecar.ArchiveBody(archived, m.cfg.Clock.Now())
	return m.do(ctx, key, func(st *session.State) error { return st.WriteSidecar(sidecar.ArchiveName, body) })
}

// WriteSidecar writes the session sidecar name of key's session (which
// must exist here) durably on its writer. The mirror is told
// (Change.Sidecars).
func (m *Manager) WriteSidecar(ctx context.Context, key layout.Key, name string, body []byte) error {
	if err := sidecar.CheckName(name); err != nil {
		return err
	}
	if len(body) > sidecar.MaxBytes {
		return fmt.Errorf("sidecar %s of %s: %d bytes, over %d: %w", name, key, len(body), sidecar.MaxBytes, errdefs.ErrInvalidArgument)
	}
	key = key.Main()
	if absent(m.Exists(key)) {
		return m.NotFound(key)
	}
	return m.do(ctx, key, func(st *session.State) error { return st.WriteSidecar(name, body) })
}
