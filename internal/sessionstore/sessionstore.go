// Package sessionstore is a transcript's SessionStore state: the batch ids
// it remembers and its summary with the summary's version, what an append
// may ask of them (AppendOptions) and the conflicts it is refused with, the
// journal record a batch carries them in (BatchMeta), and the store sidecar
// that keeps them between compactions. The writer (package writer) holds a
// session's State on its goroutine and decides when to read and write it.
package sessionstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/rawjson"
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
	// MaxFolders bounds the named summary folders one session keeps (the
	// empty folder aside): one per SDK that folds summaries, of which
	// there are three. Past it, the folder stored longest ago goes, and
	// its SDK refolds from the transcript at its next append.
	MaxFolders     = 8
	maxFolderBytes = 64
)

// AppendOptions are the SessionStore parts of an append.
type AppendOptions struct {
	// BatchID, when set, makes a resent batch a no-op (DuplicateBatch).
	BatchID string
	// Summary, when set, replaces the session's summary with the batch,
	// if the session's summary is still the one it was folded from.
	Summary *SummaryUpdate
	// SharedFile: the batch is mirrored by an agent whose CLI writes its
	// own copy of the transcript into the canonical file itself (its
	// config dir is sessiond's root). The writer takes in what the CLI
	// wrote there first, and answers the batch's entries it found there
	// as duplicates.
	SharedFile bool
}

// SummaryUpdate is a new summary and the version it was folded from.
type SummaryUpdate struct {
	Data            []byte // one JSON object
	ExpectedVersion uint64
	// Covers, when CheckCoverage, is how many lines of the transcript the
	// summary was folded from (before its batch).
	Covers        uint64
	CheckCoverage bool
	// Folder names who folded the summary (each SDK its own format): a
	// session keeps one summary per folder, each with its own version.
	Folder string
}

// Validate checks the options against key before anything is queued.
func (o AppendOptions) Validate(key layout.Key) error {
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
		if err := ValidateFolder(s.Folder); err != nil {
			return err
		}
	}
	return nil
}

