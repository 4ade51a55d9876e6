package sidecar

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// AgentMetaPath is where a subagent transcript's .meta.json sidecar lives,
// beside the transcript at canonPath.
func AgentMetaPath(canonPath string) string {
	return strings.TrimSuffix(canonPath, layout.TranscriptExt) + ".meta.json"
}

// TempPrefix starts the names of the temp files a sidecar at path is
// written through (the .meta.json and the store sidecar); each write takes
// a name of its own after it, ending in ".tmp", since a crash may have
// left the last one for the session's next writer to remove.
func TempPrefix(path string) string { return "." + filepath.Base(path) + "." }

// WriteAgentMeta writes a subagent's .meta.json beside its transcript at
// canonPath durably: temp file, fsync, rename, fsync of the folder.
func WriteAgentMeta(FS fsys.FS, canonPath string, meta []byte) error {
	path := AgentMetaPath(canonPath)
	if err := fsys.MkdirAll(FS, filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), errdefs.FromIO(err))
	}
	err := fsys.WriteFileAtomic(FS, path, TempPrefix(path)+uuid.NewString()[:8]+".tmp", 0o600, func(w io.Writer) error {
		_, err := w.Write(meta)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	return nil
}
