package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript"
)

// view calls fn with a reader over key's whole content: the canonical
// file followed by the journaled entries, as they will be once compacted.
// A session without a writer or journal is read straight from its file, so
// checking thousands of old sessions starts no writers.
func (m *Manager) view(ctx context.Context, key layout.Key, fn func(r io.Reader, pending int) error) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	if _, jerr := m.cfg.FS.Lstat(m.cfg.Layout.JournalPath(key)); jerr != nil && !m.IsActive(key) {
		path := m.cfg.Layout.TranscriptPath(key)
		f, err := m.cfg.FS.OpenFile(path, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return m.notFound(key)
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
		}
		defer f.Close()
		return fn(f, 0)
	}
	// A writer opened for this (a journal left behind) retires after it:
	// CheckAll views every session.
	var sn *snapshot
	err := m.doRetire(ctx, key, retireIfOpened, func(st *state) error {
		var err error
		sn, err = st.snapshot()
		return err
	})
	if err != nil {
		return err
	}
	defer sn.close()
	if !sn.exists {
		return m.notFound(key)
	}
	return fn(sn.reader(), len(sn.pending))
}

// reader streams the snapshot's content as one JSONL file.
func (sn *snapshot) reader() io.Reader {
	var parts []io.Reader
	if sn.canon != nil {
		parts = append(parts, io.NewSectionReader(sn.canon, 0, sn.canonSize))
		if !sn.canonEndsNL && len(sn.pending) > 0 {
			parts = append(parts, strings.NewReader("\n"))
		}
	}
	if len(sn.pending) > 0 {
		parts = append(parts, &pendingReader{sn: sn})
	}
	return io.MultiReader(parts...)
}

type pendingReader struct {
	sn  *snapshot
	i   int
	buf []byte
	cur []byte
}

func readPending(sn *snapshot, i int, buf []byte) ([]byte, error) {
	line, err := journal.ReadEntryAt(sn.journal, sn.pending[i], buf)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", errdefs.FromIO(err))
	}
	return line, nil
}

func (p *pendingReader) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.i >= len(p.sn.pending) {
			return 0, io.EOF
		}
		line, err := readPending(p.sn, p.i, p.buf)
		if err != nil {
			return 0, err
		}
		p.buf = append(line, '\n')
		p.cur = p.buf
		p.buf = p.buf[:0]
		p.i++
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// CheckResult is the damage found in one transcript.
type CheckResult struct {
	Key    layout.Key
	Report *transcript.Report
}

// Check reports the damage in key.
func (m *Manager) Check(ctx context.Context, key layout.Key) (CheckResult, error) {
	res := CheckResult{Key: key}
	err := m.view(ctx, key, func(r io.Reader, _ int) error {
		rep, err := transcript.Check(r, transcript.CheckOptions{SessionID: key.SessionID})
		if err != nil {
			return fmt.Errorf("check %s: %w", key, errdefs.FromIO(err))
		}
		res.Report = rep
		return nil
	})
	return res, err
}

