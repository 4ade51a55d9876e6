// Package writer owns every transcript file sessiond writes. Each session
// (one transcript: a main session or a subagent) has exactly one goroutine
// that owns its journal and canonical file; every append, flush and
// compaction of that session runs there, so writes can never interleave.
// Concurrent callers reach the goroutine through a bounded queue; it drains
// what is queued, journals it with one write and one sync (group commit),
// and only then acknowledges each caller.
package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Outcome says what happened to one appended entry.
type Outcome int

const (
	Stored Outcome = iota + 1
	Duplicate
)

// Result is the fate of one appended entry.
type Result struct {
	Outcome Outcome
	UUID    string
	Index   uint64 // position in the session, for stored entries
	Size    int    // bytes of the stored line without its newline
}

// AppendResult answers one Append.
type AppendResult struct {
	Results []Result
	Entries uint64 // entries the session holds afterwards
	// DuplicateBatch: the transcript had stored a batch with this batch
	// id; nothing was written now.
	DuplicateBatch bool
	// SummaryVersion is the session's summary version afterwards.
	SummaryVersion uint64
}

// FlushResult describes one compacted session.
type FlushResult struct {
	Key              layout.Key
	CompactedEntries uint64
	CanonicalBytes   int64
}

// Stats are the manager's counters since it started.
type Stats struct {
	ActiveSessions    int
	Appends           uint64
	EntriesStored     uint64
	EntriesDuplicate  uint64
	JournalSyncs      uint64
	JournalBytes      uint64
	Compactions       uint64
	CompactedBytes    uint64
	RecoveredSessions uint64
	// ReplayPending counts the journals found at start whose entries are
	// not in their canonical files yet (see Replay).
	ReplayPending  uint64
	RecoveryErrors []string
}

type counters struct {
	appends, stored, duplicate, syncs, journalBytes, compactions, compactedBytes, recovered atomic.Uint64
	replayPending                                                                           atomic.Int64
}

// Manager hands out session writers and keeps track of them.
type Manager struct {
	cfg Config
	log *zap.Logger

	// progress holds the long operations running (Operations).
	progress *progress.Registry

	mu       sync.Mutex
	sessions map[layout.Key]*session
	// leaving are writers out of sessions whose goroutine has not ended
	// yet: a new writer of the same key waits for the old one.
	leaving map[layout.Key]*session
	closing bool
	wg      sync.WaitGroup

	lineage atomic.Uint64
	stats   counters

	recoveryErrs []string // guarded by mu
	// busy holds the sessions whose files delete or restore is moving; no
	// writer of theirs may start meanwhile. Guarded by mu.
	busy map[family]string
	// durableEnds holds, for sessions whose journal failed a write or a
	// sync, where its last synced write ended: the next writer cuts the
	// journal back to it before appending. Guarded by mu.
	durableEnds map[layout.Key]durableEnd
	// intents holds the deletes and restores that were interrupted and
	// must be finished before their sessions take writers again. Guarded
	// by mu.
	intents map[family]*intent

	ix        *index.Index
	indexOnce sync.Once
}

// durableEnd is a journal generation and the end of its last synced write.
type durableEnd struct {
	generation uint64
	end        int64
}

func (m *Manager) noteDurableEnd(k layout.Key, d durableEnd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.durableEnds == nil {
		m.durableEnds = make(map[layout.Key]durableEnd)
	}
	m.durableEnds[k] = d
}

func (m *Manager) durableEnd(k layout.Key) (durableEnd, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.durableEnds[k]
	return d, ok
}

// forgetDurableEnd drops the note once a journal was reopened with it.
func (m *Manager) forgetDurableEnd(k layout.Key, d durableEnd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.durableEnds[k] == d {
		delete(m.durableEnds, k)
	}
}

// New returns a Manager. It creates the state folder if needed.
func New(cfg Config) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// Folders are made durable once per process, not at every compaction.
	cfg.FS = fsys.Remembering(cfg.FS)
	return &Manager{cfg: cfg, log: cfg.Logger, sessions: make(map[layout.Key]*session), leaving: make(map[layout.Key]*session), ix: index.New(),
		progress: progress.New()}, nil
}

