package writer

import (
	"context"
	"fmt"
	"io"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// Import writes a transcript this machine does not have (a pull from the
// fleet's PostgreSQL): lines, each without its newline, become key's
// canonical file whole or not at all (temp file, fsync, link, fsync of
// the folder), never replacing one that exists. meta, when not nil, is a
// subagent's .meta.json, written durably before the transcript appears.
func (m *Manager) Import(ctx context.Context, key layout.Key, lines [][]byte, meta []byte) error {
	if ok, err := m.Exists(key); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("session %s already exists here; an import never overwrites: %w", key, errdefs.ErrAlreadyExists)
	}
	return m.do(ctx, key, func(st *session.State) error {
		if st.Exists() {
			return fmt.Errorf("session %s already exists here; an import never overwrites: %w", key, errdefs.ErrAlreadyExists)
		}
		if meta != nil && key.Subpath != "" {
			if err := sidecar.WriteAgentMeta(m.cfg.FS, m.cfg.Layout.TranscriptPath(key), meta); err != nil {
				return err
			}
		}
		return st.CreateCanon("import", func(w io.Writer) error {
			for _, l := range lines {
				if _, err := w.Write(l); err != nil {
					return err
				}
				if _, err := w.Write([]byte{'\n'}); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
