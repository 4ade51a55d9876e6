package materialize

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// target is the config folder being written.
type target struct {
	fs  fsys.FS
	dir string // absolute and clean
	// created: claim made the folder, so undo removes it; otherwise it
	// was an empty folder of the caller's, which undo empties again.
	created bool
}

// want closes every refusal of the folder: what is accepted.
const want = "name a folder that does not exist yet (its parent must), or an empty folder of yours"

// claim checks dir and makes it, 0700, when it does not exist. It refuses
// a symbolic link (the copy would land wherever it points), anything but
// a folder, a folder of another user or one others may write into (they
// could plant links in it while it is written), and a folder that is not
// empty (a failure would have to tell the copy's files from the ones that
// were there). Refusals wrap ErrRefused; a failure to create it does not.
func claim(fsy fsys.FS, dir string) (*target, error) {
	if dir == "" {
		return nil, refused(fmt.Errorf("no folder to write the session into; %s: %w", want, errdefs.ErrInvalidArgument))
	}
	if strings.ContainsRune(dir, 0) {
		return nil, refused(fmt.Errorf("the folder %q contains a NUL byte; %s: %w", dir, want, errdefs.ErrInvalidArgument))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("make %s absolute: %w", dir, err)
	}
	t := &target{fs: fsy, dir: abs}
	fi, err := fsy.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// (ENOTDIR: a file on the way; create says so.)
		return t, t.create()
	case err != nil:
		return nil, fmt.Errorf("inspect %s: %w", abs, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(abs)
		return nil, refused(fmt.Errorf("%s is a symbolic link (to %q), and materialize never writes through one; %s: %w", abs, to, want, errdefs.ErrInvalidArgument))
	case !fi.IsDir():
		return nil, refused(fmt.Errorf("%s exists and is not a folder; %s: %w", abs, want, errdefs.ErrInvalidArgument))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, refused(fmt.Errorf("%s belongs to uid %d, not to you (uid %d); %s: %w", abs, st.Uid, os.Geteuid(), want, errdefs.ErrInvalidArgument))
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, refused(fmt.Errorf("%s may be written by others (mode %04o), who could plant links in the copy; chmod go-w it, or %s: %w", abs, perm, want, errdefs.ErrInvalidArgument))
	}
	ents, err := fsy.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", abs, err)
	}
	if len(ents) > 0 {
		return nil, refused(fmt.Errorf("%s is not empty (it holds %q%s); materialize writes only into a new or empty folder, so that a failure removes only what it wrote; %s: %w",
			abs, ents[0].Name(), more(len(ents)-1), want, errdefs.ErrInvalidArgument))
	}
	return t, nil
}

func more(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}

// create makes t.dir, 0700, in a parent that exists, durably.
func (t *target) create() error {
	parent := filepath.Dir(t.dir)
	pfi, err := t.fs.Stat(parent)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || err == nil && !pfi.IsDir() {
		return refused(fmt.Errorf("%s cannot be made: its parent %s is not a folder that exists; %s: %w", t.dir, parent, want, errdefs.ErrInvalidArgument))
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", parent, err)
	}
	if err := t.fs.Mkdir(t.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Made meanwhile by someone else: not ours to fill.
			return refused(fmt.Errorf("%s appeared while materialize was making it; %s: %w", t.dir, want, errdefs.ErrInvalidArgument))
		}
		return fmt.Errorf("make %s: %w", t.dir, err)
	}
	t.created = true
	if err := t.fs.SyncDir(parent); err != nil {
		return errors.Join(err, t.undo())
	}
	return nil
}

// undo removes what was written: the folder itself when claim made it,
// else everything in it. A removal that fails is tried again, twice: what
// is left behind may hold credentials.
func (t *target) undo() error {
	var err error
	for range 3 {
		if err = t.remove(); err == nil {
			return nil
		}
	}
	return err
}

func (t *target) remove() error {
	if t.created {
		return fsys.RemoveAll(t.fs, t.dir)
	}
	ents, err := t.fs.ReadDir(t.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, fsys.RemoveAll(t.fs, filepath.Join(t.dir, e.Name())))
	}
	return errors.Join(errs...)
}
