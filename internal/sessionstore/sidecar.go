package sessionstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
)

// maxSidecarBytes bounds what Read takes of a sidecar. The largest state
// Validate and Prune allow is maxBatchIDs ids of maxBatchIDLen bytes and
// 1 + MaxFolders summaries of MaxSummaryBytes: under 1 MiB as Save writes
// it, and about 5 MiB even with every byte a '<' that an encoder escaping
// HTML writes as six; a file over the bound was not written by sessiond.
const maxSidecarBytes = 16 << 20

// DamagedError is a store sidecar that was read whole but does not decode.
type DamagedError struct {
	Path string
	Body []byte // what the file held
	Err  error
}

func (e *DamagedError) Error() string { return fmt.Sprintf("%s is damaged: %v", e.Path, e.Err) }

func (e *DamagedError) Unwrap() []error { return []error{errdefs.ErrCorrupt, e.Err} }

// Read reads key's store sidecar. A missing one is an empty state. One
// that cannot be read fails with errdefs.Unreadable: the session must not
// open without the batch ids it remembers (a resent batch would be stored
// twice) or its summary's version. One that does not decode is returned as
// a *DamagedError with an empty state, for the caller to decide.
func Read(FS fsys.FS, L layout.Layout, key layout.Key) (State, error) {
	var s State
	path := L.StorePath(key)
	f, err := FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, errdefs.Unreadable("the store sidecar of "+key.String(), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSidecarBytes+1))
	if err != nil {
		return s, errdefs.Unreadable("the store sidecar of "+key.String(), err)
	}
	if len(b) > maxSidecarBytes {
		return State{}, &DamagedError{Path: path, Body: b[:maxSidecarBytes],
			Err: fmt.Errorf("it is over %d bytes, more than sessiond ever writes (its first %d bytes are what the copy keeps)", maxSidecarBytes, maxSidecarBytes)}
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, &DamagedError{Path: path, Body: b, Err: err}
	}
	return s, nil
}

// Save writes s, pruned as of now, as key's store sidecar durably: temp
// file, sync, rename, folder sync. An empty state removes the sidecar.
func Save(FS fsys.FS, L layout.Layout, key layout.Key, s *State, now time.Time) error {
	s.Prune(now)
	path := L.StorePath(key)
	if s.Empty() {
		if err := FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove store sidecar of %s: %w", key, errdefs.FromIO(err))
		}
		return nil
	}
	// Without HTML escaping, which makes each '<', '>' and '&' six bytes:
	// what Validate lets through then stays well within maxSidecarBytes.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(FS, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	// A temp name of its own each time: a crash may have left the last
	// one (the writer's open removes those).
	tmp := sidecar.TempPrefix(path) + uuid.NewString()[:8] + ".tmp"
	err := fsys.WriteFileAtomic(FS, path, tmp, 0o600, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fmt.Errorf("write store sidecar of %s: %w", key, errdefs.FromIO(err))
	}
	return nil
}
