// Package materialize writes one session into a fresh config folder laid
// out like ~/.claude, so that an agent can run against a copy of it:
// CLAUDE_CONFIG_DIR=<dir> claude --resume <id>. It is what the official
// SDKs do to resume a session kept in a SessionStore (seed 003: the CLI
// only resumes from local files), with the session read from a Source
// instead: the local sessiond today, the fleet's PostgreSQL mirror later.
//
// The folder may come to hold credentials (the agent's login) once the
// caller adds them, so it is made 0700 by this process, or must be an
// empty folder of the caller's, and it is removed on every failure path,
// an interruption included: a caller that cancels the context gets the
// folder removed before Materialize returns.
//
// Every name that comes from the source becomes part of a path only after
// the layout package's validators accepted it (session id, project key,
// subpaths), and each file is written durably (temp file, fsync, rename,
// fsync of its folder) through fsys.
package materialize

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Source is where a session's transcripts are read from. A subagent's
// .meta.json sidecar travels in its transcript as "agent_metadata"
// entries, as the SDKs mirror it to a SessionStore and as sessiond keeps
// it: Materialize turns the last one back into the file.
type Source interface {
	// Resolve finds the session ref names. The key it returns (Subpath
	// "") is the session as the source stores it; Cwd is the working
	// directory its transcript records, "" when unknown. A session the
	// source does not have is an error wrapping errdefs.ErrNotFound (or
	// the source's own not-found error).
	Resolve(ctx context.Context, ref Ref) (Session, error)
	// Subkeys lists the session's subpath transcripts, such as
	// "subagents/agent-abc".
	Subkeys(ctx context.Context, session layout.Key) ([]string, error)
	// Lines calls fn with each line of the transcript key names
	// (key.Subpath "" for the main one), in order, without its newline.
	// line is valid only during the call; an error from fn ends Lines
	// with that error.
	Lines(ctx context.Context, key layout.Key, fn func(line []byte) error) error
}

// Ref names the session to materialize: its id, and its project as a
// working directory or a project key (both empty: the source looks the id
// up in every project).
type Ref struct {
	Cwd        string
	ProjectKey string
	SessionID  string
}

// Session is a session the source found.
type Session struct {
	Key layout.Key // Subpath ""
	Cwd string     // the working directory its transcript records, or ""
}

// Request is one materialization.
type Request struct {
	Ref Ref
	// Dir is the config folder to write: a path that does not exist (its
	// parent must), or an empty folder owned by this process's user that
	// others cannot write to. Never a symbolic link.
	Dir string
	// FS is the filesystem to write with; nil is the real one.
	FS fsys.FS
}

// File is one file written, its Path relative to the config folder with
// '/' separators.
type File struct {
	Path    string
	Subpath string // the transcript's subpath, "" for the main transcript
	Sidecar bool   // a .meta.json, not a transcript
	Entries int64  // lines written (0 for a sidecar)
	Bytes   int64
}

// Result says what Materialize wrote.
type Result struct {
	Dir     string // absolute
	Session Session
	Files   []File
}

// Transcripts counts the transcript files written.
func (r *Result) Transcripts() int {
	n := 0
	for _, f := range r.Files {
		if !f.Sidecar {
			n++
		}
	}
	return n
}

// Totals sums the entries and bytes of every file written.
func (r *Result) Totals() (entries, bytes int64) {
	for _, f := range r.Files {
		entries += f.Entries
		bytes += f.Bytes
	}
	return entries, bytes
}

// ErrRefused is wrapped, beside its kind, by the errors of a request
// refused before anything was read: a session id that is not a UUID, a
// project key that is not one, a Dir that cannot be used. Nothing was
// written, and nothing was removed.
var ErrRefused = errors.New("refused")

// CleanupError is wrapped by the error of a materialization that failed
// and could not remove what it had written.
type CleanupError struct {
	Dir string
	Err error
}

func (e *CleanupError) Error() string {
	return fmt.Sprintf("removing %s failed too, remove it yourself (it may hold credentials): %v", e.Dir, e.Err)
}

func (e *CleanupError) Unwrap() error { return e.Err }

