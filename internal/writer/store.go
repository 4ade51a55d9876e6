package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/sidecar"
)

const (
	// BatchIDMemory is how long a transcript remembers the id of a batch it
	// stored: far longer than the SDKs retry an append (three tries within
	// a 60 s timeout) or a daemon takes to restart.
	BatchIDMemory = 10 * time.Minute
	// maxBatchIDs bounds the ids one transcript remembers (the oldest go
	// first); a transcript taking more than this many batches in
	// BatchIDMemory is far busier than any agent.
	maxBatchIDs = 4096
	// MaxSummaryBytes bounds a session's summary; the SDK's are a few
	// hundred bytes, and it rides in every batch's Meta record.
	MaxSummaryBytes = 32 << 10
	maxBatchIDLen   = 128
)

// AppendOptions are the SessionStore parts of an append.
type AppendOptions struct {
	// BatchID, when set, makes a resent batch a no-op (DuplicateBatch).
	BatchID string
	// Summary, when set, replaces the session's summary with the batch,
	// if the session's summary is still the one it was folded from.
	Summary *SummaryUpdate
}

// SummaryUpdate is a new summary and the version it was folded from.
type SummaryUpdate struct {
	Data            []byte // one JSON object
	ExpectedVersion uint64
	// Covers, when CheckCoverage, is how many lines of the transcript the
	// summary was folded from (before its batch).
	Covers        uint64
	CheckCoverage bool
}

