package writer

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

// What sessiond does when a transcript lacks entries it acknowledged (see
// acked.go): it says so, never merges them away in silence. The writer
// compares the ledger with the transcript when it opens the session (when
// the file is no longer the one the ledger's last record names), when it
// finds the file rewritten by another program (not just appended to) before
// a compaction, and at every check. A finding is logged, listed in Status
// (Manager.Missing) and noted in <state>/missing/ (layout.MissingPath), so
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

// missingNote is the file in <state>/missing/.
type missingNote struct {
	Count      int      `json:"count"`
	IDs        []string `json:"ids"`
	DetectedMs int64    `json:"detected_ms"`
}

// missingRegistry holds the findings, for Status.
type missingRegistry struct {
	mu sync.Mutex
	m  map[layout.Key]MissingInfo
}

func (r *missingRegistry) put(in MissingInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[layout.Key]MissingInfo{}
	}
	r.m[in.Key] = in
}

func (r *missingRegistry) drop(k layout.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[k]
	delete(r.m, k)
	return ok
}

func (r *missingRegistry) get(k layout.Key) (MissingInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.m[k]
	return in, ok
}

// Missing lists the transcripts found lacking entries sessiond had
// acknowledged, in key order; not those deleted since (their finding
// comes back if they are restored and still lack them).
func (m *Manager) Missing() []MissingInfo {
	m.missing.mu.Lock()
	all := make([]MissingInfo, 0, len(m.missing.m))
	for _, in := range m.missing.m {
		all = append(all, in)
	}
	m.missing.mu.Unlock()
	out := all[:0]
	for _, in := range all {
		// Only a transcript that is gone drops out: one that cannot be
		// looked at still lacks the entries.
		if _, err := m.cfg.FS.Lstat(m.cfg.Layout.TranscriptPath(in.Key)); !errors.Is(err, fs.ErrNotExist) {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.Less(out[j].Key) })
	return out
}

// loadMissing lists the notes left in <state>/missing/ by the processes
// before this one. It returns what it could not read: status would
// otherwise say nothing is missing from those transcripts until their
// writers open and compare again. A note that does not decode is said at
// Error level and left in place (the next finding for its transcript
// replaces it).
func (m *Manager) loadMissing() []error {
	L := m.cfg.Layout
	var errs []error
	err := walk(m.cfg.FS, L.MissingDir(), func(path string, d fs.DirEntry) error {
		if d.IsDir() || !strings.HasSuffix(path, layout.MissingExt) {
			return nil
		}
		k, ok := L.ParseMissingPath(path)
		if !ok {
			return nil
		}
		f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			errs = append(errs, unreadable("the note of entries missing from "+k.String(), err))
			return nil
		}
		defer f.Close()
		var n missingNote
		b, err := io.ReadAll(io.LimitReader(f, 4<<20))
		if err != nil {
			errs = append(errs, unreadable("the note of entries missing from "+k.String(), err))
			return nil
		}
		if err := json.Unmarshal(b, &n); err != nil || n.Count <= 0 {
			m.log.Error("the note of entries missing from a transcript is damaged; status lists them again once its writer compares the transcript with its ledger",
				zap.String("path", path), zap.Stringer("session", k), zap.Error(err))
			return nil
		}
		m.missing.put(MissingInfo{Key: k, Count: n.Count, IDs: n.IDs, DetectedMs: n.DetectedMs})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, unreadable("the notes of missing entries in "+L.MissingDir(), err))
	}
	return errs
}

func missingIDs(ids []ackID) []string {
	out := make([]string, 0, min(len(ids), maxMissingListed))
	for _, id := range ids[:min(len(ids), maxMissingListed)] {
		out = append(out, id.String())
	}
	return out
}

