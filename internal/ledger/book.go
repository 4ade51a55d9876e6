package ledger

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Config is what a Store needs.
type Config struct {
	FS     fsys.FS
	Layout layout.Layout
	Clock  clock.Clock
	Logger *zap.Logger
}

// Store is the ledgers and the notes of missing entries under one state
// folder, and the findings Status lists. Its methods are safe for
// concurrent use; a Book is its writer's alone.
type Store struct {
	fs      fsys.FS
	layout  layout.Layout
	clock   clock.Clock
	log     *zap.Logger
	missing registry
	// failed: where the record whose append failed starts, by ledger
	// (Book.read).
	mu     sync.Mutex
	failed map[layout.Key]int64
}

// NewStore returns the Store of cfg.
func NewStore(cfg Config) *Store {
	return &Store{fs: cfg.FS, layout: cfg.Layout, clock: cfg.Clock, log: cfg.Logger}
}

// Read reads key's ledger (see Read).
func (s *Store) Read(key layout.Key) (*Ledger, error) { return Read(s.fs, s.layout, key) }

// suspect notes that an append to key's ledger at end failed: the record
// may read whole and still never reach the disk (a failed sync can leave
// pages that look written), so no writer may trust it (Book.read).
func (s *Store) suspect(key layout.Key, end int64) {
	if end < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = make(map[layout.Key]int64)
	}
	if old, ok := s.failed[key]; !ok || end < old {
		s.failed[key] = end
	}
}

// trusted forgets a failed append to key's ledger: cut, or the ledger
// removed.
func (s *Store) trusted(key layout.Key) {
	s.mu.Lock()
	delete(s.failed, key)
	s.mu.Unlock()
}

// read reads the ledger as a writer may trust it: a record whose append
// failed is cut first (synced), by this Book or by the writer before it
// (retired, or failed and reopened). What it held is then as if it was
// never written, which each record allows: the entries of a compaction
// that failed are still in the journal and recorded again, lines taken in
// from the CLI are found again past the last record (markOpenTail), and
// the writer that failed carries its shared file's operations into its
// next record. Trusted, its operations could be replayed by the next
// writer and lost at the next power loss, a line noted lost with them.
func (b *Book) read() (*Ledger, error) {
	b.s.mu.Lock()
	end, failed := b.s.failed[b.key]
	b.s.mu.Unlock()
	if failed {
		if err := b.cut(end); err != nil {
			return nil, err
		}
		b.s.trusted(b.key)
	}
	return b.s.Read(b.key)
}