// refusal is an error of a refused request: its kind and ErrRefused.
type refusal struct{ error }

func (r refusal) Unwrap() []error { return []error{r.error, ErrRefused} }

func refused(err error) error { return refusal{err} }

// Materialize writes the session req.Ref names from src into req.Dir:
// projects/<project-key>/<session-id>.jsonl, each subpath transcript under
// projects/<project-key>/<session-id>/ with the .meta.json its last
// agent_metadata entry describes. On any error, ctx's end included, the
// folder is removed (an empty folder that existed is emptied and kept)
// before Materialize returns; a ctx that ends after the last file was
// written counts as an interruption too.
func Materialize(ctx context.Context, src Source, req Request) (res *Result, err error) {
	ref := req.Ref
	if err := layout.ValidateSessionID(ref.SessionID); err != nil {
		return nil, refused(err)
	}
	if ref.ProjectKey != "" {
		if err := layout.ValidateProjectKey(ref.ProjectKey); err != nil {
			return nil, refused(err)
		}
	}
	fs := req.FS
	if fs == nil {
		fs = fsys.OS
	}
	// MkdirAll syncs each folder's parent once per process this way, not
	// once per file.
	fs = fsys.Remembering(fs)
	t, err := claim(fs, req.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			// Interrupted after the last file: the caller is going
			// away and will not use the folder.
			err = ctx.Err()
		}
		if err != nil {
			res = nil
			if rerr := t.undo(); rerr != nil {
				err = fmt.Errorf("%w; %w", err, &CleanupError{Dir: t.dir, Err: rerr})
			}
		}
	}()
	m := &run{ctx: ctx, src: src, fs: fs, dir: t.dir, written: map[string]bool{}}
	s, err := src.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := checkResolved(ref, s.Key); err != nil {
		return nil, err
	}
	// The source's errors go back as they are: they name the session,
	// and a caller may need their type (a gRPC status, say).
	subs, err := src.Subkeys(ctx, s.Key)
	if err != nil {
		return nil, err
	}
	sessionDir := filepath.Join(m.dir, "projects", s.Key.ProjectKey, s.Key.SessionID)
	seen := map[string]bool{}
	for _, sub := range subs {
		if err := checkSubpath(sessionDir, sub); err != nil {
			return nil, err
		}
		if seen[sub] {
			return nil, fmt.Errorf("the source lists the subpath %q of session %s twice: %w", sub, s.Key, errdefs.ErrCorrupt)
		}
		seen[sub] = true
	}
	if err := m.transcript(s.Key); err != nil {
		return nil, err
	}
	for _, sub := range subs {
		k := s.Key
		k.Subpath = sub
		if err := m.transcript(k); err != nil {
			return nil, err
		}
	}
	return &Result{Dir: m.dir, Session: s, Files: m.files}, nil
}

// checkResolved refuses a session the source answered with that is not the
// one asked for, or whose names cannot become paths.
func checkResolved(ref Ref, k layout.Key) error {
	if err := layout.ValidateProjectKey(k.ProjectKey); err != nil {
		return fmt.Errorf("the source files session %s under a project key materialize refuses: %w", ref.SessionID, err)
	}
	if err := layout.ValidateSessionID(k.SessionID); err != nil {
		return fmt.Errorf("the source answered session %s with an id materialize refuses: %w", ref.SessionID, err)
	}
	if !strings.EqualFold(k.SessionID, ref.SessionID) || k.Subpath != "" || (ref.ProjectKey != "" && k.ProjectKey != ref.ProjectKey) {
		return fmt.Errorf("asked for session %s, the source answered with %s: %w", ref.SessionID, k, errdefs.ErrCorrupt)
	}
	return nil
}

// checkSubpath refuses a subpath the SDKs refuse when they materialize a
// session (empty, absolute, drive-prefixed, "." or ".." components, NUL)
// and anything else layout.ValidateSubpath refuses, and, as a last guard,
// one whose file would not lie inside the session folder.
func checkSubpath(sessionDir, sub string) error {
	if err := layout.ValidateSubpath(sub); err != nil {
		return fmt.Errorf("the source lists a subagent transcript materialize refuses, so nothing of the session is kept: %w", err)
	}
	target := filepath.Join(sessionDir, filepath.FromSlash(sub)+layout.TranscriptExt)
	if rel, err := filepath.Rel(sessionDir, target); err != nil || rel == "." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("the source lists a subagent transcript %q that resolves outside the session folder: %w", sub, errdefs.ErrInvalidArgument)
	}
	return nil
}