// setMissing records what the last comparison found (nil: nothing
// missing): the journal, the registry and the note.
func (st *state) setMissing(ids []ackID, where string) {
	st.missingIDs = ids
	path := st.cfg.Layout.MissingPath(st.key)
	if len(ids) == 0 {
		if st.missing.drop(st.key) {
			st.log.Info("every entry sessiond acknowledged is in the transcript again", zap.String("found_by", where))
		}
		if err := st.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.log.Warn("cannot remove the note of missing entries", zap.String("path", path), zap.Error(err))
		}
		return
	}
	list := missingIDs(ids)
	prev, had := st.missing.get(st.key)
	in := MissingInfo{Key: st.key, Count: len(ids), IDs: list, DetectedMs: st.cfg.Clock.Now().UnixMilli()}
	if had && prev.Count == in.Count {
		in.DetectedMs = prev.DetectedMs
	}
	st.missing.put(in)
	if had && prev.Count == in.Count {
		return // logged and noted when found
	}
	st.log.Error("the transcript no longer holds entries sessiond acknowledged: another program rewrote it without them; `sessionctl check` lists them and `sessionctl repair` puts back those the journal still holds",
		zap.String("found_by", where), zap.Int("missing", len(ids)), zap.Strings("uuids", list[:min(len(list), 20)]))
	body, err := json.Marshal(missingNote{Count: in.Count, IDs: list, DetectedMs: in.DetectedMs})
	if err == nil {
		err = fsys.MkdirAll(st.fs, filepath.Dir(path), 0o700)
	}
	if err == nil {
		err = fsys.WriteFileAtomic(st.fs, path, "."+filepath.Base(path)+"."+uuid.NewString()[:8]+".tmp", 0o600, func(w io.Writer) error {
			_, err := w.Write(body)
			return err
		})
	}
	if err != nil {
		st.log.Warn("cannot write the note of missing entries (status lists them until the next restart)", zap.String("path", path), zap.Error(err))
	}
}

// findMissing compares the session's ledger with what it holds now: the
// canonical file and the pending entries. With gate, a file that still
// starts with the content the ledger's last record names, when nothing
// was missing then, is taken as whole without a comparison (the cheap
// test at open: the file was only appended to since).
func (st *state) findMissing(gate bool) ([]ackID, error) {
	if !st.canonExists {
		// No file: a session deleted (its ledger waits for a restore),
		// or never compacted. Nothing to compare.
		return nil, nil
	}
	led, err := readLedger(st.fs, st.cfg.Layout, st.key)
	if err != nil || led == nil {
		return nil, err
	}
	if led.damaged != nil {
		st.log.Error("the ledger of acknowledged entries is damaged; the entries it records after the damage are not compared (the next compaction keeps a copy of it)",
			zap.String("path", st.cfg.Layout.AckedPath(st.key)), zap.Error(led.damaged))
	}
	if len(led.ids) == 0 {
		return nil, nil
	}
	if st.ackEnd < 0 {
		st.ackEnd = led.end
	}
	if gate && led.missing == 0 {
		if ok, err := st.hasPrefix(led.last); err != nil || ok {
			return nil, err
		}
	}
	if !led.content {
		// Every entry has a uuid, and the writer knows every uuid it
		// holds.
		var out []ackID
		seen := map[string]bool{}
		for _, id := range led.ids {
			if !st.ids.has(id.uuid) && !seen[id.uuid] {
				seen[id.uuid] = true
				out = append(out, id)
			}
		}
		return out, nil
	}
	mt := newAckMatcher(led)
	n := 0
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	default:
		defer f.Close()
		sc := transcript.NewLineScannerAt(f)
		for sc.Scan() {
			mt.line(n, sc.Line())
			n++
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
		}
	}
	if len(st.pending) > 0 {
		spans := make([]span, len(st.pending))
		for i, p := range st.pending {
			spans[i] = p.span
		}
		err := st.j.read(spans, func(_ int, line []byte) error {
			mt.line(n, line)
			n++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read the journal of %s: %w", st.key, errdefs.FromIO(err))
		}
	}
	return mt.missing(), nil
}

// detectMissing runs findMissing and records what it found. It returns
// findMissing's error, having recorded nothing.
func (st *state) detectMissing(gate bool, where string) error {
	ids, err := st.findMissing(gate)
	if err != nil {
		return fmt.Errorf("compare the transcript of %s with the entries sessiond acknowledged: %w", st.key, err)
	}
	if len(ids) == 0 && len(st.missingIDs) == 0 {
		if _, had := st.missing.get(st.key); !had {
			return nil
		}
	}
	st.setMissing(ids, where)
	return nil
}
