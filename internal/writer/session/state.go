package session

import (
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/health"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/space"
	"github.com/sessiond/sessiond/internal/writer/files"
	"github.com/sessiond/sessiond/internal/writer/stream"
)

func (fp fingerprint) inJournal() journal.Fingerprint {
	return journal.Fingerprint{Size: fp.size, Tail: fp.tail}
}

func fingerprintOf(fp journal.Fingerprint) fingerprint { return fingerprint{fp.Size, fp.Tail} }

// fingerprint identifies a canonical file's content cheaply: its size and a
// checksum of its last bytes. A file "has" a fingerprint when it is at
// least that long and those bytes match, i.e. when the fingerprinted
// content is a prefix of it.
type fingerprint struct {
	size int64
	tail uint32
}

type pendingEntry struct {
	span stream.Span
	size int    // line bytes without newline
	uuid string // "" for an entry without uuid
	// foreign: a line another program appended to the file during a
	// compaction's rename, rescued into the journal (foreign.go): never
	// acknowledged to anyone, so not in the ledger (package ledger).
	foreign bool
}

// Env is what every session writer is given, and shares with the others
// and with the manager that runs them: the settings, the journal, the
// listing index, the ledger, disk space and health, the counters and the
// slots that bound compactions and held files. It reaches nothing else.
type Env struct {
	Config  Config
	Journal *stream.Journal // the sessions' streams in the journal (journal.go)
	Index   *index.Index
	Stats   Counters
	// Ledger keeps the entries each transcript was given, and what
	// another program's rewrite dropped of them (package ledger).
	Ledger *ledger.Store
	// Space is how the writers ride out a full disk (package space);
	// Health keeps the recovery failures (package health).
	Space  *space.Space
	Health *health.Health
	// CompactSlots holds a token per compaction running (its capacity
	// bounds them).
	CompactSlots chan struct{}
	// HeldSlots holds a token per replaced file held open (foreign.go),
	// all sessions together; leaseNoted: that the filesystem takes no
	// leases was logged.
	HeldSlots  files.Slots
	leaseNoted atomic.Bool
	// lineages hands out the states' lineages: a new one whenever lines
	// already served may have moved.
	lineages atomic.Uint64
	// temps lists each folder's leftover temp files once.
	temps files.StaleTemps
}

// NewEnv returns an Env of cfg whose compactions run compactParallel at
// a time; the caller sets the shared services (Journal, Index, Ledger,
// Space, Health) before the first writer starts.
func NewEnv(cfg Config, compactParallel int) *Env {
	e := &Env{Config: cfg, CompactSlots: make(chan struct{}, compactParallel), HeldSlots: files.NewSlots(maxHeld)}
	// Lineages start from the clock, not 0, so that no two Envs of one
	// process hand out the same one: a reader that outlives a Manager
	// (ReadLines' callers) must not take a new writer's file for the one
	// it read before.
	e.lineages.Store(uint64(time.Now().UnixNano()))
	return e
}

// Counters are the writers' counters since they started.
type Counters struct {
	Stored, Duplicate, JournalBytes, Compactions, CompactedBytes atomic.Uint64
}

// state is everything the writer goroutine owns. Nothing else touches it.
type State struct {
	*Env
	fs  fsys.FS
	log *zap.Logger
	key layout.Key

	canonPath string
	dir       string
	j         *stream.Stream // nil until the session logs its first entry

	// abort closes when the time for a clean stop is over: a compaction
	// still waiting for a slot gives up (nil outside a session's writer).
	abort <-chan struct{}
	// slotHeld: the writer's loop took a compaction slot itself
	// (the loop's idle work), so compactInSlot does not wait for one.
	slotHeld bool

	canonExists  bool
	canon        fingerprint // the canonical file as this writer last saw it
	canonEntries uint64
	canonEndsNL  bool // false when the file ends in a torn line

	ids          idSet
	store        sessionstore.State // summary and recent batch ids (store.go)
	storeDirty   bool               // store holds what its sidecar does not
	agentMeta    []byte             // a subagent's .meta.json from its last agent_metadata entry, not yet written
	pending      []pendingEntry
	pendingBytes int64
	// pendingSince is when the oldest of pending was journaled (or, for
	// entries a start found in the journal, when the writer opened): the
	// compaction rules bound how long it waits (staleDue).
	pendingSince time.Time

	lineage uint64 // changes when lines already served may have moved
	changed chan struct{}
	// unnoted counts the entries acknowledged since Config.Changed was
	// last told (Change.Added).
	unnoted uint64
	failed  error

	// scanned: open read the canonical file, so ent is the session's
	// entry, to hand back to the index as the writer closes (release).
	scanned        bool
	compactRetries int // compactions restarted because another writer appended

	// ent is this session's listing entry (main sessions only), kept
	// current line by line and published to the index.
	ent *index.Entry

	// acked is the transcript's ledger of acknowledged entries (acked.go).
	acked *ledger.Book

	// The file the last compaction replaced, kept open a while so that
	// lines another program appends to it late are rescued, and where
	// rescued lines go (foreign.go).
	held     files.Held
	rescueAt int64 // offset in the canonical file for rescued lines, -1: none

	// sh is what the writer knows of the lines other programs (the
	// agent's CLI) wrote into the canonical file (shared.go).
	sh sharedState
}