// cut truncates the ledger to end, synced.
func (b *Book) cut(end int64) error {
	f, err := b.s.fs.OpenFile(b.s.layout.AckedPath(b.key), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return unreadable("the ledger of "+b.key.String(), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && fi.Size() > end {
		if err = f.Truncate(end); err == nil {
			err = f.Sync()
		}
	}
	if err != nil {
		return fmt.Errorf("cut the record whose append failed from the ledger of %s: %w", b.key, errdefs.FromIO(err))
	}
	return nil
}

// KeepFunc copies what r reads, the bytes of the damaged file at path,
// aside, and returns where.
type KeepFunc func(path string, r io.Reader) (kept string, err error)

// Book is a transcript's ledger as its writer appends to it, with what the
// writer last found missing from the transcript. Only the transcript's
// writer goroutine uses it.
type Book struct {
	s    *Store
	key  layout.Key
	log  *zap.Logger
	keep KeepFunc
	// end is where the ledger's last whole record ends, -1 until read.
	end int64
	// dropped are acknowledged entries of the journal's current stream
	// that are not pending because the file already held their uuid
	// (replay): the next compaction's record lists them too, before the
	// stream goes.
	dropped []ID
	// missing is what the last comparison with the file found missing;
	// stale says another program rewrote the file since, and the
	// comparison that followed failed: it is due before the next record.
	missing []ID
	stale   bool
	// last is the canonical file the ledger's last record names, once a
	// comparison or a record told it (nil until then).
	last *Fingerprint
	// ops: the shared file's operations not recorded yet, which the next
	// record carries (SharedOp); replay: those the ledger held when the
	// writer opened it, until it takes them (replayed).
	ops      []SharedOp
	replay   []SharedOp
	replayed bool
	// named: this Book synced the ledger's folder since the file was
	// there. A ledger a killed process created may have its name in the
	// page cache only; without a sync a power loss takes it, with every
	// record appended since.
	named bool
}

// Book returns key's ledger for its writer, which logs through log and
// keeps damaged ledgers aside through keep.
func (s *Store) Book(key layout.Key, log *zap.Logger, keep KeepFunc) *Book {
	return &Book{s: s, key: key, log: log, keep: keep, end: -1}
}

// Dropped notes an acknowledged entry the journal's current stream holds
// that is not pending, the file holding its uuid already: the next
// compaction records it.
func (b *Book) Dropped(id ID) { b.dropped = append(b.dropped, id) }

// HasDropped reports whether entries noted by Dropped wait for a record.
func (b *Book) HasDropped() bool { return len(b.dropped) > 0 }

// Compacted appends the record of a compaction, before its marker goes to
// the journal: ids were just compacted into a canonical file about to be
// fp, along with the entries noted by Dropped.
func (b *Book) Compacted(fp Fingerprint, ids []ID) error {
	if err := b.Append(fp, len(b.missing), append(ids, b.dropped...)); err != nil {
		return err
	}
	b.dropped = nil
	return nil
}

// Append appends one record to the ledger and syncs it: the entries ids
// were just compacted into a canonical file about to be fp, and missing
// were known missing.
func (b *Book) Append(fp Fingerprint, missing int, ids []ID) error {
	if b.end < 0 {
		led, err := b.read()
		if err != nil {
			return err
		}
		b.end = 0
		if led != nil {
			b.end = led.End
		}
	}
	path := b.s.layout.AckedPath(b.key)
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(b.s.fs, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	_, statErr := b.s.fs.Lstat(path)
	f, err := b.s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the ledger of %s: %w", b.key, errdefs.FromIO(err))
	}
	defer f.Close()
	rec := frame.Append(nil, ackRecord, encodeRecord(fp, missing, ids, b.ops), seed(b.key), 0)
	err = b.write(f, rec)
	if err == nil && (statErr != nil || !b.named) {
		// Once per Book, as well as at creation: a folder sync per
		// writer, not per compaction.
		if err = b.s.fs.SyncDir(dir); err == nil {
			b.named = true
		}
	}
	if err != nil {
		b.s.suspect(b.key, b.end)
		b.end = -1
		return fmt.Errorf("append to the ledger of %s: %w", b.key, errdefs.FromIO(err))
	}
	b.end += int64(len(rec))
	b.last = &fp
	b.ops = nil
	return nil
}

// NoteShared notes, for the next record, that the writer took in lines
// without uuid the agent's CLI wrote, by digest, in order: the record
// that names the file holding them carries them. The writer holds at
// most bound lines, the oldest dropped first, so of notes in a row only
// the last bound count: the first open of a long transcript the CLI
// wrote alone records no more.
func (b *Book) NoteShared(ds [][16]byte, bound int) {
	for _, d := range ds {
		b.ops = append(b.ops, SharedOp{Digest: d})
	}
	run := 0
	for run < len(b.ops) && !b.ops[len(b.ops)-1-run].Take {
		run++
	}
	if extra := run - bound; extra > 0 {
		start := len(b.ops) - run
		b.ops = append(b.ops[:start], b.ops[start+extra:]...)
	}
}

// TakeShared notes, for the next record, that a mirrored copy took the
// line with digest d.
func (b *Book) TakeShared(d [16]byte) { b.ops = append(b.ops, SharedOp{Take: true, Digest: d}) }

// RecordShared records the shared file's operations noted since the last
// record, synced, in a record that names the same file as the last one:
// its takes must be durable before the appends they answer are
// acknowledged, and no file past that one is known to hold only what the
// ledger says (a record while Rewritten waits for its comparison names
// the file before the rewrite, as the last one did, which the next open
// compares). With no record known yet, they wait for the next one.
func (b *Book) RecordShared() error {
	if len(b.ops) == 0 || b.last == nil {
		return nil
	}
	return b.Append(*b.last, len(b.missing), nil)
}

// ReplayShared returns, once, the shared file's operations the ledger held
// when the writer opened it (the comparison at open reads them), in the
// order they were recorded; nil after the first call.
func (b *Book) ReplayShared() []SharedOp {
	ops := b.replay
	b.replay, b.replayed = nil, true
	return ops
}

// Absorbed records that the canonical file is fp now, grown by lines
// another program appended that the writer took in, no entry of sessiond's
// among them: the next open finds what that program appended since
// (LastRecorded) without taking these lines for new ones.
func (b *Book) Absorbed(fp Fingerprint) error {
	if b.stale {
		return nil // no record before the rewrite is compared (CompareIfRewritten)
	}
	return b.Append(fp, len(b.missing), nil)
}

// LastRecorded is the canonical file the ledger's last record names (the
// zero Fingerprint when there is no ledger), once a comparison at open or
// a record told it; known is false before.
func (b *Book) LastRecorded() (fp Fingerprint, known bool) {
	if b.last == nil {
		return Fingerprint{}, false
	}
	return *b.last, true
}

// write writes rec, synced, right after the last whole record of f.
func (b *Book) write(f fsys.File, rec []byte) error {
	fi, err := f.Stat()
	if err == nil && fi.Size() > b.end {
		// What follows the last whole record is cut: a record never
		// synced whole, or damage, whose bytes are kept first.
		if err := b.keepDamage(f, fi.Size()); err != nil {
			return err
		}
		err = f.Truncate(b.end)
	}
	if err == nil {
		_, err = f.Seek(b.end, io.SeekStart)
	}
	if err == nil {
		err = frame.WriteSynced(f, rec, b.end)
	}
	return err
}

// keepDamage copies the ledger f (size bytes) aside before Append cuts
// what follows its last whole record, when that is not a torn last record
// but damage: the records after it, and a newer release's, are
// acknowledged entries a human may still want to count.
func (b *Book) keepDamage(f fsys.File, size int64) error {
	led, err := b.s.Read(b.key)
	if err != nil {
		return err
	}
	if led == nil || led.Damaged == nil || led.End != b.end {
		return nil
	}
	path := b.s.layout.AckedPath(b.key)
	kept, err := b.keep(path, io.NewSectionReader(f, 0, size))
	if err != nil {
		return err
	}
	b.log.Error("the ledger of acknowledged entries is damaged; what follows its last whole record is cut, and a copy of it is kept",
		zap.String("path", path), zap.String("copy", kept), zap.Int64("whole_up_to", b.end), zap.Error(led.Damaged))
	return nil
}

// Reset removes the ledger of a transcript that is made anew: a ledger
// found then is an earlier transcript's at the same key, deleted, whose
// entries the new one never held.
func (b *Book) Reset() error {
	if err := b.s.fs.Remove(b.s.layout.AckedPath(b.key)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			b.s.trusted(b.key)
			b.end = 0
			return nil
		}
		return fmt.Errorf("remove the ledger of an earlier transcript at %s: %w", b.key, errdefs.FromIO(err))
	}
	b.log.Info("the transcript is new; the ledger of an earlier one at this key was removed")
	b.s.trusted(b.key)
	b.end = 0
	return nil
}