// CheckAll checks every transcript (subagents included) of one project, or
// of every project when projectKey is "".
func (m *Manager) CheckAll(ctx context.Context, projectKey string) ([]CheckResult, error) {
	keys, err := m.AllKeys(projectKey, true)
	if err != nil {
		return nil, err
	}
	out := make([]CheckResult, 0, len(keys))
	op := m.progress.Start(ctx, "check", "transcripts", int64(len(keys)))
	defer op.End()
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := m.Check(ctx, k)
		op.Add(1)
		if errdefs.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RepairOutcome describes one repair.
type RepairOutcome struct {
	Key    layout.Key
	Result *transcript.RepairResult
	Backup string // where the original was kept
}

// Repair rewrites key so that check finds nothing repairable. It runs on
// the session's writer goroutine, so appends arriving meanwhile wait and
// follow the repaired content. The original file is kept under the state
// folder first; the repaired one replaces it by rename.
func (m *Manager) Repair(ctx context.Context, key layout.Key, dryRun bool) (RepairOutcome, error) {
	out := RepairOutcome{Key: key}
	if err := key.Validate(); err != nil {
		return out, err
	}
	if !m.existsOnDisk(key) {
		return out, m.notFound(key)
	}
	op := m.progress.Start(ctx, "repair", "bytes", 0)
	defer op.End()
	err := m.do(ctx, key, func(st *state) error {
		if !st.exists() {
			return m.notFound(key)
		}
		if dryRun && len(st.pending) > 0 {
			sn, err := st.snapshot()
			if err != nil {
				return err
			}
			defer sn.close()
			tmp, err := spool(sn.reader())
			if err != nil {
				return err
			}
			defer tmp.Close()
			out.Result, err = transcript.Repair(tmp, tmp.size, io.Discard, transcript.RepairOptions{SessionID: key.SessionID})
			return err
		}
		if err := st.compact("repair"); err != nil {
			return err
		}
		var err error
		out.Result, out.Backup, err = st.repair(dryRun, op)
		return err
	})
	return out, err
}

// countingWriter counts what is written through it into op.
type countingWriter struct {
	w  io.Writer
	op *progress.Op
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.op.Add(int64(n))
	return n, err
}

// spooled is a snapshot copied to an unlinked temp file, for a dry-run
// repair that must read its input twice.
type spooled struct {
	*os.File
	size int64
}

func spool(r io.Reader) (*spooled, error) {
	f, err := os.CreateTemp("", "sessiond-dryrun-*")
	if err != nil {
		return nil, errdefs.FromIO(err)
	}
	os.Remove(f.Name())
	n, err := io.Copy(f, r)
	if err != nil {
		f.Close()
		// A failed read of the session is the disk's error, and says so.
		return nil, errdefs.FromIO(err)
	}
	return &spooled{f, n}, nil
}

func (st *state) repair(dryRun bool, op *progress.Op) (*transcript.RepairResult, string, error) {
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", errdefs.FromIO(err)
	}
	// Progress is the repaired output written against the file's size:
	// Repair reads its input several times (check, plan, write), and its
	// output is about as long as its input.
	op.SetTotal(fi.Size())
	src := f
	opt := transcript.RepairOptions{SessionID: st.key.SessionID}
	if dryRun {
		res, err := transcript.Repair(src, fi.Size(), countingWriter{io.Discard, op}, opt)
		return res, "", err
	}
	tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			st.fs.Remove(tmpPath)
		}
	}()
	res, err := transcript.Repair(src, fi.Size(), countingWriter{tmp, op}, opt)
	if err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if !res.Changed {
		return res, "", nil
	}
	if err := tmp.Sync(); err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := tmp.Close(); err != nil {
		return nil, "", errdefs.FromIO(err)
	}
	backup, err := st.keepCopy("repairs", src, fi.Size())
	if err != nil {
		return nil, "", err
	}
	if err := st.fs.Rename(tmpPath, st.canonPath); err != nil {
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	done = true
	if err := st.fs.SyncDir(st.dir); err != nil {
		st.failed = err
		return nil, "", fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	if err := st.reload(); err != nil {
		return nil, "", err
	}
	st.log.Info("repaired", zap.Int("actions", len(res.Actions)), zap.String("original_kept_at", backup))
	return res, backup, nil
}

// reload takes a canonical file replaced as a whole (repair) as the new
// base: lines served before may have moved.
func (st *state) reload() error {
	if err := st.scanCanonical(); err != nil {
		st.failed = err
		return err
	}
	st.lineage = st.m.lineage.Add(1)
	if err := st.newGeneration(); err != nil {
		st.failed = err
		return err
	}
	if st.ent != nil {
		st.ent.ModifiedMs = time.Now().UnixMilli()
		st.publish()
	}
	st.notifyChange()
	return nil
}

// keepCopy copies the first size bytes of src into the state folder under
// kind/<project>/<session>[/<subpath>]/<time>.jsonl, synced, and returns
// its path.
func (st *state) keepCopy(kind string, src io.ReaderAt, size int64) (string, error) {
	rel := filepath.Join(st.key.ProjectKey, st.key.SessionID)
	if st.key.Subpath != "" {
		rel = filepath.Join(rel, st.key.Subpath)
	}
	dir := filepath.Join(st.cfg.Layout.StateDir, kind, rel)
	if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
		return "", fmt.Errorf("keep a copy in %s: %w", dir, errdefs.FromIO(err))
	}
	path := filepath.Join(dir, time.Now().UTC().Format("20060102T150405.000000000Z")+".jsonl")
	err := fsys.WriteFileAtomic(st.fs, path, "."+filepath.Base(path)+".tmp", 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(src, 0, size))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("keep a copy at %s: %w", path, errdefs.FromIO(err))
	}
	return path, nil
}

