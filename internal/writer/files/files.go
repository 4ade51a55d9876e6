package files

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/transcript"
)

// TailWindow is how much of a file's end TailCRC covers.
const TailWindow = 4096

// Castagnoli is the CRC-32C table TailCRC uses.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TailCRC is the CRC-32C of the last TailWindow bytes (or fewer) of the
// first size bytes r holds: with size, a cheap name for a file's content
// that a rewrite changes and an append past size does not.
func TailCRC(r io.ReaderAt, size int64) (uint32, error) {
	n := min(int64(TailWindow), size)
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-n); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return 0, err
	}
	return crc32.Checksum(buf, Castagnoli), nil
}

// Intact reports whether f still starts with the size bytes whose tail
// checksum was tail. A file now shorter does not; a read that failed
// tells nothing and is returned.
func Intact(f io.ReaderAt, size int64, tail uint32) (bool, error) {
	t, err := TailCRC(f, size)
	if Shrank(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return t == tail, nil
}

// ReadRange reads the file at path from from to to (less when it ends
// before).
func ReadRange(fs fsys.FS, path string, from, to int64) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	defer f.Close()
	data := make([]byte, to-from)
	n, err := f.ReadAt(data, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	return data[:n], nil
}

// LineStart is where the line of the file at path that ends at end (not
// counting a newline) begins: just past the newline before it, or 0.
func LineStart(fs fsys.FS, path string, end int64) (int64, error) {
	const chunk = 64 << 10
	for at := end; at > 0; {
		from := max(at-chunk, 0)
		data, err := ReadRange(fs, path, from, at)
		if err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			return from + int64(i) + 1, nil
		}
		at = from
	}
	return 0, nil
}

// WholeLines splits data into its lines, without newlines, leaving out a
// last line not ended by one.
func WholeLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		out = append(out, data[:i])
		data = data[i+1:]
	}
	return out
}

// HasPrefix reports whether the file at path starts with the size bytes
// whose tail checksum was tail (true for size 0; false when the file is
// missing or shorter, or was rewritten shorter while it was read).
func HasPrefix(fs fsys.FS, path string, size int64, tail uint32) (bool, error) {
	if size == 0 {
		return true, nil
	}
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, iofs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, errdefs.FromIO(err)
	}
	if fi.Size() < size {
		return false, nil
	}
	t, err := TailCRC(f, size)
	if Shrank(err) {
		// Rewritten shorter since the Stat above: not that content.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	return t == tail, nil
}

// Shrank tells a read that ended early (the file was rewritten shorter
// meanwhile) from another error.
func Shrank(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ScanWholeLines calls fn with each whole line (without its newline) of
// the file at path between from and to, reading one line at a time: a
// file another program wrote alone can be hundreds of megabytes.
func ScanWholeLines(fs fsys.FS, path string, from, to int64, fn func(line []byte)) error {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	defer f.Close()
	sc := transcript.NewLineScannerAt(io.NewSectionReader(f, from, to-from))
	for sc.Scan() {
		if sc.HasNewline() {
			fn(sc.Line())
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	return nil
}

// KeepAside copies what r reads into dir/name, synced (through a temp
// file), making dir as needed, and returns the copy's path: a file a
// person should still be able to look at once sessiond goes on without it.
func KeepAside(fs fsys.FS, dir, name string, r io.Reader) (string, error) {
	if err := fsys.MkdirAll(fs, dir, 0o700); err != nil {
		return "", fmt.Errorf("keep a copy in %s: %w", dir, errdefs.FromIO(err))
	}
	path := filepath.Join(dir, name)
	err := fsys.WriteFileAtomic(fs, path, "."+name+".tmp", 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("keep a copy at %s: %w", path, errdefs.FromIO(err))
	}
	return path, nil
}

// SyncFile makes the file at path and its name in its folder durable
// (nothing to do when it does not exist). opened says whether it got as
// far as opening the file: an error then is a failed sync, after which
// what the disk holds is not known.
func SyncFile(fs fsys.FS, path string) (opened bool, err error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, iofs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sync %s: %w", path, errdefs.FromIO(err))
	}
	err = f.Sync()
	f.Close()
	if err == nil {
		err = fs.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return true, fmt.Errorf("sync %s: %w", path, errdefs.FromIO(err))
	}
	return true, nil
}

// TailAt is TailCRC of the first size bytes of the file at path, and the
// file's modification time in Unix ms (0 when it cannot be had).
func TailAt(fs fsys.FS, path string, size int64) (tail uint32, mtimeMs int64, err error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		mtimeMs = fi.ModTime().UnixMilli()
	}
	if tail, err = TailCRC(f, size); err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	return tail, mtimeMs, nil
}
