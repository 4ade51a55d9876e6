package sidecar

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// Title reads the title sidecar in the session folder dir, which the
// official tools consult for the title too: "" for none.
func Title(FS fsys.FS, dir string) (string, error) {
	b, err := readSessionFile(FS, filepath.Join(dir, TitleName), MaxBytes)
	if err != nil || b == nil {
		return "", err
	}
	return listing.ParseTitleSidecar(b), nil
}

// Archived reads the archive mark in the session folder dir: archived
// unless someone prompted in the session (at lastPromptMs) after it was
// set, the official rule.
func Archived(FS fsys.FS, dir string, lastPromptMs int64) (bool, error) {
	b, err := readSessionFile(FS, filepath.Join(dir, ArchiveName), 4097)
	if err != nil || b == nil {
		return false, err
	}
	return listing.Archived(b, lastPromptMs), nil
}

// ArchiveBody is the archive mark as the official archiveSession and
// unarchiveSession write it, set at now.
func ArchiveBody(archived bool, now time.Time) []byte {
	return fmt.Appendf(nil, `{"archived":%v,"at":%q}`, archived, now.UTC().Format("2006-01-02T15:04:05.000Z"))
}

// readSessionFile reads up to limit bytes of a file the official tools
// keep beside a transcript (the title and archive sidecars); nil for none.
// What is not a regular file (a symbolic link, which sessiond never
// follows, or a folder) is none too: the official readers find no title
// or mark in it either, and it is not sessiond's to move. Any other
// failure is errdefs.Unreadable's error: a listing must not show the session
// untitled or unarchived, nor a writer publish it so, because a
// descriptor ran out. What does not parse counts as no title or mark,
// as the official readers take it.
func readSessionFile(FS fsys.FS, path string, limit int64) ([]byte, error) {
	f, err := FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, errdefs.Unreadable(path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, errdefs.Unreadable(path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, errdefs.Unreadable(path, err)
	}
	return b, nil
}