// validate checks the options against key before anything is queued.
func (o AppendOptions) validate(key layout.Key) error {
	if o.BatchID != "" {
		if len(o.BatchID) > maxBatchIDLen {
			return fmt.Errorf("batch_id is %d bytes, over %d; use a UUID: %w", len(o.BatchID), maxBatchIDLen, errdefs.ErrInvalidArgument)
		}
		for i := 0; i < len(o.BatchID); i++ {
			if c := o.BatchID[i]; c < 0x21 || c > 0x7e {
				return fmt.Errorf("batch_id has byte 0x%02x at offset %d; use printable ASCII without spaces, such as a UUID: %w", c, i, errdefs.ErrInvalidArgument)
			}
		}
	}
	if s := o.Summary; s != nil {
		switch {
		case key.Subpath != "":
			return fmt.Errorf("a summary belongs to a whole session, not to the subagent transcript %s; send it with the main transcript's batches: %w", key.Subpath, errdefs.ErrInvalidArgument)
		case len(s.Data) > MaxSummaryBytes:
			return fmt.Errorf("summary is %d bytes, over the %d-byte limit: %w", len(s.Data), MaxSummaryBytes, errdefs.ErrTooLarge)
		case !rawjson.WellFormedObject(s.Data):
			return fmt.Errorf("summary is not one JSON object: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// storeState is a transcript's SessionStore state, as its sidecar holds it.
type storeState struct {
	Summary        json.RawMessage  `json:"summary,omitempty"`
	SummaryVersion uint64           `json:"summary_version,omitempty"`
	SummaryMtime   int64            `json:"summary_mtime,omitempty"`   // unix ms it was stored
	SummaryEntries uint64           `json:"summary_entries,omitempty"` // lines in the transcript right after
	Batches        map[string]int64 `json:"batches,omitempty"`         // batch id -> unix ms it was stored
}

// batchMeta is a batch's journal Meta record.
type batchMeta struct {
	BatchID        string          `json:"batch_id,omitempty"`
	At             int64           `json:"at"`
	Entries        uint64          `json:"entries,omitempty"` // lines in the transcript right after the batch
	Summary        json.RawMessage `json:"summary,omitempty"`
	SummaryVersion uint64          `json:"summary_version,omitempty"`
	// Foreign marks a batch of lines another program appended, rescued
	// during a compaction (foreign.go): not acknowledged entries.
	Foreign bool `json:"foreign,omitempty"`
}

// isForeignMeta reports whether a batch's meta record marks it foreign.
func isForeignMeta(b []byte) bool {
	var m struct {
		Foreign bool `json:"foreign"`
	}
	return json.Unmarshal(b, &m) == nil && m.Foreign
}

// encode is the meta's journal record: JSON without HTML escaping, so the
// summary keeps its size (json.Marshal would turn each <, >, & and U+2028
// into six bytes and could push a 32 KiB summary past journal.MaxMeta).
func (m batchMeta) encode() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(m) // plain strings, numbers and validated JSON: cannot fail
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// seen reports whether the batch id was stored within BatchIDMemory.
func (s *storeState) seen(id string, now time.Time) bool {
	at, ok := s.Batches[id]
	return ok && now.Sub(time.UnixMilli(at)) < BatchIDMemory
}

// apply records what a committed batch's meta says.
func (s *storeState) apply(m batchMeta) {
	if m.BatchID != "" {
		if s.Batches == nil {
			s.Batches = make(map[string]int64)
		}
		s.Batches[m.BatchID] = m.At
	}
	if m.Summary != nil && m.SummaryVersion > s.SummaryVersion {
		s.Summary, s.SummaryVersion = m.Summary, m.SummaryVersion
		s.SummaryMtime, s.SummaryEntries = m.At, m.Entries
	}
}

// prune forgets batch ids older than BatchIDMemory, and the oldest beyond
// maxBatchIDs.
func (s *storeState) prune(now time.Time) {
	for id, at := range s.Batches {
		if now.Sub(time.UnixMilli(at)) >= BatchIDMemory {
			delete(s.Batches, id)
		}
	}
	for len(s.Batches) > maxBatchIDs {
		oldest, first := "", int64(0)
		for id, at := range s.Batches {
			if oldest == "" || at < first || (at == first && id < oldest) {
				oldest, first = id, at
			}
		}
		delete(s.Batches, oldest)
	}
}

func (s *storeState) summary() index.StoreSummary {
	return index.StoreSummary{Data: s.Summary, Version: s.SummaryVersion, MtimeMs: s.SummaryMtime, Entries: s.SummaryEntries}
}

func (s *storeState) empty() bool { return s.SummaryVersion == 0 && len(s.Batches) == 0 }

// readStore reads key's store sidecar. A missing one is an empty state. One
// that cannot be read fails with unreadable's error: the session must not
// open without the batch ids it remembers (a resent batch would be stored
// twice) or its summary's version. One that does not decode is returned
// as a *damagedError with an empty state, for the caller to decide.
func readStore(FS fsys.FS, L layout.Layout, key layout.Key) (storeState, error) {
	var s storeState
	path := L.StorePath(key)
	f, err := FS.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, unreadable("the store sidecar of "+key.String(), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		return s, unreadable("the store sidecar of "+key.String(), err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return storeState{}, &damagedError{path: path, body: b, err: err}
	}
	return s, nil
}

// loadStore reads the session's store sidecar for its writer. A damaged one
// is copied aside (keepDamaged) and removed, and the session starts with
// an empty summary and no batch ids: keeping the session from taking
// appends would cost more than a summary the adapter refolds (its version
// mismatch tells it to) and batch ids a client resends only within
// minutes.
func (st *state) loadStore() error {
	s, err := readStore(st.fs, st.cfg.Layout, st.key)
	var dmg *damagedError
	if errors.As(err, &dmg) {
		kept, kerr := st.keepDamaged(dmg.path, bytes.NewReader(dmg.body))
		if kerr != nil {
			return kerr
		}
		st.log.Error("the session's store sidecar is damaged; its summary and batch ids start empty (a copy is kept)",
			zap.String("path", dmg.path), zap.String("copy", kept), zap.Error(dmg.err))
		if err := st.fs.Remove(dmg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.log.Warn("cannot remove the damaged store sidecar; it is copied again at the next open", zap.String("path", dmg.path), zap.Error(err))
		}
		err = nil
	}
	if err != nil {
		return err
	}
	st.store = s
	return nil
}

// saveStore writes the store sidecar if it changed since it was read or
// last written: temp file, sync, rename, folder sync.
func (st *state) saveStore() error {
	if !st.storeDirty {
		return nil
	}
	st.store.prune(st.cfg.Clock.Now())
	path := st.cfg.Layout.StorePath(st.key)
	if st.store.empty() {
		if err := st.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove store sidecar of %s: %w", st.key, errdefs.FromIO(err))
		}
		st.storeDirty = false
		return nil
	}
	body, err := json.Marshal(&st.store)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
	}
	// A temp name of its own each time: a crash may have left the last
	// one (open removes those).
	tmp := sidecar.TempPrefix(path) + uuid.NewString()[:8] + ".tmp"
	err = fsys.WriteFileAtomic(st.fs, path, tmp, 0o600, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return fmt.Errorf("write store sidecar of %s: %w", st.key, errdefs.FromIO(err))
	}
	st.storeDirty = false
	return nil
}

// applyMetas replays the Meta records of recovered batches.
func (st *state) applyMetas(metas [][]byte) {
	for _, b := range metas {
		var m batchMeta
		if err := json.Unmarshal(b, &m); err != nil {
			// The record passed its checksum, so this is a bug or a
			// future format: keep the entries, skip what it says.
			st.log.Warn("unreadable batch meta record in the journal; skipped", zap.Error(err))
			continue
		}
		if m.Foreign {
			continue // says nothing about the store
		}
		st.store.apply(m)
		st.storeDirty = true
	}
	st.publishSummary()
}

// publishSummary copies the summary into the listing entry.
func (st *state) publishSummary() {
	if st.ent != nil {
		st.ent.Store = st.store.summary()
	}
}

// coverageConflict is the error of an append whose summary was folded from
// fewer (or more) lines than the transcript holds.
func coverageConflict(key layout.Key, covers, lines uint64) error {
	return fmt.Errorf("the summary of %s was folded from %d lines, the transcript holds %d (lines were added without a summary); nothing was stored: fold the whole transcript and send again: %w",
		key, covers, lines, errdefs.ErrConflict)
}

// summaryConflict is the error of an append whose summary was folded from
// another version than the session's.
func summaryConflict(key layout.Key, expected, current uint64) error {
	return fmt.Errorf("the summary of %s is at version %d, this append's was folded from version %d (another process appended meanwhile); nothing was stored: fold onto the current summary and send again: %w",
		key, current, expected, errdefs.ErrConflict)
}
