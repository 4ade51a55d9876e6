package writer

import (
	"errors"
	"hash/crc32"
	"io"
	"path/filepath"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/health"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/space"
)

// tailWindow is how much of a canonical file's end its fingerprint covers.
const tailWindow = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fingerprint identifies a canonical file's content cheaply: its size and a
// checksum of its last bytes. A file "has" a fingerprint when it is at
// least that long and those bytes match, i.e. when the fingerprinted
// content is a prefix of it.
type fingerprint struct {
	size int64
	tail uint32
}

type pendingEntry struct {
	span span
	size int    // line bytes without newline
	uuid string // "" for an entry without uuid
	// foreign: a line another program appended to the file during a
	// compaction's rename, rescued into the journal (foreign.go): never
	// acknowledged to anyone, so not in the ledger (package ledger).
	foreign bool
}

// deps are what a session's state needs from the manager that runs it,
// handed in as one small struct so that the state reaches nothing else of
// the manager. The manager embeds them too (they are its as well).
type deps struct {
	cfg   Config
	logs  *logStore // the sessions' journals (journal.go)
	ix    *index.Index
	stats counters
	// ledger keeps the entries each transcript was given, and what
	// another program's rewrite dropped of them (package ledger).
	ledger *ledger.Store
	// lineages hands out the states' lineages: a new one whenever lines
	// already served may have moved.
	lineages atomic.Uint64
	// temps lists each folder's leftover temp files once (temps.go).
	temps staleTemps
	// space is how the writers ride out a full disk (package space);
	// health keeps the recovery failures (package health).
	space  *space.Space
	health *health.Health
	// compactSlots holds a token per compaction running
	// (Config.CompactParallel bounds them).
	compactSlots chan struct{}
	// heldSlots holds a token per replaced file held open (foreign.go),
	// all sessions together; leaseNoted: that the filesystem takes no
	// leases was logged.
	heldSlots  chan struct{}
	leaseNoted atomic.Bool
}

// state is everything the writer goroutine owns. Nothing else touches it.
type state struct {
	*deps
	fs  fsys.FS
	log *zap.Logger
	key layout.Key

	canonPath string
	dir       string
	j         sessionLog // nil until the session logs its first entry

	// abort closes when the time for a clean stop is over: a compaction
	// still waiting for a slot gives up (nil outside a session's writer).
	abort <-chan struct{}
	// slotHeld: the writer's loop took a compaction slot itself
	// (session.run's idle work), so compactInSlot does not wait for one.
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
	held     fsys.File
	heldOff  int64       // how much of held is accounted for
	heldBase fingerprint // what held held when the compaction copied it
	heldSlot bool        // held has one of heldSlots
	rescueAt int64       // offset in the canonical file for rescued lines, -1: none
}

func newState(d *deps, key layout.Key, log *zap.Logger) *state {
	canon := d.cfg.Layout.TranscriptPath(key)
	st := &state{
		deps: d, fs: d.cfg.FS, log: log, key: key,
		canonPath: canon,
		dir:       filepath.Dir(canon),
		ids:       newIDSet(),
		changed:   make(chan struct{}),
		rescueAt:  -1,
	}
	st.acked = d.ledger.Book(key, log, st.keepDamaged)
	return st
}

func (st *state) exists() bool { return st.canonExists || len(st.pending) > 0 }

func (st *state) totalEntries() uint64 { return st.canonEntries + uint64(len(st.pending)) }

func tailCRC(r io.ReaderAt, size int64) (uint32, error) {
	n := int64(tailWindow)
	if size < n {
		n = size
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-n); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return 0, err
	}
	return crc32.Checksum(buf, castagnoli), nil
}

// publish hands a copy of the listing entry to the index.
func (st *state) publish() {
	if st.ent != nil {
		st.ent.Pending = uint64(len(st.pending))
		st.ent.Absent = !st.exists()
		st.ix.Put(*st.ent)
	}
}

// release publishes the final entry with the files' stamp, as the writer
// closes: from now on the index checks the files for foreign changes.
func (st *state) release() {
	if st.ent == nil || !st.scanned {
		return
	}
	e := *st.ent
	if st.failed != nil {
		// What this writer saw may not be what is on disk: let the index
		// rebuild the entry from the files.
		e.Stamp, e.ModifiedMs = index.Stamp{}, 0
		st.ix.Release(e)
		return
	}
	e.Stamp, e.ModifiedMs = st.Stamp(st.key)
	st.ix.Release(e)
}

func (st *state) notifyChange() {
	st.wakeFollowers()
	st.noteChange()
}

// wakeFollowers wakes the readers that follow the transcript (tail -f):
// they read again, from this writer or the next.
func (st *state) wakeFollowers() {
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *state) closeFiles() {
	st.dropHeld()
	if st.j != nil {
		st.j.close()
		st.j = nil
	}
}
