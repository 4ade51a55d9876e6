package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// What sessiond does when a transcript lacks entries it acknowledged: it
// says so, never merges them away in silence. The writer compares the
// ledger with the transcript when it opens the session (when the file is
// no longer the one the ledger's last record names), when it finds the
// file rewritten by another program (not just appended to) before a
// compaction, and at every check. A finding is logged, listed in Status
// (Store.Missing) and noted in <state>/missing/ (layout.MissingPath), so
// the list survives a restart, until repair puts the entries back.

// maxMissingListed bounds the uuids a finding carries.
const maxMissingListed = 10000

// MissingInfo is a transcript found lacking entries sessiond had
// acknowledged.
type MissingInfo struct {
	Key   layout.Key
	Count int
	// IDs are the missing entries' uuids (content:<digest> for entries
	// without one), in acknowledged order; at most maxMissingListed.
	IDs        []string `json:"ids"`
	DetectedMs int64    `json:"detected_ms"`
}

// note is the file in <state>/missing/.
type note struct {
	Count      int      `json:"count"`
	IDs        []string `json:"ids"`
	DetectedMs int64    `json:"detected_ms"`
}

// registry holds the findings, for Status.
type registry struct {
	mu sync.Mutex
	m  map[layout.Key]MissingInfo
}

func (r *registry) put(in MissingInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[layout.Key]MissingInfo{}
	}
	r.m[in.Key] = in
}

func (r *registry) drop(k layout.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[k]
	delete(r.m, k)
	return ok
}

func (r *registry) get(k layout.Key) (MissingInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.m[k]
	return in, ok
}

func (r *registry) all() []MissingInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]MissingInfo, 0, len(r.m))
	for _, in := range r.m {
		all = append(all, in)
	}
	return all
}

func zapSession(k layout.Key) zap.Field { return zap.Stringer("session", k) }

// Missing lists the transcripts found lacking entries sessiond had
// acknowledged, in key order; not those deleted since (their finding comes
// back if they are restored and still lack them).
func (s *Store) Missing() []MissingInfo {
	all := s.missing.all()
	out := all[:0]
	for _, in := range all {
		// Only a transcript that is gone drops out: one that cannot be
		// looked at still lacks the entries.
		if _, err := s.fs.Lstat(s.layout.TranscriptPath(in.Key)); !errors.Is(err, fs.ErrNotExist) {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.Less(out[j].Key) })
	return out
}

// LoadMissing lists the notes left in <state>/missing/ by the processes
// before this one. It returns what it could not read: status would
// otherwise say nothing is missing from those transcripts until their
// writers open and compare again. A note that does not decode is said at
// Error level and left in place (the next finding for its transcript
// replaces it).
func (s *Store) LoadMissing() []error {
	var errs []error
	err := walkFiles(s.fs, s.layout.MissingDir(), func(path string) {
		if !strings.HasSuffix(path, layout.MissingExt) {
			return
		}
		if k, ok := s.layout.ParseMissingPath(path); ok {
			if err := s.loadNote(path, k); err != nil {
				errs = append(errs, unreadable("the note of entries missing from "+k.String(), err))
			}
		}
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, unreadable("the notes of missing entries in "+s.layout.MissingDir(), err))
	}
	return errs
}

// loadNote puts the note at path, of k, in the registry.
func (s *Store) loadNote(path string, k layout.Key) error {
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		return err
	}
	var n note
	if err := json.Unmarshal(b, &n); err != nil || n.Count <= 0 {
		s.log.Error("the note of entries missing from a transcript is damaged; status lists them again once its writer compares the transcript with its ledger",
			zap.String("path", path), zapSession(k), zap.Error(err))
		return nil
	}
	s.missing.put(MissingInfo{Key: k, Count: n.Count, IDs: n.IDs, DetectedMs: n.DetectedMs})
	return nil
}

// walkFiles calls fn with every file under dir, folders first met first.
func walkFiles(fsy fsys.FS, dir string, fn func(path string)) error {
	ents, err := fsy.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		if !d.IsDir() {
			fn(p)
			continue
		}
		if err := walkFiles(fsy, p, fn); err != nil {
			return err
		}
	}
	return nil
}

func missingIDs(ids []ID) []string {
	out := make([]string, 0, min(len(ids), maxMissingListed))
	for _, id := range ids[:min(len(ids), maxMissingListed)] {
		out = append(out, id.String())
	}
	return out
}

// setMissing records what a comparison of key found (nil: nothing
// missing): the log, the registry and the note.
func (s *Store) setMissing(key layout.Key, log *zap.Logger, ids []ID, where string) {
	path := s.layout.MissingPath(key)
	if len(ids) == 0 {
		if s.missing.drop(key) {
			log.Info("every entry sessiond acknowledged is in the transcript again", zap.String("found_by", where))
		}
		err := s.fs.Remove(path)
		if err == nil {
			// Durable, or a power loss brings the note back, and status
			// reports entries missing that the transcript holds.
			err = s.fs.SyncDir(filepath.Dir(path))
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot remove the note of missing entries", zap.String("path", path), zap.Error(err))
		}
		return
	}
	list := missingIDs(ids)
	prev, had := s.missing.get(key)
	in := MissingInfo{Key: key, Count: len(ids), IDs: list, DetectedMs: s.clock.Now().UnixMilli()}
	if had && prev.Count == in.Count {
		in.DetectedMs = prev.DetectedMs
	}
	s.missing.put(in)
	if had && prev.Count == in.Count {
		return // logged and noted when found
	}
	log.Error("the transcript no longer holds entries sessiond acknowledged: another program rewrote it without them; `sessionctl check` lists them and `sessionctl repair` puts back those the journal still holds",
		zap.String("found_by", where), zap.Int("missing", len(ids)), zap.Strings("uuids", list[:min(len(list), 20)]))
	if err := s.writeNote(path, in); err != nil {
		log.Warn("cannot write the note of missing entries (status lists them until the next restart)", zap.String("path", path), zap.Error(err))
	}
}

