package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// SessionSidecars are the files of a session's folder
// (<project>/<session-id>/) that belong to the whole session and that the
// PostgreSQL mirror copies and a pull brings back: the archive mark
// (written by SetArchived and the official archiveSession) and the title
// the official tools keep beside the transcript. Sorted. A subagent's
// .meta.json is not one of them: it travels as agent_metadata entries.
var SessionSidecars = []string{"archived.json", "custom-title.json"}

// MaxSidecarBytes bounds a session sidecar sessiond reads or writes:
// both are a few dozen bytes as the official tools write them.
const MaxSidecarBytes = 64 << 10

// Sidecar is one session sidecar file: its name (one of SessionSidecars),
// its exact bytes and its mtime.
type Sidecar struct {
	Name    string
	Body    []byte
	MtimeMs int64
}

// CheckSidecarName refuses any name but SessionSidecars': a name that
// comes from elsewhere (PostgreSQL's rows) never becomes a path unchecked.
func CheckSidecarName(name string) error {
	if !slices.Contains(SessionSidecars, name) {
		return fmt.Errorf("%q is not a session sidecar sessiond knows (%v): %w", name, SessionSidecars, errdefs.ErrInvalidArgument)
	}
	return nil
}

// sidecarTempPrefix starts the temp file name of a sidecar being
// written; Recover sweeps what a crash leaves of them.
func sidecarTempPrefix(name string) string { return "." + name + ".tmp-" }

func isSidecarTemp(n string) bool {
	for _, name := range SessionSidecars {
		if strings.HasPrefix(n, sidecarTempPrefix(name)) {
			return true
		}
	}
	return false
}

// Sidecars reads the session sidecars key's session has here (key names
// the session; its subpath is ignored), sorted by name; none is no error.
func (m *Manager) Sidecars(key layout.Key) ([]Sidecar, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	dir := m.cfg.Layout.SessionDir(key.Main())
	var out []Sidecar
	for _, name := range SessionSidecars {
		path := filepath.Join(dir, name)
		f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
		}
		sc, err := readSidecar(f, name, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func readSidecar(f fsys.File, name, path string) (Sidecar, error) {
	fi, err := f.Stat()
	if err != nil {
		return Sidecar{}, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	if !fi.Mode().IsRegular() {
		return Sidecar{}, fmt.Errorf("%s is not a regular file; remove it: %w", path, errdefs.ErrInvalidArgument)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSidecarBytes+1))
	if err != nil {
		return Sidecar{}, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	if len(b) > MaxSidecarBytes {
		return Sidecar{}, fmt.Errorf("%s holds over %d bytes, more than a session sidecar does; shorten or remove it: %w", path, MaxSidecarBytes, errdefs.ErrInvalidArgument)
	}
	return Sidecar{Name: name, Body: b, MtimeMs: fi.ModTime().UnixMilli()}, nil
}

// WriteSidecar writes the session sidecar name of key's session (which
// must exist here) durably: temp file, fsync, rename, fsync of the
// folder. The mirror is told (Change.Sidecars).
func (m *Manager) WriteSidecar(ctx context.Context, key layout.Key, name string, body []byte) error {
	if err := CheckSidecarName(name); err != nil {
		return err
	}
	if len(body) > MaxSidecarBytes {
		return fmt.Errorf("sidecar %s of %s: %d bytes, over %d: %w", name, key, len(body), MaxSidecarBytes, errdefs.ErrInvalidArgument)
	}
	key = key.Main()
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	return m.do(ctx, key, func(st *state) error { return m.writeSidecarLocked(st, name, body) })
}

// writeSidecarLocked writes a sidecar of st's session, on its writer.
func (m *Manager) writeSidecarLocked(st *state, name string, body []byte) error {
	dir := m.cfg.Layout.SessionDir(st.key.Main())
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	path := filepath.Join(dir, name)
	err := fsys.WriteFileAtomic(st.fs, path, sidecarTempPrefix(name)+uuid.NewString()[:8], 0o600, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	if name == "custom-title.json" {
		// The listing's title comes from it too (when the transcript's
		// tail names none), and its stamp does not cover the sidecar.
		if st.ent != nil {
			st.ent.Sum.SetSidecarTitle(listing.ParseTitleSidecar(body))
			st.publish()
		} else {
			st.ix.Delete(st.key.Main())
		}
	}
	m.tell(Change{Key: st.key.Main(), Sidecars: true})
	return nil
}