// Config returns the configuration in force (defaults applied).
func (m *Manager) Config() Config { return m.cfg }

// Operations lists the long operations in progress: the index built at
// start, replay, checks of many transcripts, repairs.
func (m *Manager) Operations() []progress.Snapshot { return m.progress.List() }

// acquire returns the live writer of key, starting one if needed, and
// takes a reference that keeps it from retiring until release.
func (m *Manager) acquire(key layout.Key) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, fmt.Errorf("sessiond is shutting down: %w", errdefs.ErrUnavailable)
	}
	if why, ok := m.busy[familyOf(key)]; ok {
		return nil, &busyError{family: familyOf(key), why: why}
	}
	if in := m.intents[familyOf(key)]; in != nil {
		return nil, fmt.Errorf("session %s/%s: an interrupted %s must finish first; retry the %s: %w", key.ProjectKey, key.SessionID, in.Op, in.Op, errdefs.ErrUnavailable)
	}
	s := m.sessions[key]
	if s == nil {
		s = newSession(m, key)
		if old := m.leaving[key]; old != nil {
			s.prev = old.exited
		}
		m.sessions[key] = s
		m.wg.Add(1)
		go s.run()
	}
	s.refs++
	return s, nil
}

func (m *Manager) release(s *session) {
	m.mu.Lock()
	s.refs--
	m.mu.Unlock()
}

// isLive reports whether s is still the writer callers of its key reach.
func (m *Manager) isLive(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[s.key] == s
}

