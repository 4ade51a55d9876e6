package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
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
	path := strings.TrimSuffix(st.canonPath, layout.TranscriptExt) + ".meta.json"
	if err := fsys.MkdirAll(st.fs, filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), errdefs.FromIO(err))
	}
	meta := st.agentMeta
	err := fsys.WriteFileAtomic(st.fs, path, storeTempPrefix(path)+uuid.NewString()[:8]+".tmp", 0o600, func(w io.Writer) error {
		_, err := w.Write(meta)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	st.agentMeta = nil
	return nil
}

// AppendMetadata appends one metadata line (custom-title, tag) to an
// existing session, as the official writers do: never creating one.
func (m *Manager) AppendMetadata(ctx context.Context, key layout.Key, line []byte) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if key.Subpath != "" {
		// The official readers take a session's title and tag from its
		// main transcript only: in a subagent's it would change nothing.
		return fmt.Errorf("a title or tag applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	_, err := m.Append(ctx, key, [][]byte{line})
	return err
}

// ArchiveMarkerPath is where the official tools keep a session's archived
// mark.
func (m *Manager) ArchiveMarkerPath(key layout.Key) string {
	return filepath.Join(m.cfg.Layout.SessionDir(key.Main()), "archived.json")
}

// SetArchived writes the session's archived.json marker as the official
// archiveSession / unarchiveSession do.
func (m *Manager) SetArchived(ctx context.Context, key layout.Key, archived bool) error {
	if key.Subpath != "" {
		return fmt.Errorf("archive applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	if g := m.cfg.AppendGate; g != nil {
		// One writer per session across machines: the mark is mirrored
		// under the session's lease, as its entries are, so it is asked
		// for (and taken) first; a session leased elsewhere is refused.
		if err := g(ctx, key); err != nil {
			return err
		}
	}
	body := fmt.Sprintf(`{"archived":%v,"at":%q}`, archived, m.cfg.Clock.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	return m.do(ctx, key, func(st *state) error { return m.writeSidecarLocked(st, "archived.json", []byte(body)) })
}

// titleSidecar reads the session's custom-title.json sidecar, which the
// official tools consult for the title too: "" for none.
func (d *deps) titleSidecar(key layout.Key) (string, error) {
	b, err := readSessionFile(d.cfg.FS, filepath.Join(d.cfg.Layout.SessionDir(key.Main()), "custom-title.json"), 64<<10)
	if err != nil || b == nil {
		return "", err
	}
	return listing.ParseTitleSidecar(b), nil
}

// archived reads the session's archived.json marker: archived unless
// someone prompted in the session after it was set (the official rule).
func (m *Manager) archived(key layout.Key, lastPromptMs int64) (bool, error) {
	b, err := readSessionFile(m.cfg.FS, m.ArchiveMarkerPath(key), 4097)
	if err != nil || b == nil {
		return false, err
	}
	return listing.Archived(b, lastPromptMs), nil
}

// readSessionFile reads up to limit bytes of a file the official tools
// keep beside a transcript (the title and archive sidecars); nil for none.
// What is not a regular file (a symbolic link, which sessiond never
// follows, or a folder) is none too: the official readers find no title
// or mark in it either, and it is not sessiond's to move. Any other
// failure is unreadable's error: a listing must not show the session
// untitled or unarchived, nor a writer publish it so, because a
// descriptor ran out. What does not parse counts as no title or mark,
// as the official readers take it.
func readSessionFile(FS fsys.FS, path string, limit int64) ([]byte, error) {
	f, err := FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, unreadable(path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, unreadable(path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, unreadable(path, err)
	}
	return b, nil
}
