package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Change tells Config.Changed that a transcript changed: entries were
// acknowledged, lines moved (a repair, lines another program wrote), the
// session left for the trash or came back from it, or one of its
// sidecars was written. It says what changed, not how: a watcher reads
// the transcript again (ReadLines).
type Change struct {
	Key layout.Key
	// Entries and Bytes are what the transcript holds now, acknowledged
	// entries not compacted yet included (Bytes as the file will be once
	// they are); 0 with Gone or Family.
	Entries uint64
	Bytes   int64
	// Added is how many entries were acknowledged since the last Change
	// of this writer (a watcher that does not know yet how far it is
	// behind counts them).
	Added uint64
	// Lineage is the writer's lineage, as ReadLines serves it: when it
	// differs from the one a watcher last read under, lines it read may
	// have moved (a repair, another program's rewrite, a writer opening
	// the file), even though the number of entries may be the same. 0
	// with Gone, Family or Sidecars.
	Lineage uint64
	// Gone: the transcript went to the trash (or was purged); for a main
	// key, with every subagent transcript of its session.
	Gone bool
	// Family: a restore brought back or merged the session's transcripts
	// (for a main key, its subagents' too).
	Family bool
	// Sidecars: one of the session's sidecars (sidecar.Names: the
	// archive mark, the title file) was written; Key is the main key.
	Sidecars bool
}

// tell tells Config.Changed about c. It must not block: the writer
// goroutines and deletes call it.
func (d *deps) tell(c Change) {
	if d.cfg.Changed != nil {
		d.cfg.Changed(c)
	}
}

// arenas holds ReadLines' arenas (none grows past sendBytes plus a line
// under bigLine).
var arenas = sync.Pool{New: func() any { return new([]byte) }}

// noteChange tells Config.Changed what st holds now.
func (st *state) noteChange() {
	if st.cfg.Changed == nil {
		return
	}
	bytes := st.canon.size + st.pendingBytes
	if !st.canonEndsNL && st.canonExists && len(st.pending) > 0 {
		bytes++
	}
	st.tell(Change{Key: st.key, Entries: st.totalEntries(), Bytes: bytes, Added: st.unnoted, Lineage: st.lineage})
	st.unnoted = 0
}

// ReadLines serves key's entries from index from, in order, as Read does
// without Follow, and says which lineage the content it served has: the
// lines before from are still where they were, byte for byte, when it
// is under (the lineage changes whenever they may have moved: a repair,
// lines another program wrote, a writer opening the file). A caller that
// read them before under that lineage need not read them again: it passes
// it as under, and when the content's lineage is another (or 0: no
// writer was open and the file was read as it is, with no such promise),
// every entry is served from index 0 instead, for the caller to check
// them. Under 0 serves from from, whatever the lineage. total is the
// number of entries the transcript holds. A session without a writer or journal is read
// straight from its file, so reading every transcript (the mirror's scan
// at start) starts no writers. The entries handed to send are valid only
// during the call: their memory is used again.
func (m *Manager) ReadLines(ctx context.Context, key layout.Key, from, under uint64, send func([]Entry) error) (lineage, total uint64, err error) {
	if err := key.Validate(); err != nil {
		return 0, 0, err
	}
	if !m.existsOnDisk(key) {
		return 0, 0, m.notFound(key)
	}
	r := reader{next: from, send: send}
	// The batch is gathered in a reused arena: the mirror reads a few
	// entries at a time, a new arena each time cost more than the reads.
	ap := arenas.Get().(*[]byte)
	r.arena = (*ap)[:0]
	defer func() {
		*ap = r.arena[:0]
		arenas.Put(ap)
	}()
	if logged := m.logs.exists(key); !logged && !m.IsActive(key) {
		if under != 0 {
			from = 0 // read as it is: no lineage vouches for what came before
		}
		path := m.cfg.Layout.TranscriptPath(key)
		f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, m.notFound(key)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
		}
		defer f.Close()
		sc := transcript.NewLineScannerAt(f)
		var idx uint64
		for ; sc.Scan(); idx++ {
			if idx >= from {
				if err := r.emit(idx, sc.Line(), false); err != nil {
					return 0, 0, err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
		}
		return 0, idx, r.flush()
	}
	var sn *snapshot
	err = m.doRetire(ctx, key, retireIfOpened, func(st *state) error {
		var err error
		sn, err = st.snapshot()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	defer sn.close()
	if !sn.exists {
		return 0, 0, m.notFound(key)
	}
	if under != 0 && under != sn.lineage {
		r.next = 0 // the lines before from may have moved since
	}
	if err := r.serve(sn); err != nil {
		return 0, 0, err
	}
	return sn.lineage, sn.canonEntries + uint64(len(sn.pending)), nil
}