// run is one materialization under way.
type run struct {
	ctx     context.Context
	src     Source
	fs      fsys.FS
	dir     string
	files   []File
	written map[string]bool // relative paths, against duplicates
}

// errEmpty ends the write of a subagent transcript that holds nothing but
// metadata: the SDKs write no file for it, only its .meta.json.
var errEmpty = errors.New("no transcript lines")

// transcript writes the transcript of k and, for a subagent's, its
// .meta.json.
func (m *run) transcript(k layout.Key) error {
	rel := "projects/" + k.ProjectKey + "/" + k.SessionID + layout.TranscriptExt
	if k.Subpath != "" {
		rel = "projects/" + k.ProjectKey + "/" + k.SessionID + "/" + k.Subpath + layout.TranscriptExt
	}
	f := File{Path: rel, Subpath: k.Subpath}
	var meta []byte
	var readErr error // the source's, returned as it is
	err := m.write(rel, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 256<<10)
		err := m.src.Lines(m.ctx, k, func(line []byte) error {
			if k.Subpath != "" {
				if sc, ok := transcript.AgentMetaSidecar(line); ok {
					// The SDK's store form of the sidecar: on disk it is
					// the .meta.json, never a line (the last one wins).
					meta = sc
					return nil
				}
			}
			if _, err := bw.Write(line); err != nil {
				return err
			}
			if err := bw.WriteByte('\n'); err != nil {
				return err
			}
			f.Entries++
			f.Bytes += int64(len(line)) + 1
			return m.ctx.Err()
		})
		if err != nil {
			readErr = err
			return err
		}
		if k.Subpath != "" && f.Entries == 0 {
			return errEmpty
		}
		return bw.Flush()
	})
	switch {
	case readErr != nil:
		return readErr
	case errors.Is(err, errEmpty):
	case err != nil:
		return err
	default:
		m.files = append(m.files, f)
	}
	if meta == nil {
		return nil
	}
	metaRel := strings.TrimSuffix(rel, layout.TranscriptExt) + ".meta.json"
	err = m.write(metaRel, func(w io.Writer) error {
		_, err := w.Write(meta)
		return err
	})
	if err != nil {
		return err
	}
	m.files = append(m.files, File{Path: metaRel, Subpath: k.Subpath, Sidecar: true, Bytes: int64(len(meta))})
	return nil
}

// write makes the file rel (under the config folder) hold what fill
// writes, durably: its folders are made 0700 and synced, the content goes
// to a temp file that is synced and renamed into place, and the folder is
// synced. A file already there is an error, never replaced.
func (m *run) write(rel string, fill func(io.Writer) error) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	if m.written[rel] {
		return fmt.Errorf("%s would be written twice: %w", rel, errdefs.ErrCorrupt)
	}
	path := filepath.Join(m.dir, filepath.FromSlash(rel))
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(m.fs, dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if _, err := m.fs.Lstat(path); err == nil {
		// Two names the filesystem takes for one (a case-insensitive
		// one): the second would silently replace the first.
		return fmt.Errorf("%s exists already (another subpath of the session names the same file on this filesystem): %w", path, errdefs.ErrAlreadyExists)
	}
	// The temp name never ends in .jsonl, so no reader lists it.
	tmp := ".materialize-" + uuid.NewString()[:8] + ".tmp"
	if err := fsys.WriteFileAtomic(m.fs, path, tmp, 0o600, fill); err != nil {
		if errors.Is(err, errEmpty) {
			// WriteFileAtomic removed the temp file unless that failed,
			// which it does not report: no temp file may stay in the
			// copy that is kept.
			tmpPath := filepath.Join(dir, tmp)
			if rerr := m.fs.Remove(tmpPath); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", tmpPath, rerr)
			}
			return err
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	m.written[rel] = true
	return nil
}
