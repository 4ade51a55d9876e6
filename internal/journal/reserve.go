package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sessiond/sessiond/internal/fsys"
)

// Space reserved ahead. An fdatasync after an append that grows a file
// must also commit the file's new size and blocks through the
// filesystem's journal; after a write into blocks the file already has, it
// flushes the data alone. Measured here (ext4 on a virtio disk, one
// writer): 1 KiB write + fdatasync p50 123-133 us appending, 89-92 us into
// fallocated space, 82-88 us into blocks written before; with 20 KiB
// writes 170-258, 163-173 and 98 us, and less CPU per sync in the same
// order. So a new segment gets its space at creation (fallocate, up to
// Options.Prealloc), and a segment the checkpoint lets go is kept as a
// spare (up to maxSpares) and becomes a later segment, whose blocks have
// all been written: PostgreSQL and Pebble recycle their logs the same way.
//
// A spare keeps its old records behind the new header. They cannot pass
// for the new segment's: every frame's checksum is seeded with its
// segment's random id (internal/frame), so recovery sees them as the
// unwritten rest of the segment, as it sees fallocate's zeros, and cuts
// them off with the tail.

// maxSpares bounds the collected segments kept for reuse: the steady
// state needs one (a segment is collected about when the next is made);
// two cover a burst.
const maxSpares = 2

// spareSuffix names a spare segment file: "spare-<16 hex>.wal-spare".
// Recovery never reads a spare as a segment.
const spareSuffix = ".wal-spare"

// openSpare gives a file for a new segment under the temp name tmp: the
// newest spare, renamed, or a new empty file. The rename is made durable
// (a folder sync, once per segment) before the file is written: without
// it a crash could keep the segment's later rename into place and lose
// this one, leaving the file under both names, and the next start would
// reuse the "spare" and overwrite the segment (the crash sweep of
// TestCrashDuringRetention found it).
func (l *Log) openSpare(tmp string) (fsys.File, error) {
	fs := l.opt.FS
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	for len(l.spares) > 0 {
		sp := l.spares[len(l.spares)-1]
		l.spares = l.spares[:len(l.spares)-1]
		if err := fs.Rename(sp, tmp); err != nil {
			continue // gone or unusable: a new file does as well
		}
		if err := fs.SyncDir(l.opt.Dir); err != nil {
			fs.Remove(tmp)
			continue
		}
		f, err := fs.OpenFile(tmp, os.O_RDWR, 0)
		if err != nil {
			fs.Remove(tmp)
			continue
		}
		return f, nil
	}
	return fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// writeHeader puts the header record at offset 0 and leaves the file
// offset at its end, where appends go.
func writeHeader(f fsys.File, hdr []byte) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	n, err := f.Write(hdr)
	if err == nil && n != len(hdr) {
		err = io.ErrShortWrite
	}
	return err
}

// reserve allocates the segment's space ahead, best effort: a filesystem
// that cannot (or a full disk) leaves a segment that grows with its
// appends, as it would without the reservation; only the sync cost
// differs, and a full disk then fails the append itself, with its error.
// The reservation is bounded by the free space less Options.Keep, so it
// never takes the last of a small disk (and a filesystem that keeps what
// a failed fallocate got is never asked for more than there is); a room
// below minReserve is not worth a reservation at all.
func (l *Log) reserve(f fsys.File) {
	if l.opt.Prealloc <= 0 || l.lowSpace.Load() {
		return
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() >= l.opt.Prealloc {
		return
	}
	want := l.opt.Prealloc
	free, err := l.opt.FreeSpace(l.opt.Dir)
	if err != nil {
		return // cannot tell: take nothing ahead
	}
	if room := free - l.opt.Keep; room < want-fi.Size() {
		if room < minReserve {
			return
		}
		want = fi.Size() + room
	}
	_ = fsys.Allocate(f, want)
}

// minReserve is the least reservation worth making.
const minReserve = 1 << 20

// retire takes a collected segment out of the journal: kept as a spare while
// there are fewer than maxSpares, removed otherwise. Either way its
// segment name is gone; the caller syncs the folder.
func (l *Log) retire(path string) error {
	fs := l.opt.FS
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	if l.opt.Prealloc > 0 && len(l.spares) < maxSpares && !l.lowSpace.Load() {
		sp := filepath.Join(l.opt.Dir, fmt.Sprintf("spare-%016x%s", randomUint64(), spareSuffix))
		if err := fs.Rename(path, sp); err == nil {
			l.spares = append(l.spares, sp)
			return nil
		} else if errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return fs.Remove(path)
}

// SetLowSpace tells the journal whether its disk is short of space. Space
// reserved ahead is itself a reserve: a spare holds a whole segment's
// blocks that nothing uses yet, and a new segment's fallocate (which on
// some filesystems keeps what it got when it fails part way) would take
// the very room that the ballast's release just gave the compactions
// still waiting (see package ballast). So while the disk is short the
// spares are deleted at once (and the retained segments when it turns
// short, retain.go), collected segments are deleted instead of kept as
// spares, and new segments grow with their writes. The tail reserved in the
// segment being written stays: appends fill it without needing a block
// more, so they go on being acknowledged while the disk is full. The
// writers set it when a write finds the disk full and clear it once the
// space is back.
func (l *Log) SetLowSpace(on bool) {
	if l.lowSpace.Swap(on) == on || !on {
		return
	}
	l.spareMu.Lock()
	spares := l.spares
	l.spares = nil
	l.spareMu.Unlock()
	for _, sp := range spares {
		_ = l.opt.FS.Remove(sp)
	}
	// The retained history too: a compaction waiting for room on this
	// disk moves acknowledged entries into their transcript, which
	// matters more than keeping entries that are there already.
	l.DropRetained()
}

// LowSpace reports whether SetLowSpace(true) is in force.
func (l *Log) LowSpace() bool { return l.lowSpace.Load() }

// Spares is how many collected segment files are kept for reuse.
func (l *Log) Spares() int {
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	return len(l.spares)
}

// isSpare reports whether a file name in the journal's folder is a spare.
func isSpare(name string) bool {
	return strings.HasPrefix(name, "spare-") && strings.HasSuffix(name, spareSuffix)
}