func newState(d *Env, key layout.Key, log *zap.Logger) *State {
	canon := d.Config.Layout.TranscriptPath(key)
	st := &State{
		Env: d, fs: d.Config.FS, log: log, key: key,
		canonPath: canon,
		dir:       filepath.Dir(canon),
		ids:       newIDSet(),
		changed:   make(chan struct{}),
		rescueAt:  -1,
		held:      files.NewHeld(d.HeldSlots),
	}
	st.acked = d.Ledger.Book(key, log, st.keepDamaged)
	return st
}

func (st *State) Exists() bool { return st.canonExists || len(st.pending) > 0 }

// Pending is how many entries the journal holds that the canonical file
// does not yet.
func (st *State) Pending() int { return len(st.pending) }

// CanonSize is the canonical file's size as the writer last saw it.
func (st *State) CanonSize() int64 { return st.canon.size }

// Book is the transcript's ledger of acknowledged entries, and Canon the
// canonical file as the writer last saw it, as the ledger records it.
func (st *State) Book() *ledger.Book { return st.acked }

func (st *State) Canon() ledger.Fingerprint { return st.canon.ledger() }

// Open loads key's session from disk as a writer does when it starts,
// for a caller that holds the session's files by other means (the trash,
// with every writer of the session stopped); Close closes its files.
func Open(env *Env, key layout.Key, log *zap.Logger) (*State, error) {
	st := newState(env, key, log)
	if err := st.open(); err != nil {
		return nil, err
	}
	return st, nil
}

func (st *State) Close() { st.closeFiles() }

func (st *State) totalEntries() uint64 { return st.canonEntries + uint64(len(st.pending)) }

// Publish hands a copy of the listing entry to the index.
func (st *State) Publish() {
	if st.ent != nil {
		st.ent.Pending = uint64(len(st.pending))
		st.ent.Absent = !st.Exists()
		st.Index.Put(*st.ent)
	}
}

// release publishes the final entry with the files' stamp, as the writer
// closes: from now on the index checks the files for foreign changes.
func (st *State) release() {
	if st.ent == nil || !st.scanned {
		return
	}
	e := *st.ent
	if st.failed != nil {
		// What this writer saw may not be what is on disk: let the index
		// rebuild the entry from the files.
		e.Stamp, e.ModifiedMs = index.Stamp{}, 0
		st.Index.Release(e)
		return
	}
	e.Stamp, e.ModifiedMs = st.Stamp(st.key)
	st.Index.Release(e)
}

func (st *State) notifyChange() {
	st.wakeFollowers()
	st.noteChange()
}

// wakeFollowers wakes the readers that follow the transcript (tail -f):
// they read again, from this writer or the next.
func (st *State) wakeFollowers() {
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *State) closeFiles() {
	st.held.Drop()
	if st.j != nil {
		st.j.Close()
		st.j = nil
	}
}

// Stamp is the stat stamp of key's files (transcript and journal) and
// their newest mtime (ms).
func (d *Env) Stamp(key layout.Key) (index.Stamp, int64) {
	var st index.Stamp
	var mod int64
	if fi, err := d.Config.FS.Lstat(d.Config.Layout.TranscriptPath(key)); err == nil {
		st.CanonSize, st.CanonMtime = fi.Size(), fi.ModTime().UnixNano()
		mod = fi.ModTime().UnixMilli()
	}
	if size, mtime, ok := d.Journal.Stat(key); ok {
		st.JournalSize, st.JournalMtime = size, mtime.UnixNano()
		if ms := mtime.UnixMilli(); ms > mod {
			mod = ms
		}
	}
	return st, mod
}
