package session

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/writer/files"
)

// ReplaceCanon is a repair's rewrite of the canonical file: write writes
// the new content into a temp file next to it; when it reports a change,
// the temp file is synced, the original (the first size bytes of orig)
// kept under the state folder, the temp file renamed over the canonical
// file and the folder synced, in that order, and the writer takes the new
// file as its base. It returns where the original was kept.
func (st *State) ReplaceCanon(orig io.ReaderAt, size int64, write func(io.Writer) (bool, error)) (string, error) {
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			st.fs.Remove(tmpPath)
		}
	}()
	if err := st.keepAttrs(tmp); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	changed, err := write(tmp)
	if err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if !changed {
		return "", nil
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := tmp.Close(); err != nil {
		return "", errdefs.FromIO(err)
	}
	backup, err := st.keepCopy("repairs", orig, size)
	if err != nil {
		return "", err
	}
	if err := st.fs.Rename(tmpPath, st.canonPath); err != nil {
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done = true
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.reload(); err != nil {
		return "", err
	}
	return backup, nil
}

// reload takes a canonical file replaced as a whole (repair) as the new
// base: lines served before may have moved.
func (st *State) reload() error {
	if err := st.scanCanonical(); err != nil {
		st.failed = err
		return err
	}
	st.rescueAt = -1
	st.lineage = st.lineages.Add(1)
	if err := st.newGeneration(); err != nil {
		st.failed = err
		return err
	}
	if st.ent != nil {
		st.ent.ModifiedMs = st.Config.Clock.Now().UnixMilli()
		st.Publish()
	}
	st.notifyChange()
	return nil
}

// keepCopy copies the first size bytes of src into the state folder under
// kind/<project>/<session>[/<subpath>]/<time>.jsonl, synced, and returns
// its path.
func (st *State) keepCopy(kind string, src io.ReaderAt, size int64) (string, error) {
	name := st.Config.Clock.Now().UTC().Format("20060102T150405.000000000Z") + ".jsonl"
	return files.KeepAside(st.fs, st.stateDirFor(kind), name, io.NewSectionReader(src, 0, size))
}

// stateDirFor is key's folder under the state folder's kind folder:
// kind/<project>/<session>[/<subpath>].
func (st *State) stateDirFor(kind string) string {
	rel := filepath.Join(st.key.ProjectKey, st.key.SessionID)
	if st.key.Subpath != "" {
		rel = filepath.Join(rel, st.key.Subpath)
	}
	return filepath.Join(st.Config.Layout.StateDir, kind, rel)
}

var newline = []byte{'\n'}

// CreateCanon makes st's canonical file, which must not exist, from what
// write writes: into a temp file, synced, then linked into place (a link
// fails instead of replacing a file that appeared meanwhile) and the
// folder synced; then the writer takes it as its base. what names the
// operation in errors.
func (st *State) CreateCanon(what string, write func(io.Writer) error) error {
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