// ForkOutcome describes a new fork.
type ForkOutcome struct {
	Key     layout.Key
	Entries int
	Title   string
}

// Fork writes a copy of src (up to upTo) as a new session newID of the same
// project, with the official forkSession rewriting. The new file appears
// whole or not at all, and never replaces an existing one.
func (m *Manager) Fork(ctx context.Context, src layout.Key, upTo, title, newID string) (ForkOutcome, error) {
	if src.Subpath != "" {
		return ForkOutcome{}, fmt.Errorf("fork copies a main session; %s is a subagent transcript (fork its session instead): %w", src, errdefs.ErrInvalidArgument)
	}
	if newID == "" {
		newID = uuid.NewString()
	}
	dst := layout.Key{ProjectKey: src.ProjectKey, SessionID: newID}
	if err := dst.Validate(); err != nil {
		return ForkOutcome{}, err
	}
	if ok, err := m.existsOnDiskErr(dst); err != nil {
		return ForkOutcome{}, err
	} else if ok {
		return ForkOutcome{}, fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
	}
	out := ForkOutcome{Key: dst}
	// Spool a consistent view of the source first: the fork is written on
	// the new session's goroutine, which must not wait on the source's.
	var data *spooled
	err := m.view(ctx, src, func(r io.Reader, _ int) error {
		var err error
		data, err = spool(r)
		return err
	})
	if err != nil {
		return out, err
	}
	defer data.Close()
	err = m.do(ctx, dst, func(st *state) error {
		if st.exists() {
			return fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
		}
		if err := fsys.MkdirAll(st.fs, st.dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", st.dir, errdefs.FromIO(err))
		}
		tmpPath := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
		tmp, err := st.fs.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("fork: %w", errdefs.FromIO(err))
		}
		defer st.fs.Remove(tmpPath)
		defer tmp.Close()
		res, err := transcript.Fork(io.NewSectionReader(data, 0, data.size), tmp, transcript.ForkOptions{SessionID: src.SessionID, NewSessionID: newID, UpTo: upTo, Title: title, SidecarTitle: m.titleSidecar(src)})
		if err != nil {
			// Fork's own refusals carry their kind; a failed write of the
			// temp file is the disk's, and a full disk must say so.
			return fmt.Errorf("fork %s: %w", src, errdefs.FromIO(err))
		}
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("fork: %w", errdefs.FromIO(err))
		}
		// Link, not rename: it fails instead of replacing a file that
		// appeared meanwhile.
		if err := st.fs.Link(tmpPath, st.canonPath); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("session %s already exists; a fork never overwrites: %w", dst, errdefs.ErrAlreadyExists)
			}
			return fmt.Errorf("fork: %w", errdefs.FromIO(err))
		}
		if err := st.fs.Remove(tmpPath); err != nil {
			return fmt.Errorf("fork: %w", errdefs.FromIO(err))
		}
		if err := st.fs.SyncDir(st.dir); err != nil {
			st.failed = err
			return fmt.Errorf("fork: %w", errdefs.FromIO(err))
		}
		out.Entries, out.Title = res.Entries, res.Title
		return st.reload()
	})
	return out, err
}

