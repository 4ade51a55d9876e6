package session

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// Reads of sessiond's own state (the store sidecars, the ledgers, the notes
// of missing entries, the intents, the trash) tell three cases apart:
//
//   - absent (an error matching fs.ErrNotExist): the state is empty;
//   - unreadable (any other error: descriptors ran out, the disk failed):
//     the operation that needed the state fails with errdefs.Unreadable,
//     retryably, and nothing is cached; going on as if the file were not
//     there would serve a session with less than it had (a batch resent
//     after its id was forgotten is stored twice);
//   - damaged (read whole, does not decode): said at Error level, naming
//     the file; each reader says what it keeps.

// keepDamaged copies what r reads, the bytes of the damaged state file at
// path, into the state folder, under
// damaged/<project>/<session>[/<subpath>]/<time>-<name>, synced, before
// the writer starts that state afresh or cuts it (which overwrites or
// removes what it held), so that a human can still look at it. It returns
// the copy's path.
func (st *State) keepDamaged(path string, r io.Reader) (string, error) {
	rel := filepath.Join(st.key.ProjectKey, st.key.SessionID)
	if st.key.Subpath != "" {
		rel = filepath.Join(rel, st.key.Subpath)
	}
	dir := filepath.Join(st.Config.Layout.StateDir, DamagedDir, rel)
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return "", fmt.Errorf("keep a copy of the damaged %s in %s: %w", path, dir, errdefs.FromIO(err))
	}
	name := st.Config.Clock.Now().UTC().Format("20060102T150405.000000000Z") + "-" + filepath.Base(path)
	kept := filepath.Join(dir, name)
	err := fsys.WriteFileAtomic(st.fs, kept, "."+name+".tmp", 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("keep a copy of the damaged %s at %s: %w", path, kept, errdefs.FromIO(err))
	}
	return kept, nil
}

// DamagedDir is the folder of the state folder that keeps copies of
// damaged state files (keepDamaged).
const DamagedDir = "damaged"
