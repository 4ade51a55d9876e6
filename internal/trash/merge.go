package trash

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// mergeStep is one transcript a restore rebuilds: Dst, the live file
// (there or not), from Srcs, its trashed copies, oldest first.
type mergeStep struct {
	Dst  string   `json:"dst"`
	Srcs []string `json:"srcs"`
}

// mergeCounts tell what merges did: lines brought back from the trash, and
// lines dropped because an older copy (or, for the live file's own, a
// trashed one) held the same entry.
type mergeCounts struct{ restored, dropped uint64 }

func (c *mergeCounts) add(o mergeCounts) {
	c.restored += o.restored
	c.dropped += o.dropped
}

// mergeKey is what makes two lines the same entry: the uuid, or for a
// line without one (titles, tags, summaries, the SessionStore adapters'
// entries) the whole line.
func mergeKey(line []byte) string {
	if id, ok := rawjson.TopLevelString(line, "uuid"); ok && id != "" {
		return "u" + id
	}
	h := sha256.Sum256(line)
	return "c" + string(h[:])
}

// mergeTranscript makes step.Dst hold the lines of each of step.Srcs in
// turn, then the lines Dst held: an agent that went on writing after its
// session was deleted made a new file whose first entries name parents
// that are now in the trash, so the trashed entries come first. A line
// whose entry an earlier source already gave is dropped; lines repeated
// within one source stay as they are (that is check's and repair's
// business, not a restore's). The new file replaces Dst by rename, with
// Dst's mode and owner.
//
// Done again on its own result it changes nothing, as long as the sources
// still there are the oldest ones: they are the start of the file it made,
// so every line it made from the others comes after them, in order, with
// nothing an earlier source gives. That is why a restore removes its
// trash entries newest first, and only once every merge is done: a crash
// at any point leaves a state that finishing the intent turns into the
// same file, never one with an entry twice or lost.
func (t *Trash) mergeTranscript(step mergeStep) (mergeCounts, error) {
	var c mergeCounts
	FS := t.cfg.FS
	var srcs []string
	var srcInfo fs.FileInfo
	for _, s := range step.Srcs {
		fi, err := FS.Lstat(s)
		if errors.Is(err, fs.ErrNotExist) {
			continue // merged and removed before a crash
		}
		if err != nil {
			return c, fmt.Errorf("restore into %s: %w", step.Dst, errdefs.FromIO(err))
		}
		srcs, srcInfo = append(srcs, s), fi
	}
	if len(srcs) == 0 {
		return c, nil
	}
	attrs := srcInfo // a file made anew takes the newest copy's mode and owner
	live := false
	dstInfo, err := FS.Lstat(step.Dst)
	switch {
	case err == nil && !dstInfo.Mode().IsRegular():
		return c, fmt.Errorf("%s is not a regular file (%s); sessiond never writes through links or over folders: move it away: %w", step.Dst, dstInfo.Mode().Type(), errdefs.ErrUnsafePath)
	case err == nil:
		srcs, attrs, live = append(srcs, step.Dst), dstInfo, true
	case !errors.Is(err, fs.ErrNotExist):
		return c, fmt.Errorf("restore into %s: %w", step.Dst, errdefs.FromIO(err))
	}
	dir := filepath.Dir(step.Dst)
	if err := fsys.MkdirAll(FS, dir, 0o700); err != nil {
		return c, fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	tmpPath := t.tempName(step.Dst)
	if err := t.writeMerged(tmpPath, srcs, live, attrs, &c); err != nil {
		FS.Remove(tmpPath)
		return c, fmt.Errorf("restore into %s: %w", step.Dst, errdefs.FromIO(err))
	}
	if err := FS.Rename(tmpPath, step.Dst); err != nil {
		FS.Remove(tmpPath)
		return c, fmt.Errorf("restore into %s: %w", step.Dst, errdefs.FromIO(err))
	}
	if err := FS.SyncDir(dir); err != nil {
		return c, fmt.Errorf("restore into %s: %w", step.Dst, errdefs.FromIO(err))
	}
	return c, nil
}

// writeMerged writes the merge of srcs (the last one the live file when
// lastLive) to a new file at path, synced, with attrs' mode and owner.
func (t *Trash) writeMerged(path string, srcs []string, lastLive bool, attrs fs.FileInfo, c *mergeCounts) error {
	FS := t.cfg.FS
	tmp, err := FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer tmp.Close()
	if err := fsys.KeepAttrs(tmp, attrs); err != nil {
		return err
	}
	w := bufio.NewWriterSize(tmp, 256<<10)
	seen := map[string]bool{}
	for i, src := range srcs {
		live := lastLive && i == len(srcs)-1
		mine := map[string]bool{}
		err := scanLines(FS, src, func(line []byte) error {
			k := mergeKey(line)
			if seen[k] {
				c.dropped++
				return nil
			}
			mine[k] = true
			if !live {
				c.restored++
			}
			w.Write(line)
			return w.WriteByte('\n') // a torn last line stays a line of its own
		})
		if err != nil {
			return err
		}
		for k := range mine {
			seen[k] = true
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return tmp.Close()
}

// scanLines calls fn with each line of the file at path (without its
// newline).
func scanLines(FS fsys.FS, path string, fn func(line []byte) error) error {
	f, err := FS.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := transcript.NewLineScannerAt(f)
	for sc.Scan() {
		if err := fn(sc.Line()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// tempName is where the merge into dst is written before its rename.
func (t *Trash) tempName(dst string) string {
	if t.cfg.TempName != nil {
		return t.cfg.TempName(dst)
	}
	return filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".merge-"+uuid.NewString()[:8]+".tmp")
}