// AppendMetadata appends one metadata line (custom-title, tag) to an
// existing session, as the official writers do: never creating one.
func (m *Manager) AppendMetadata(ctx context.Context, key layout.Key, line []byte) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if key.Subpath != "" {
		// The official readers take a session's title and tag from its
		// main transcript only: in a subagent's it would change nothing.
		return fmt.Errorf("a title or tag applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	_, err := m.Append(ctx, key, [][]byte{line})
	return err
}

// archiveTempPrefix starts the temp file name of an archive mark being
// written; Recover sweeps what a crash leaves of them.
const archiveTempPrefix = ".archived.json.tmp-"

// ArchiveMarkerPath is where the official tools keep a session's archived
// mark.
func (m *Manager) ArchiveMarkerPath(key layout.Key) string {
	return filepath.Join(m.cfg.Layout.SessionDir(key.Main()), "archived.json")
}

// SetArchived writes the session's archived.json marker as the official
// archiveSession / unarchiveSession do.
func (m *Manager) SetArchived(ctx context.Context, key layout.Key, archived bool) error {
	if key.Subpath != "" {
		return fmt.Errorf("archive applies to a whole session, not to the subagent transcript %s: %w", key.Subpath, errdefs.ErrInvalidArgument)
	}
	if !m.existsOnDisk(key) {
		return m.notFound(key)
	}
	return m.do(ctx, key, func(st *state) error {
		path := m.ArchiveMarkerPath(key)
		dir := filepath.Dir(path)
		if err := fsys.MkdirAll(st.fs, dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, errdefs.FromIO(err))
		}
		body := fmt.Sprintf(`{"archived":%v,"at":%q}`, archived, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
		err := fsys.WriteFileAtomic(st.fs, path, archiveTempPrefix+uuid.NewString()[:8], 0o600, func(w io.Writer) error {
			_, err := io.WriteString(w, body)
			return err
		})
		if err != nil {
			return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
		}
		return nil
	})
}

// family is a session with all its subagent transcripts.
type family struct{ projectKey, sessionID string }

func familyOf(k layout.Key) family { return family{k.ProjectKey, k.SessionID} }

// busyError refuses a writer of a session that a delete or restore is
// moving: a passing state, so it is ErrUnavailable.
type busyError struct {
	family family
	why    string // "deleted", "restored"
}

func (e *busyError) Error() string {
	return fmt.Sprintf("session %s/%s is being %s; retry", e.family.projectKey, e.family.sessionID, e.why)
}

func (e *busyError) Unwrap() error { return errdefs.ErrUnavailable }

// lockFamily keeps every writer of k's session from starting until unlock:
// delete and restore move the files of the whole session.
func (m *Manager) lockFamily(k layout.Key, why string) (unlock func(), err error) {
	m.mu.Lock()
	if m.busy == nil {
		m.busy = make(map[family]string)
	}
	f := familyOf(k)
	if w, ok := m.busy[f]; ok {
		m.mu.Unlock()
		return nil, &busyError{family: f, why: w}
	}
	m.busy[f] = why
	var open []*session
	for key, s := range m.sessions {
		if familyOf(key) == f {
			open = append(open, s)
		}
	}
	m.mu.Unlock()
	unlock = func() {
		m.mu.Lock()
		delete(m.busy, f)
		m.mu.Unlock()
	}
	// Writers of the family finish what is queued, compact and exit.
	for _, s := range open {
		s.stop()
	}
	for _, s := range open {
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			unlock()
			return nil, fmt.Errorf("session %s did not close in time: %w", s.key, errdefs.ErrUnavailable)
		}
	}
	return unlock, nil
}

