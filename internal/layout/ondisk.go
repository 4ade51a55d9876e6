package layout

import (
	"errors"

	"fmt"
	"github.com/sessiond/sessiond/internal/errdefs"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUnsafePath is wrapped by CheckOnDisk's errors: something on disk where
// one of a key's files or folders belongs is a symbolic link, or not the
// kind of file it must be. The request itself may be fine; the disk needs a
// human (the server reports it as FAILED_PRECONDITION).
var ErrUnsafePath = errdefs.ErrUnsafePath

// CheckOnDisk looks (with lstat, never following a link) at every path
// sessiond derives from k below the projects folder: the project folder,
// the session folder, each folder of the subpath, and the transcript
// itself. It refuses a symbolic link at any of them, a folder that is not
// a folder, and a transcript that is not a regular file, so that no
// request can
// make sessiond read or write outside Root and StateDir through a planted
// link. Parts that do not exist yet are fine.
//
// Root, StateDir and the projects folder itself may be
// links (a config dir kept elsewhere is common); only what lies below them
// is checked.
//
// This is a check at the edge, made before the request reaches a writer:
// it cannot stop a link planted in the instant between the check and the
// write. The writers' own opens must not follow links either.
func (l Layout) CheckOnDisk(k Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	parts := []string{k.ProjectKey, k.SessionID}
	if k.Subpath != "" {
		parts = append(parts, strings.Split(k.Subpath, "/")...)
	}
	// The transcript tree: <projects>/<key>/<sid>/<sub...>.jsonl, and for a
	// main transcript also its session folder <projects>/<key>/<sid>.
	return checkChain(l.ProjectsDir(), parts, TranscriptExt, k.Subpath == "")
}

// checkChain checks base/parts[0]/.../parts[n-1]+ext: every folder on the
// way must be a real folder and the file, if present, a regular file. With
// alsoDir the last part is also checked as a folder (a main transcript's
// session folder, which holds its subagents and archive marker).
func checkChain(base string, parts []string, ext string, alsoDir bool) error {
	dir := base
	last := len(parts) - 1
	for i, p := range parts {
		if i == last {
			if alsoDir {
				if _, err := checkEntry(filepath.Join(dir, p), true); err != nil {
					return err
				}
			}
			_, err := checkEntry(filepath.Join(dir, p+ext), false)
			return err
		}
		dir = filepath.Join(dir, p)
		exists, err := checkEntry(dir, true)
		if err != nil {
			return err
		}
		if !exists {
			return nil // nothing below can exist
		}
	}
	return nil
}

// checkEntry lstats path and reports whether it exists; it is an error
// when it is a link, or not a folder (wantDir) or regular file (!wantDir).
func checkEntry(path string, wantDir bool) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect %s: %w", path, err)
	}
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return true, fmt.Errorf("%s is a symbolic link (to %q); sessiond never reads or writes through links below its folders, so nothing there escapes them: replace the link with the real %s, or remove it: %w",
			path, target, kindWord(wantDir), ErrUnsafePath)
	case wantDir && !mode.IsDir():
		return true, fmt.Errorf("%s is a %s where sessiond keeps a folder; move it away: %w", path, modeWord(mode), ErrUnsafePath)
	case !wantDir && !mode.IsRegular():
		return true, fmt.Errorf("%s is a %s, not a regular file; sessiond never writes over or through it: move it away: %w", path, modeWord(mode), ErrUnsafePath)
	}
	return true, nil
}

// errNotDir: a component of the path is a file, so the path cannot exist.
var errNotDir = syscall.ENOTDIR

func kindWord(dir bool) string {
	if dir {
		return "folder"
	}
	return "file"
}

func modeWord(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file (" + m.Type().String() + ")"
}
