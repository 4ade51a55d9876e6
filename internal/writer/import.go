package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
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
	return m.do(ctx, key, func(st *state) error {
		if st.exists() {
			return fmt.Errorf("session %s already exists here; an import never overwrites: %w", key, errdefs.ErrAlreadyExists)
		}
		if meta != nil && key.Subpath != "" {
			if err := sidecar.WriteAgentMeta(st.fs, st.canonPath, meta); err != nil {
				return err
			}
		}
		return st.createCanon("import", func(w io.Writer) error {
			for _, l := range lines {
				if _, err := w.Write(l); err != nil {
					return err
				}
				if _, err := w.Write(newline); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

var newline = []byte{'\n'}

// createCanon makes st's canonical file, which must not exist, from what
// write writes: into a temp file, synced, then linked into place (a link
// fails instead of replacing a file that appeared meanwhile) and the
// folder synced; then the writer takes it as its base. what names the
// operation in errors.
func (st *state) createCanon(what string, write func(io.Writer) error) error {
	if err := fsys.MkdirAll(st.fs, st.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", st.dir, errdefs.FromIO(err))
	}
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", what, errdefs.FromIO(err))
	}
	defer st.fs.Remove(tmpPath)
	defer tmp.Close()
	if err := write(tmp); err != nil {
		// The writer's own refusals carry their kind; a failed write of
		// the temp file is the disk's, and a full disk must say so.
		return fmt.Errorf("%s %s: %w", what, st.key, errdefs.FromIO(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("%s: %w", what, errdefs.FromIO(err))
	}
	if err := st.fs.Link(tmpPath, st.canonPath); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("session %s already exists; a %s never overwrites: %w", st.key, what, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("%s: %w", what, errdefs.FromIO(err))
	}
	if err := st.fs.Remove(tmpPath); err != nil {
		return fmt.Errorf("%s: %w", what, errdefs.FromIO(err))
	}
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return fmt.Errorf("%s: %w", what, errdefs.FromIO(err))
	}
	return st.reload()
}
