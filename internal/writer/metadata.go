package writer

import (
	"context"
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// noteAgentMeta remembers the .meta.json sidecar an agent_metadata entry
// of a subagent transcript describes: the SDK mirrors the sidecar to its
// store as such entries, and disk readers (listSubagents) read the file.
func (st *state) noteAgentMeta(line []byte) {
	if st.key.Subpath == "" {
		return
	}
	if meta, ok := transcript.AgentMetaSidecar(line); ok {
		st.agentMeta = meta
	}
}

// saveSidecars writes what the journal about to be replaced holds beyond
// the lines: the store sidecar and a subagent's .meta.json.
func (st *state) saveSidecars() error {
	if err := st.saveStore(); err != nil {
		return err
	}
	if st.agentMeta == nil {
		return nil
	}
	if err := sidecar.WriteAgentMeta(st.fs, st.canonPath, st.agentMeta); err != nil {
		return err
	}
	st.agentMeta = nil
	return nil
}

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
	return m.do(ctx, key, func(st *state) error { return st.writeSidecar(sidecar.ArchiveName, body) })
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
	return m.do(ctx, key, func(st *state) error { return st.writeSidecar(name, body) })
}

// writeSidecar writes a sidecar of st's session, on its writer.
func (st *state) writeSidecar(name string, body []byte) error {
	if err := sidecar.Write(st.fs, st.cfg.Layout.SessionDir(st.key.Main()), name, body); err != nil {
		return err
	}
	if name == sidecar.TitleName {
		// The listing's title comes from it too (when the transcript's
		// tail names none), and its stamp does not cover the sidecar.
		if st.ent != nil {
			st.ent.Sum.SetSidecarTitle(listing.ParseTitleSidecar(body))
			st.publish()
		} else {
			st.ix.Delete(st.key.Main())
		}
	}
	st.tell(Change{Key: st.key.Main(), Sidecars: true})
	return nil
}

// titleSidecar reads the session's title sidecar: "" for none.
func (d *deps) titleSidecar(key layout.Key) (string, error) {
	return sidecar.Title(d.cfg.FS, d.cfg.Layout.SessionDir(key.Main()))
}