// Subkeys lists the subagent transcripts of key's session, from disk,
// journals and open writers.
func (m *Manager) Subkeys(key layout.Key) ([]string, error) {
	main := key.Main()
	if err := main.Validate(); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, base := range []struct {
		dir   string
		parse func(string) (layout.Key, bool)
	}{
		{m.cfg.Layout.SessionDir(main), m.cfg.Layout.ParseTranscriptPath},
		{strings.TrimSuffix(m.cfg.Layout.JournalPath(main), ".wal"), m.cfg.Layout.ParseJournalPath},
	} {
		err := walk(m.cfg.FS, base.dir, func(path string, d fs.DirEntry) error {
			if d.Type().IsRegular() {
				if k, ok := base.parse(path); ok && k.Subpath != "" && k.Main() == main {
					set[k.Subpath] = true
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", base.dir, errdefs.FromIO(err))
		}
	}
	m.mu.Lock()
	for k := range m.sessions {
		if k.Main() == main && k.Subpath != "" {
			set[k.Subpath] = true
		}
	}
	m.mu.Unlock()
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// Delete moves a session to the trash under the state folder (or removes
// it with purge): the main transcript with its session folder (subagents,
// archive mark) when key is a main session, or one subagent transcript
// (with its .meta.json sidecar). Pending entries are compacted first, so
// the trash holds everything that was acknowledged.
//
// The session's files are several names, which no single rename moves at
// once, so the moves are first recorded in a durable intent (see intent):
// a crash or a failing disk midway never leaves the session half in place
// and half in the trash for good. The next Delete or Restore of the
// session, or the next start, finishes the moves; until then the session
// refuses writers.
func (m *Manager) Delete(ctx context.Context, key layout.Key, purge bool) (string, error) {
	if err := key.Validate(); err != nil {
		return "", err
	}
	unlock, err := m.lockFamily(key, "deleted")
	if err != nil {
		return "", err
	}
	defer unlock()
	if done, err := m.finishPending(key); err != nil {
		return "", err
	} else if done != nil && done.Op != opRestore && done.Subpath == key.Subpath && (done.Op == opPurge) == purge {
		// This very delete was interrupted before; it is done now.
		return done.Trash, nil
	}
	L, FS := m.cfg.Layout, m.cfg.FS
	var moves [][2]string // what to move (or remove), relative to the trash entry
	var journals []string
	if key.Subpath == "" {
		moves = append(moves, [2]string{L.TranscriptPath(key), key.SessionID + ".jsonl"},
			[2]string{L.SessionDir(key), key.SessionID})
		journals = append(journals, L.JournalPath(key), strings.TrimSuffix(L.JournalPath(key), ".wal"))
	} else {
		p := L.TranscriptPath(key)
		rel := filepath.Join(key.SessionID, key.Subpath)
		moves = append(moves, [2]string{p, rel + ".jsonl"},
			[2]string{strings.TrimSuffix(p, ".jsonl") + ".meta.json", rel + ".meta.json"},
			[2]string{L.StorePath(key), rel + layout.StoreExt})
		journals = append(journals, L.JournalPath(key))
	}
	found := false
	for _, mv := range moves {
		if _, err := FS.Lstat(mv[0]); err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("delete %s: %w", key, errdefs.FromIO(err))
		}
	}
	if _, err := FS.Lstat(journals[0]); err == nil {
		found = true
	}
	if !found {
		return "", m.notFound(key)
	}
	// The writers were compacted as they closed: journals hold nothing
	// that is not in the files, except for sessions whose compaction failed
	// (then they are kept and the delete stops).
	for _, j := range journals {
		if err := m.dropJournal(j); err != nil {
			return "", err
		}
	}
	in := &intent{Op: opDelete, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath}
	if purge {
		in.Op = opPurge
	} else {
		in.Trash = filepath.Join(L.StateDir, "trash", key.ProjectKey, key.SessionID+"-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
		if key.Subpath != "" {
			in.Trash += "-" + trashSubpath(key.Subpath)
		}
	}
	for _, mv := range moves {
		if _, err := FS.Lstat(mv[0]); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		dst := ""
		if !purge {
			dst = filepath.Join(in.Trash, mv[1])
		}
		in.Moves = append(in.Moves, [2]string{mv[0], dst})
	}
	if err := m.runIntent(in); err != nil {
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	m.log.Info("deleted session", zap.Stringer("session", key), zap.Bool("purge", purge), zap.String("trash", in.Trash))
	return in.Trash, nil
}

// dropJournal removes a journal (file or folder of subagent journals)
// after checking it holds no entry the transcript lacks.
func (m *Manager) dropJournal(path string) error {
	fi, err := m.cfg.FS.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errdefs.FromIO(err)
	}
	if fi.IsDir() {
		// A folder of subagent journals: each may hold entries its
		// transcript lacks (a writer whose shutdown compaction failed, a
		// journal no writer reopened since a crash). Compact every one
		// into its transcript, which the delete then moves, before any
		// is removed.
		err := walk(m.cfg.FS, path, func(p string, d fs.DirEntry) error {
			if d.IsDir() || !strings.HasSuffix(p, layout.JournalExt) {
				return nil
			}
			return m.dropJournal(p)
		})
		if err != nil {
			return errdefs.FromIO(err) // keeps the kind dropJournal gave, else the disk's
		}
		return errdefs.FromIO(fsys.RemoveAll(m.cfg.FS, path))
	}
	if k, ok := m.cfg.Layout.ParseJournalPath(path); ok {
		// Replaying it (a no-op when compacted) proves nothing is pending.
		if _, err := m.flushLocked(k); err != nil {
			return fmt.Errorf("the journal of %s could not be compacted, so it was not deleted: %w", k, err)
		}
	}
	return errdefs.FromIO(fsys.RemoveAll(m.cfg.FS, path))
}

// flushLocked compacts key's journal while its family is locked: no
// writer of the family can start meanwhile, so the state machine runs right
// here instead of on a goroutine of its own.
func (m *Manager) flushLocked(key layout.Key) (FlushResult, error) {
	st := newState(m, key, m.log.With(zap.Stringer("session", key)))
	if err := st.open(); err != nil {
		return FlushResult{Key: key}, err
	}
	defer st.closeFiles()
	n := uint64(len(st.pending))
	if err := st.compact("delete"); err != nil {
		return FlushResult{Key: key}, err
	}
	return FlushResult{Key: key, CompactedEntries: n, CanonicalBytes: st.canon.size}, nil
}

// Restore brings back the newest trashed copy of key's session. It refuses
// when a session with that id exists again. Like Delete, it records its
// moves in a durable intent first, so it is never left half done.
func (m *Manager) Restore(ctx context.Context, key layout.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	unlock, err := m.lockFamily(key, "restored")
	if err != nil {
		return err
	}
	defer unlock()
	if done, err := m.finishPending(key); err != nil {
		return err
	} else if done != nil && done.Op == opRestore && done.Subpath == key.Subpath {
		return nil // this very restore was interrupted before; it is done now
	}
	entry, err := m.newestTrash(key)
	if err != nil {
		return err
	}
	L, FS := m.cfg.Layout, m.cfg.FS
	if ok, err := m.existsOnDiskErr(key); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("session %s exists again; delete or move it before restoring: %w", key, errdefs.ErrAlreadyExists)
	}
	// What Delete moved into the trash entry, and where it goes back.
	var moves [][2]string
	if key.Subpath == "" {
		if _, err := FS.Lstat(L.SessionDir(key)); err == nil {
			return fmt.Errorf("session folder %s exists again; move it away before restoring: %w", L.SessionDir(key), errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		moves = [][2]string{{key.SessionID + ".jsonl", L.TranscriptPath(key)}, {key.SessionID, L.SessionDir(key)}}
	} else {
		p := L.TranscriptPath(key)
		rel := filepath.Join(key.SessionID, key.Subpath)
		meta := strings.TrimSuffix(p, ".jsonl") + ".meta.json"
		if _, err := FS.Lstat(meta); err == nil {
			return fmt.Errorf("%s exists again; move it away before restoring: %w", meta, errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		moves = [][2]string{{rel + ".jsonl", p}, {rel + ".meta.json", meta}, {rel + layout.StoreExt, L.StorePath(key)}}
	}
	in := &intent{Op: opRestore, ProjectKey: key.ProjectKey, SessionID: key.SessionID, Subpath: key.Subpath, Trash: entry}
	for _, mv := range moves {
		src := filepath.Join(entry, mv[0])
		if _, err := FS.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("restore %s: %w", key, errdefs.FromIO(err))
		}
		in.Moves = append(in.Moves, [2]string{src, mv[1]})
	}
	if err := m.runIntent(in); err != nil {
		return fmt.Errorf("restore %s: %w", key, err)
	}
	return nil
}

// NotInTrash is the error for a restore that finds nothing to restore;
// key.ProjectKey may be empty (no project's trash holds it).
func NotInTrash(key layout.Key) error {
	where := "the trash"
	if key.ProjectKey != "" {
		where += " of project " + key.ProjectKey
	}
	if key.Subpath != "" {
		return fmt.Errorf("no deleted subagent transcript %s of session %s in %s (only one deleted on its own is there; a whole session's comes back with it): %w", key.Subpath, key.SessionID, where, errdefs.ErrNotFound)
	}
	return fmt.Errorf("no deleted session %s in %s: %w", key.SessionID, where, errdefs.ErrNotFound)
}

// trashSubpath is how a lone subagent's subpath ends its trash entry's
// name.
func trashSubpath(subpath string) string { return strings.ReplaceAll(subpath, "/", "_") }

// TrashedProjects lists the projects whose trash holds sessionID (or,
// with a subpath, that subagent transcript of it, deleted on its own).
func (m *Manager) TrashedProjects(sessionID, subpath string) []string {
	root := filepath.Join(m.cfg.Layout.StateDir, "trash")
	projects, _ := m.cfg.FS.ReadDir(root)
	var out []string
	for _, p := range projects {
		k := layout.Key{ProjectKey: p.Name(), SessionID: sessionID, Subpath: subpath}
		if _, err := m.newestTrash(k); err == nil {
			out = append(out, p.Name())
		}
	}
	return out
}

func (m *Manager) newestTrash(key layout.Key) (string, error) {
	dir := filepath.Join(m.cfg.Layout.StateDir, "trash", key.ProjectKey)
	ents, err := m.cfg.FS.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", errdefs.FromIO(err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || !strings.HasPrefix(n, key.SessionID+"-") {
			continue
		}
		// A whole session's entry is <sid>-<stamp>, a lone subagent's
		// <sid>-<stamp>-<subpath with / as _> (Delete; the stamp has no
		// "-"), and the names sort by stamp.
		stamp, sub, lone := strings.Cut(n[len(key.SessionID)+1:], "-")
		if stamp == "" || lone != (key.Subpath != "") || lone && sub != trashSubpath(key.Subpath) {
			continue
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", NotInTrash(key)
	}
	sort.Strings(names)
	return filepath.Join(dir, names[len(names)-1]), nil
}

// AllKeys lists every transcript key of one project (or all), subagents
// included when subagents is set: files on disk, journals, open writers.
func (m *Manager) AllKeys(projectKey string, subagents bool) ([]layout.Key, error) {
	set := map[layout.Key]bool{}
	L := m.cfg.Layout
	root := L.ProjectsDir()
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		root = L.ProjectDir(projectKey)
	}
	err := walk(m.cfg.FS, root, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() && strings.HasSuffix(path, ".jsonl") {
			if k, ok := L.ParseTranscriptPath(path); ok && (subagents || k.Subpath == "") {
				set[k] = true
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", root, errdefs.FromIO(err))
	}
	journaled, err := m.journaledKeys()
	if err != nil {
		return nil, err
	}
	for _, k := range journaled {
		if (projectKey == "" || k.ProjectKey == projectKey) && (subagents || k.Subpath == "") {
			set[k] = true
		}
	}
	keys := make([]layout.Key, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// titleSidecar reads the session's custom-title.json sidecar, which the
// official tools consult for the title too.
func (m *Manager) titleSidecar(key layout.Key) string {
	f, err := m.cfg.FS.OpenFile(filepath.Join(m.cfg.Layout.SessionDir(key.Main()), "custom-title.json"), os.O_RDONLY, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return ""
	}
	return transcript.ParseTitleSidecar(b)
}