func (s *Store) writeNote(path string, in MissingInfo) error {
	body, err := json.Marshal(note{Count: in.Count, IDs: in.IDs, DetectedMs: in.DetectedMs})
	if err == nil {
		err = fsys.MkdirAll(s.fs, filepath.Dir(path), 0o700)
	}
	if err == nil {
		err = fsys.WriteFileAtomic(s.fs, path, "."+filepath.Base(path)+"."+uuid.NewString()[:8]+".tmp", 0o600, func(w io.Writer) error {
			_, err := w.Write(body)
			return err
		})
	}
	return err
}

// SetMissing records what the last comparison found (nil: nothing
// missing): the log, Status and the note.
func (b *Book) SetMissing(ids []ID, where string) {
	b.missing = ids
	b.s.setMissing(b.key, b.log, ids, where)
}

// Holdings is what a transcript holds now, as its writer knows it: the
// canonical file and the entries logged but not compacted yet.
type Holdings interface {
	// Exists reports whether the canonical file exists.
	Exists() bool
	// HasPrefix reports whether the canonical file starts with the
	// content fp names.
	HasPrefix(fp Fingerprint) (bool, error)
	// HasUUID reports whether the file or a pending entry holds uuid.
	HasUUID(uuid string) bool
	// Open opens the canonical file to read.
	Open() (fsys.File, error)
	// Pending calls fn with the line of each pending entry, in order.
	Pending(fn func(line []byte)) error
}

// find compares the ledger with what h holds now. With gate, a file that
// still starts with the content the ledger's last record names, when
// nothing was missing then, is taken as whole without a comparison (the
// cheap test at open: the file was only appended to since).
func (b *Book) find(h Holdings, gate bool) ([]ID, error) {
	if !h.Exists() {
		// No file: a session deleted (its ledger waits for a restore),
		// or never compacted. Nothing to compare.
		return nil, nil
	}
	led, err := b.read()
	if err != nil {
		return nil, err
	}
	if led == nil {
		b.last = &Fingerprint{}
		return nil, nil
	}
	if led.Damaged == nil {
		last := led.Last
		b.last = &last
	}
	if !b.replayed {
		b.replay = led.Shared
	}
	if led.Damaged != nil {
		b.log.Error("the ledger of acknowledged entries is damaged; the entries it records after the damage are not compared (the next compaction keeps a copy of it)",
			zap.String("path", b.s.layout.AckedPath(b.key)), zap.Error(led.Damaged))
	}
	if len(led.IDs) == 0 {
		return nil, nil
	}
	if b.end < 0 {
		b.end = led.End
	}
	if gate && led.Missing == 0 {
		if ok, err := h.HasPrefix(led.Last); err != nil || ok {
			return nil, err
		}
	}
	if !led.content {
		// Every entry has a uuid, and the writer knows every uuid it
		// holds.
		var out []ID
		seen := map[string]bool{}
		for _, id := range led.IDs {
			if !h.HasUUID(id.uuid) && !seen[id.uuid] {
				seen[id.uuid] = true
				out = append(out, id)
			}
		}
		return out, nil
	}
	mt := newMatcher(led)
	if err := b.matchHeld(h, mt); err != nil {
		return nil, err
	}
	return mt.missing(), nil
}

// matchHeld feeds mt the lines of the canonical file, then the pending
// entries.
func (b *Book) matchHeld(h Holdings, mt *matcher) error {
	n := 0
	path := b.s.layout.TranscriptPath(b.key)
	f, err := h.Open()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	default:
		defer f.Close()
		sc := transcript.NewLineScannerAt(f)
		for sc.Scan() {
			mt.line(n, sc.Line())
			n++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
		}
	}
	err = h.Pending(func(line []byte) {
		mt.line(n, line)
		n++
	})
	if err != nil {
		return fmt.Errorf("read the journal of %s: %w", b.key, errdefs.FromIO(err))
	}
	return nil
}

// Compare compares the ledger with what h holds and records what it found
// (where names what led to it, for the log). On error it records nothing.
// With gate, a file only appended to since the ledger's last record is
// taken as whole (see find).
func (b *Book) Compare(h Holdings, gate bool, where string) error {
	ids, err := b.find(h, gate)
	if err != nil {
		return fmt.Errorf("compare the transcript of %s with the entries sessiond acknowledged: %w", b.key, err)
	}
	if len(ids) == 0 && len(b.missing) == 0 {
		if _, had := b.s.missing.get(b.key); !had {
			return nil
		}
	}
	b.SetMissing(ids, where)
	return nil
}

// Rewritten is told that another program rewrote the file (not just
// appended to it): no record may be written until CompareIfRewritten
// compared it with the ledger.
func (b *Book) Rewritten() { b.stale = true }

// CompareIfRewritten compares the file with the ledger if Rewritten said
// it was rewritten since the last comparison. Until the comparison is done
// no record may be written: it would name the rewritten file as holding
// every entry but those found missing before, and the next open would
// trust it unchecked.
func (b *Book) CompareIfRewritten(h Holdings) error {
	if !b.stale {
		return nil
	}
	if err := b.Compare(h, false, "a rewrite by another program"); err != nil {
		return err
	}
	b.stale = false
	return nil
}