// ValidateFolder checks a summary folder's name: empty, or at most 64
// bytes of [A-Za-z0-9._-], such as "claude-agent-sdk-python".
func ValidateFolder(f string) error {
	if len(f) > maxFolderBytes {
		return fmt.Errorf("summary folder is %d bytes, over %d; name the SDK that folded the summary, such as claude-agent-sdk-python: %w", len(f), maxFolderBytes, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("summary folder %q has %q at offset %d; use only letters, digits, '.', '_' and '-', such as claude-agent-sdk-python: %w", f, c, i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// State is a transcript's SessionStore state, as its sidecar holds it.
// The empty folder's summary sits at the top level, named folders'
// under Folders.
type State struct {
	Summary        json.RawMessage    `json:"summary,omitempty"`
	SummaryVersion uint64             `json:"summary_version,omitempty"`
	SummaryMtime   int64              `json:"summary_mtime,omitempty"`   // unix ms it was stored
	SummaryEntries uint64             `json:"summary_entries,omitempty"` // lines in the transcript right after
	Folders        map[string]Summary `json:"folders,omitempty"`
	Batches        map[string]int64   `json:"batches,omitempty"` // batch id -> unix ms it was stored
}

// Summary is one folder's summary: its data, version (0: none), when it
// was stored (unix ms) and the transcript's line count right after.
type Summary struct {
	Data    json.RawMessage `json:"data"`
	Version uint64          `json:"version"`
	Mtime   int64           `json:"mtime"`
	Entries uint64          `json:"entries"`
}

// SummaryOf is folder's summary (Version 0: none).
func (s *State) SummaryOf(folder string) Summary {
	if folder == "" {
		return Summary{Data: s.Summary, Version: s.SummaryVersion, Mtime: s.SummaryMtime, Entries: s.SummaryEntries}
	}
	return s.Folders[folder]
}

// setSummary stores folder's summary; a new named folder past MaxFolders
// takes the place of the one stored longest ago.
func (s *State) setSummary(folder string, sum Summary) {
	if folder == "" {
		s.Summary, s.SummaryVersion, s.SummaryMtime, s.SummaryEntries = sum.Data, sum.Version, sum.Mtime, sum.Entries
		return
	}
	if s.Folders == nil {
		s.Folders = make(map[string]Summary)
	}
	if _, ok := s.Folders[folder]; !ok && len(s.Folders) >= MaxFolders {
		oldest, at := "", int64(0)
		for f, x := range s.Folders {
			if oldest == "" || x.Mtime < at || x.Mtime == at && f < oldest {
				oldest, at = f, x.Mtime
			}
		}
		delete(s.Folders, oldest)
	}
	s.Folders[folder] = sum
}

// BatchMeta is a batch's journal Meta record.
type BatchMeta struct {
	BatchID        string          `json:"batch_id,omitempty"`
	At             int64           `json:"at"`
	Entries        uint64          `json:"entries,omitempty"` // lines in the transcript right after the batch
	Summary        json.RawMessage `json:"summary,omitempty"`
	SummaryVersion uint64          `json:"summary_version,omitempty"`
	Folder         string          `json:"folder,omitempty"` // the summary's
	// Foreign marks a batch of lines another program appended, rescued
	// during a compaction: not acknowledged entries.
	Foreign bool `json:"foreign,omitempty"`
}

// IsForeignMeta reports whether a batch's meta record marks it foreign.
func IsForeignMeta(b []byte) bool {
	var m struct {
		Foreign bool `json:"foreign"`
	}
	return json.Unmarshal(b, &m) == nil && m.Foreign
}

// Encode is the meta's journal record: JSON without HTML escaping, so the
// summary keeps its size (json.Marshal would turn each <, >, & and U+2028
// into six bytes and could push a 32 KiB summary past journal.MaxMeta).
func (m BatchMeta) Encode() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(m) // plain strings, numbers and validated JSON: cannot fail
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// Seen reports whether the batch id was stored within BatchIDMemory.
func (s *State) Seen(id string, now time.Time) bool {
	at, ok := s.Batches[id]
	return ok && now.Sub(time.UnixMilli(at)) < BatchIDMemory
}

// Apply records what a committed batch's meta says.
func (s *State) Apply(m BatchMeta) {
	if m.BatchID != "" {
		if s.Batches == nil {
			s.Batches = make(map[string]int64)
		}
		s.Batches[m.BatchID] = m.At
	}
	if m.Summary != nil && m.SummaryVersion > s.SummaryOf(m.Folder).Version {
		s.setSummary(m.Folder, Summary{Data: m.Summary, Version: m.SummaryVersion, Mtime: m.At, Entries: m.Entries})
	}
}

// Prune forgets batch ids older than BatchIDMemory, and the oldest beyond
// maxBatchIDs.
func (s *State) Prune(now time.Time) {
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

// ListingSummaries are the summaries as the listing index holds them, by
// folder (nil: none).
func (s *State) ListingSummaries() index.StoreSummaries {
	var out index.StoreSummaries
	add := func(folder string, x Summary) {
		if x.Version == 0 {
			return
		}
		if out == nil {
			out = make(index.StoreSummaries, 1+len(s.Folders))
		}
		out[folder] = index.StoreSummary{Data: x.Data, Version: x.Version, MtimeMs: x.Mtime, Entries: x.Entries}
	}
	add("", s.SummaryOf(""))
	for f, x := range s.Folders {
		add(f, x)
	}
	return out
}

// Empty reports whether there is nothing to keep: no summary, no batch id.
func (s *State) Empty() bool {
	return s.SummaryVersion == 0 && len(s.Folders) == 0 && len(s.Batches) == 0
}

// CoverageConflict is the error of an append whose summary was folded from
// fewer (or more) lines than the transcript holds.
func CoverageConflict(key layout.Key, covers, lines uint64) error {
	return fmt.Errorf("the summary of %s was folded from %d lines, the transcript holds %d (lines were added without a summary); nothing was stored: fold the whole transcript and send again: %w",
		key, covers, lines, errdefs.ErrConflict)
}

// SummaryConflict is the error of an append whose summary was folded from
// another version than the session's.
func SummaryConflict(key layout.Key, expected, current uint64) error {
	return fmt.Errorf("the summary of %s is at version %d, this append's was folded from version %d (another process appended meanwhile); nothing was stored: fold onto the current summary and send again: %w",
		key, current, expected, errdefs.ErrConflict)
}
