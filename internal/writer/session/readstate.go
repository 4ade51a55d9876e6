package session

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/sessiond/sessiond/internal/writer/files"
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
	name := st.Config.Clock.Now().UTC().Format("20060102T150405.000000000Z") + "-" + filepath.Base(path)
	kept, err := files.KeepAside(st.fs, st.stateDirFor(DamagedDir), name, r)
	if err != nil {
		return "", fmt.Errorf("keep a copy of the damaged %s: %w", path, err)
	}
	return kept, nil
}

// DamagedDir is the folder of the state folder that keeps copies of
// damaged state files (keepDamaged).
const DamagedDir = "damaged"