// follow marks key's live writer as followed, so it does not retire while
// a Follow stream waits on it; unfollow undoes it.
func (m *Manager) follow(key layout.Key) (*session, error) {
	s, err := m.acquire(key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	s.refs--
	s.followers++
	m.mu.Unlock()
	return s, nil
}

func (m *Manager) unfollow(s *session) {
	m.mu.Lock()
	s.followers--
	m.mu.Unlock()
}

// tryRemove takes s out of the map when nobody holds a reference and its
// queue is empty; after that no caller can reach it, so it may exit.
func (m *Manager) tryRemove(s *session, force bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !force && m.inUseLocked(s) {
		return false
	}
	if m.sessions[s.key] == s {
		delete(m.sessions, s.key)
		m.leaving[s.key] = s
	}
	return true
}

// inUse reports whether someone holds, follows or queues for s: a writer
// in use cannot retire.
func (m *Manager) inUse(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUseLocked(s)
}

func (m *Manager) inUseLocked(s *session) bool {
	return s.refs > 0 || s.followers > 0 || len(s.reqs) > 0 || len(s.ctrl) > 0
}

// exited is the last thing a writer goroutine does.
func (m *Manager) exited(s *session) {
	m.mu.Lock()
	if m.leaving[s.key] == s {
		delete(m.leaving, s.key)
	}
	m.mu.Unlock()
	close(s.exited)
}

// Append validates entries and stores them atomically in key's session.
// A key whose files or folders run through a symbolic link is refused
// (errdefs.ErrUnsafePath), checked once per live writer. Validation
// happens here, in the caller's goroutine, so the CPU work of many callers
// runs in parallel and the writer only deduplicates and writes.
func (m *Manager) Append(ctx context.Context, key layout.Key, raw [][]byte) (*AppendResult, error) {
	return m.AppendBatch(ctx, key, raw, AppendOptions{})
}

// AppendBatch is Append with the SessionStore options: a batch id that
// makes a resent batch a no-op, and a summary replaced with the batch.
func (m *Manager) AppendBatch(ctx context.Context, key layout.Key, raw [][]byte, opt AppendOptions) (*AppendResult, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if err := opt.validate(key); err != nil {
		return nil, err
	}
	entries := make([]transcript.Entry, len(raw))
	total := 0
	for i, r := range raw {
		e, err := transcript.Normalize(r, m.cfg.MaxEntryBytes)
		if err != nil {
			return nil, fmt.Errorf("entry %d of %d: %w", i+1, len(raw), err)
		}
		entries[i] = e
		total += len(e.Line) + 1
	}
	checked := m.pathChecked(key)
	if !checked {
		if err := m.cfg.Layout.CheckOnDisk(key); err != nil {
			return nil, err
		}
	}
	m.stats.appends.Add(1)
	req := &appendReq{reply: newReply(), opt: opt, entries: entries, bytes: total}
	err := m.submit(ctx, key, &req.reply, func(s *session) bool {
		if !checked {
			s.pathChecked.Store(true)
		}
		select {
		case s.reqs <- req:
			return true
		case <-s.exited:
		case <-ctx.Done():
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return req.res, nil
}

// pathChecked reports whether key has a live writer whose paths an
// earlier Append already checked for symbolic links.
func (m *Manager) pathChecked(key layout.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[key]
	return s != nil && s.pathChecked.Load()
}

// do runs op on key's writer goroutine and waits for it.
func (m *Manager) do(ctx context.Context, key layout.Key, op func(*state) error) error {
	return m.doRetire(ctx, key, stay, op)
}

// doRetire is do; retire says whether the writer then retires at once
// (see retireMode).
func (m *Manager) doRetire(ctx context.Context, key layout.Key, retire retireMode, op func(*state) error) error {
	if err := key.Validate(); err != nil {
		return err
	}
	// A retiring request takes the caller's reference to the writer
	// along: the writer drops it when it takes the request, so that its
	// retirement does not depend on whether this goroutine got round to
	// releasing it yet.
	c := &ctrlReq{reply: newReply(), op: op, retire: retire}
	c.passRef = retire != stay
	return m.submit(ctx, key, &c.reply, func(s *session) bool {
		select {
		case s.ctrl <- c:
			return true
		case <-s.exited:
		case <-ctx.Done():
		}
		return false
	})
}

// testHookQueued, when set by a test, runs in submit between queueing a
// request and releasing the caller's reference to the writer.
var testHookQueued atomic.Pointer[func()]

// submit hands a request to key's live writer with enqueue (which reports
// whether the writer took it) and waits for the answer. A writer that was
// exiting answers without looking at the request; it is then tried again on
// a fresh writer. Once queued, a request is always answered: the caller
// waits even when ctx ends, so it never has to guess whether it was stored.
func (m *Manager) submit(ctx context.Context, key layout.Key, r *reply, enqueue func(*session) bool) error {
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(key)
		if err != nil {
			return err
		}
		sent := enqueue(s)
		if h := testHookQueued.Load(); h != nil {
			(*h)()
		}
		if !sent || !r.passRef {
			m.release(s)
		}
		if !sent {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("request for %s not queued: %w", key, err)
			}
			if attempt > 3 {
				return fmt.Errorf("session %s writer keeps failing: %w", key, errdefs.ErrUnavailable)
			}
			continue
		}
		<-r.done
		var np *notProcessed
		if errors.As(r.err, &np) && attempt < 3 {
			pass := r.passRef
			*r = newReply()
			r.passRef = pass
			continue
		}
		return r.err
	}
}

// Flush compacts key's journal into its canonical file.
func (m *Manager) Flush(ctx context.Context, key layout.Key) (FlushResult, error) {
	return m.flush(ctx, key, stay)
}

// flush is Flush; retire says whether the writer then retires at once
// (see retireMode).
func (m *Manager) flush(ctx context.Context, key layout.Key, retire retireMode) (FlushResult, error) {
	var res FlushResult
	if err := key.Validate(); err != nil {
		return res, err
	}
	if !m.existsOnDisk(key) {
		return res, m.notFound(key)
	}
	err := m.doRetire(ctx, key, retire, func(st *state) error {
		if !st.exists() {
			return m.notFound(key)
		}
		n := uint64(len(st.pending))
		if err := st.compact("flush"); err != nil {
			return err
		}
		res = FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.canon.size}
		return nil
	})
	return res, err
}

// FlushAll compacts every session that has journaled entries: the open
// writers and the journals left by retired ones.
func (m *Manager) FlushAll(ctx context.Context) ([]FlushResult, error) {
	keys, err := m.journaledKeys()
	if err != nil {
		return nil, err
	}
	var out []FlushResult
	var errs []error
	for _, k := range keys {
		r, err := m.flush(ctx, k, retireIfOpened)
		if err != nil {
			if errdefs.Is(err, errdefs.ErrNotFound) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		if r.CompactedEntries > 0 {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// journaledKeys lists the open sessions and every session with a journal
// file on disk, sorted.
func (m *Manager) journaledKeys() ([]layout.Key, error) {
	set := make(map[layout.Key]bool)
	m.mu.Lock()
	for k := range m.sessions {
		set[k] = true
	}
	m.mu.Unlock()
	dir := m.cfg.Layout.JournalDir()
	err := walk(m.cfg.FS, dir, func(path string, d fs.DirEntry) error {
		if d.IsDir() || !strings.HasSuffix(path, ".wal") {
			return nil
		}
		if !d.Type().IsRegular() {
			// A link or other oddity planted among the journals is never
			// followed; the session it names is refused when addressed.
			m.log.Warn("ignoring a journal that is not a regular file", zap.String("path", path))
			return nil
		}
		if k, ok := m.cfg.Layout.ParseJournalPath(path); ok {
			set[k] = true
		} else {
			m.log.Warn("ignoring a file in the journal folder that is not a journal", zap.String("path", path))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list journals in %s: %w", dir, errdefs.FromIO(err))
	}
	keys := make([]layout.Key, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// RecoverReport tells what Recover did.
type RecoverReport struct {
	Checked  int     // journals checked (and torn tails cut) before serving
	Bytes    int64   // their size
	Sessions int     // journals replayed into their transcripts
	Entries  uint64  // entries moved into canonical files
	Failed   []error // sessions that could not be recovered (their journals are kept)
}

// Recover brings every journal left on disk back: CheckJournals, then
// Replay. When it returns, the files official readers see are whole and
// current.
func (m *Manager) Recover(ctx context.Context) (RecoverReport, error) {
	rep, keys, err := m.CheckJournals(ctx)
	if err != nil {
		return rep, err
	}
	r := m.Replay(ctx, keys)
	rep.Sessions, rep.Entries = r.Sessions, r.Entries
	rep.Failed = append(rep.Failed, r.Failed...)
	return rep, ctx.Err()
}

// checkWorkers is how many journals CheckJournals reads at once: the work
// is reading and checksumming, so more reads in flight than cores keep
// the disk busy.
const checkWorkers = 8

// CheckJournals is the part of recovery that must finish before sessiond
// serves. It finishes interrupted deletes and restores, removes temp files
// a crash left, and opens every journal once: every record is read and
// checked against its checksum, a torn tail is cut, a corrupt journal is
// moved aside (reported in Stats().RecoveryErrors), and the journal and
// its folder are synced, so what is served from now on is durable. The
// entries are then served from the journals; Replay moves them into the
// canonical files. It returns the sessions to replay.
func (m *Manager) CheckJournals(ctx context.Context) (RecoverReport, []layout.Key, error) {
	var rep RecoverReport
	m.sweepTemps()
	m.sweepJournalTemps()
	// Interrupted deletes and restores first: their sessions must be
	// whole in one place before anything replays into them.
	for _, err := range m.finishIntents() {
		rep.Failed = append(rep.Failed, err)
		m.noteRecoveryError(err.Error())
	}
	keys, err := m.journaledKeys()
	if err != nil {
		return rep, nil, err
	}
	ok := make([]bool, len(keys))
	sizes := make([]int64, len(keys))
	errs := make([]error, len(keys))
	parallel(ctx, checkWorkers, len(keys), func(i int) {
		ok[i], sizes[i], errs[i] = m.checkJournal(keys[i])
	})
	if err := ctx.Err(); err != nil {
		return rep, nil, err
	}
	var todo []layout.Key
	folders := make(map[string]bool)
	for i, k := range keys {
		if errs[i] != nil {
			m.log.Error("recovery of a session failed; its journal is kept", zap.Stringer("session", k), zap.Error(errs[i]))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", k, errs[i]))
			m.noteRecoveryError(fmt.Sprintf("%s: %v", k, errs[i]))
			continue
		}
		if !ok[i] {
			continue
		}
		rep.Checked++
		rep.Bytes += sizes[i]
		todo = append(todo, k)
		folders[filepath.Dir(m.cfg.Layout.JournalPath(k))] = true
	}
	// The journals were opened without their folder sync: one per folder.
	for dir := range folders {
		if err := m.cfg.FS.SyncDir(dir); err != nil {
			return rep, nil, fmt.Errorf("sync journal folder %s: %w", dir, errdefs.FromIO(err))
		}
	}
	m.stats.replayPending.Store(int64(len(todo)))
	return rep, todo, nil
}

// checkJournal opens key's journal once (see CheckJournals). ok is false
// when there is nothing to replay: no journal, or a live writer owns it
// (the writer replayed it as it opened).
func (m *Manager) checkJournal(key layout.Key) (ok bool, size int64, err error) {
	m.mu.Lock()
	_, live := m.sessions[key]
	m.mu.Unlock()
	if live {
		return true, 0, nil
	}
	j, rec, err := m.openJournal(key, true)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, 0, nil
	case err != nil:
		return false, 0, fmt.Errorf("open journal: %w", err)
	}
	if rec.TruncatedBytes > 0 {
		m.log.Warn("journal had a torn tail (entries never acknowledged); truncated",
			zap.Stringer("session", key), zap.Int64("bytes", rec.TruncatedBytes))
	}
	size = j.Size()
	return true, size, j.Close()
}

// journalOptions are the options every journal of this manager is created
// and opened with.
func (m *Manager) journalOptions() journal.Options {
	return journal.Options{MaxRecord: m.cfg.MaxEntryBytes + 1024}
}

// openJournal opens key's journal (journal.Open), first cutting it back to
// where its last synced write ended if a writer of this process saw a
// write or sync of it fail (see journal.Options.DurableEnd). With
// noFolderSync the caller syncs the journal's folder itself.
func (m *Manager) openJournal(key layout.Key, noFolderSync bool) (*journal.Journal, *journal.Recovery, error) {
	opt := m.journalOptions()
	opt.NoFolderSync = noFolderSync
	cut, hasCut := m.durableEnd(key)
	if hasCut {
		opt.DurableGeneration, opt.DurableEnd = cut.generation, cut.end
	}
	j, rec, err := journal.Open(m.cfg.FS, m.cfg.Layout.JournalPath(key), opt)
	if hasCut && (err == nil || errors.Is(err, fs.ErrNotExist)) {
		m.forgetDurableEnd(key, cut)
	}
	return j, rec, err
}

// ReplayReport tells what Replay did.
type ReplayReport struct {
	Sessions int
	Entries  uint64
	Failed   []error
}

// Replay moves the entries of the journals CheckJournals checked into
// their canonical files, a few sessions at a time. sessiond serves
// meanwhile: the entries are served from the journals until then, and a
// session written to meanwhile opens its writer (which loads the journal)
// and takes its appends after them; its turn here compacts them all
// through that writer. A writer nobody else uses retires once its session
// is replayed, so a start after a crash does not leave one writer (and
// its open files) per journal until the idle retirement.
// Stats().ReplayPending counts down to zero.
func (m *Manager) Replay(ctx context.Context, keys []layout.Key) ReplayReport {
	var (
		mu  sync.Mutex
		rep ReplayReport
	)
	op := m.progress.Start(ctx, "replay", "sessions", int64(len(keys)))
	defer op.End()
	parallel(ctx, max(2, runtime.GOMAXPROCS(0)), len(keys), func(i int) {
		k := keys[i]
		r, err := m.flush(ctx, k, retireIfDone)
		m.stats.replayPending.Add(-1)
		op.Add(1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && (errdefs.Is(err, errdefs.ErrNotFound) || ctx.Err() != nil):
			// Gone meanwhile, or sessiond is stopping: the journal stays
			// for the next start.
		case err != nil:
			m.log.Error("recovery of a session failed; its journal is kept", zap.Stringer("session", k), zap.Error(err))
			rep.Failed = append(rep.Failed, fmt.Errorf("%s: %w", k, err))
			m.noteRecoveryError(fmt.Sprintf("%s: %v", k, err))
		default:
			rep.Sessions++
			rep.Entries += r.CompactedEntries
			m.stats.recovered.Add(1)
		}
	})
	return rep
}

// parallel calls fn(i) for i in [0, n) on up to workers goroutines, and
// stops handing out indexes once ctx ends.
func parallel(ctx context.Context, workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func (m *Manager) noteRecoveryError(msg string) {
	m.mu.Lock()
	m.recoveryErrs = append(m.recoveryErrs, msg)
	m.mu.Unlock()
}

// sweepJournalTemps removes the temp files of journal generations a crash
// cut short. A writer sweeps its own when it opens, but a crash during the
// very first generation of a session leaves a temp file and no journal, so
// no writer of that session is ever opened by recovery to sweep it. Temp
// files of sessions with a live writer are left alone: that writer may be
// creating one right now.
func (m *Manager) sweepJournalTemps() {
	dir := m.cfg.Layout.JournalDir()
	walk(m.cfg.FS, dir, func(path string, d fs.DirEntry) error {
		name := d.Name()
		i := strings.Index(name, layout.JournalExt+".tmp-")
		if !d.Type().IsRegular() || i <= 0 {
			return nil
		}
		k, ok := m.cfg.Layout.ParseJournalPath(filepath.Join(filepath.Dir(path), name[:i+len(layout.JournalExt)]))
		if ok && m.IsActive(k) {
			return nil
		}
		if err := m.cfg.FS.Remove(path); err == nil {
			m.log.Info("removed a temp file left by a crash", zap.String("file", path))
		}
		return nil
	})
}

// sweepTemps removes the temp files a crash left in the project folders
// and the session folders below them (compaction, repair and fork temps;
// archive marks being replaced) and in the kept copies of repaired
// originals. It runs first thing in Recover, which runs at start before
// sessiond serves: no writer can be making one.
func (m *Manager) sweepTemps() {
	L := m.cfg.Layout
	sweep := func(root string, match func(string) bool) {
		walk(m.cfg.FS, root, func(path string, d fs.DirEntry) error {
			if !d.Type().IsRegular() || !match(d.Name()) {
				return nil
			}
			if err := m.cfg.FS.Remove(path); err == nil {
				m.log.Info("removed a temp file left by a crash", zap.String("file", path))
			}
			return nil
		})
	}
	sweep(L.ProjectsDir(), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.Contains(n, ".compact-") && strings.HasSuffix(n, ".tmp") ||
			strings.HasPrefix(n, archiveTempPrefix)
	})
	sweep(filepath.Join(L.StateDir, "repairs"), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, layout.TranscriptExt+".tmp")
	})
	sweep(m.intentDir(), func(n string) bool {
		return strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".json.tmp")
	})
}

// Close stops taking requests, lets every writer finish what is queued,
// compacts every session and closes all files. When ctx ends first the
// journals still hold every acknowledged entry; Close then returns ctx's
// error and the next start recovers them.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, s := range all {
			s.abort()
		}
		<-done
		return fmt.Errorf("shutdown cut short, journals will be replayed at next start: %w", ctx.Err())
	}
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	n := len(m.sessions)
	recErrs := append([]string(nil), m.recoveryErrs...)
	m.mu.Unlock()
	return Stats{
		RecoveryErrors:    recErrs,
		ActiveSessions:    n,
		Appends:           m.stats.appends.Load(),
		EntriesStored:     m.stats.stored.Load(),
		EntriesDuplicate:  m.stats.duplicate.Load(),
		JournalSyncs:      m.stats.syncs.Load(),
		JournalBytes:      m.stats.journalBytes.Load(),
		Compactions:       m.stats.compactions.Load(),
		CompactedBytes:    m.stats.compactedBytes.Load(),
		RecoveredSessions: m.stats.recovered.Load(),
		ReplayPending:     uint64(max(0, m.stats.replayPending.Load())),
	}
}

// IsActive reports whether a writer holds key open.
func (m *Manager) IsActive(key layout.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.sessions[key]
	return ok
}

// walk visits every entry below dir (not following symlinks).
func walk(fsys interface {
	ReadDir(string) ([]fs.DirEntry, error)
}, dir string, fn func(path string, d fs.DirEntry) error) error {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		if err := fn(p, d); err != nil {
			return err
		}
		if d.IsDir() {
			if err := walk(fsys, p, fn); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
