// Package sidecar reads and writes the small files kept beside a
// transcript: the session sidecars the official tools read (the archive
// mark archived.json, the title custom-title.json) and a subagent's
// .meta.json. It owns their names, their formats and their durable writes
// (temp file, fsync, rename, fsync of the folder, all through fsys.FS);
// the writer decides when to make them, on the session's goroutine.
package sidecar

import (
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
)

// The session sidecars sessiond knows.
const (
	ArchiveName = "archived.json"
	TitleName   = "custom-title.json"
)

// Names are the files of a session's folder (<project>/<session-id>/)
// that belong to the whole session and that the PostgreSQL mirror copies
// and a pull brings back: the archive mark (written by SetArchived and the
// official archiveSession) and the title the official tools keep beside
// the transcript. Sorted. A subagent's .meta.json is not one of them: it
// travels as agent_metadata entries.
var Names = []string{ArchiveName, TitleName}

// MaxBytes bounds a session sidecar sessiond reads or writes: both are a
// few dozen bytes as the official tools write them.
const MaxBytes = 64 << 10

// Sidecar is one session sidecar file: its name (one of Names), its exact
// bytes and its mtime.
type Sidecar struct {
	Name    string
	Body    []byte
	MtimeMs int64
}

// CheckName refuses any name but Names': a name that comes from elsewhere
// (PostgreSQL's rows) never becomes a path unchecked.
func CheckName(name string) error {
	if !slices.Contains(Names, name) {
		return fmt.Errorf("%q is not a session sidecar sessiond knows (%v): %w", name, Names, errdefs.ErrInvalidArgument)
	}
	return nil
}

// tempPrefix starts the temp file name of a session sidecar being
// written; the writer's recovery sweeps what a crash leaves of them
// (IsTemp).
func tempPrefix(name string) string { return "." + name + ".tmp-" }

// IsTemp reports whether a file name in a session's folder is a session
// sidecar's temp file.
func IsTemp(n string) bool {
	for _, name := range Names {
		if strings.HasPrefix(n, tempPrefix(name)) {
			return true
		}
	}
	return false
}

// ReadAll reads the session sidecars in the session folder dir, sorted by
// name; none is no error.
func ReadAll(FS fsys.FS, dir string) ([]Sidecar, error) {
	var out []Sidecar
	for _, name := range Names {
		path := filepath.Join(dir, name)
		f, err := FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
		}
		sc, err := read(f, name, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func read(f fsys.File, name, path string) (Sidecar, error) {
	fi, err := f.Stat()
	if err != nil {
		return Sidecar{}, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	if !fi.Mode().IsRegular() {
		return Sidecar{}, fmt.Errorf("%s is not a regular file; remove it: %w", path, errdefs.ErrInvalidArgument)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return Sidecar{}, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	if len(b) > MaxBytes {
		return Sidecar{}, fmt.Errorf("%s holds over %d bytes, more than a session sidecar does; shorten or remove it: %w", path, MaxBytes, errdefs.ErrInvalidArgument)
	}
	return Sidecar{Name: name, Body: b, MtimeMs: fi.ModTime().UnixMilli()}, nil
}

// Write writes the session sidecar name into the session folder dir
// durably: temp file, fsync, rename, fsync of the folder. The caller
// checked name (CheckName) and holds the session's writer.
func Write(FS fsys.FS, dir, name string, body []byte) error {
	if err := fsys.MkdirAll(FS, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	path := filepath.Join(dir, name)
	err := fsys.WriteFileAtomic(FS, path, tempPrefix(name)+uuid.NewString()[:8], 0o600, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	return nil
}
