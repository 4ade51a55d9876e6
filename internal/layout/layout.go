// Package layout decides where sessiond's files live and which names may
// become part of a path.
//
// Transcripts go where the official Claude Code / Agent SDK readers look for
// them: <root>/projects/<project-key>/<session-id>.jsonl, with subpath
// transcripts (subagents and the like) under <session-id>/<subpath>.jsonl.
// The daemon's own journals mirror that tree under a separate state folder.
// Every part of a Key (project key, session id, subpath) comes from another
// process, so the validators here run before any of them is joined into a
// path; the path functions refuse keys that do not validate.
package layout

import (
	"path/filepath"
	"strings"
)

// File name extensions. A file that does not end in TranscriptExt is never
// listed by the official readers, which is why temp files must not use it.
const (
	TranscriptExt = ".jsonl"
	// AckedExt ends the name of a transcript's ledger of acknowledged
	// entries; MissingExt the note of those found missing from it.
	AckedExt   = ".acked"
	MissingExt = ".missing.json"
)

const (
	projectsDirName = "projects"
	journalDirName  = "journal"
	ackedDirName    = "acked"
	missingDirName  = "missing"
)

// Key addresses one transcript: the main transcript of a session when
// Subpath is "", else one of its subpath transcripts (e.g.
// "subagents/agent-abc"), as in the SDKs' SessionStore key.
type Key struct {
	ProjectKey string
	SessionID  string
	Subpath    string // "" = main transcript; '/'-separated, no extension
}

// String renders the key as "<projectKey>/<sid>" or
// "<projectKey>/<sid>/<subpath>", the form the SDK's in-memory store uses.
// It is meant for logs and sorting; it does not validate.
func (k Key) String() string {
	if k.Subpath == "" {
		return k.ProjectKey + "/" + k.SessionID
	}
	return k.ProjectKey + "/" + k.SessionID + "/" + k.Subpath
}

// Main returns the key of the session's main transcript.
// Less orders keys by project, session id, then subpath.
func (k Key) Less(o Key) bool {
	if k.ProjectKey != o.ProjectKey {
		return k.ProjectKey < o.ProjectKey
	}
	if k.SessionID != o.SessionID {
		return k.SessionID < o.SessionID
	}
	return k.Subpath < o.Subpath
}

func (k Key) Main() Key { return Key{ProjectKey: k.ProjectKey, SessionID: k.SessionID} }

// Validate checks the project key and the session id and, when it is set,
// the subpath. It returns the first problem found, wrapping
// errdefs.ErrInvalidArgument.
func (k Key) Validate() error {
	if err := ValidateProjectKey(k.ProjectKey); err != nil {
		return err
	}
	if err := ValidateSessionID(k.SessionID); err != nil {
		return err
	}
	if k.Subpath != "" {
		return ValidateSubpath(k.Subpath)
	}
	return nil
}

// Layout places files: transcripts under Root (the agents' config dir, what
// CLAUDE_CONFIG_DIR points at), journals and other daemon state under
// StateDir.
//
// The methods that take a project key or a Key return "" when it does not
// validate, so that a name which slipped past the edge can never address a
// file outside Root or StateDir (an empty path fails every file operation).
type Layout struct {
	Root     string
	StateDir string
}

// ProjectsDir is Root/projects.
func (l Layout) ProjectsDir() string { return filepath.Join(l.Root, projectsDirName) }

// ProjectDir is Root/projects/<projectKey>, or "" for an invalid key.
func (l Layout) ProjectDir(projectKey string) string {
	if ValidateProjectKey(projectKey) != nil {
		return ""
	}
	return filepath.Join(l.ProjectsDir(), projectKey)
}

// SessionDir is the folder that holds the subpath transcripts of k's
// session, Root/projects/<key>/<sid> (k.Subpath is ignored), or "" for an
// invalid key. Deleting a main transcript must also remove this folder.
func (l Layout) SessionDir(k Key) string {
	k = k.Main()
	if k.Validate() != nil {
		return ""
	}
	return filepath.Join(l.ProjectsDir(), k.ProjectKey, k.SessionID)
}

// TranscriptPath is Root/projects/<key>/<sid>.jsonl for a main transcript
// and Root/projects/<key>/<sid>/<subpath>.jsonl otherwise, or "" for an
// invalid key.
func (l Layout) TranscriptPath(k Key) string {
	return keyPath(l.ProjectsDir(), k, TranscriptExt)
}

// StoreExt ends the name of a transcript's SessionStore sidecar.
const StoreExt = ".sessiond-store.json"

// StorePath is where sessiond keeps what the SessionStore contract needs
// about a transcript besides its lines (the session's summary, the ids of
// recent batches): Root/projects/<key>/<sid>/sessiond-store.json for a main
// transcript, inside the session folder so that deleting and restoring the
// session moves it along, and Root/projects/<key>/<sid>/<subpath>.sessiond-store.json
// otherwise; "" for an invalid key. Readers ignore both: neither is a
// <uuid>.jsonl.
func (l Layout) StorePath(k Key) string {
	if k.Subpath == "" {
		if d := l.SessionDir(k); d != "" {
			return filepath.Join(d, "sessiond-store.json")
		}
		return ""
	}
	return keyPath(l.ProjectsDir(), k, StoreExt)
}

// JournalDir is StateDir/journal, the journal's segments (the
// journal every session's appends go to first).
func (l Layout) JournalDir() string { return filepath.Join(l.StateDir, journalDirName) }

// BallastPath is StateDir/ballast, the file of disk space kept in reserve
// for compactions on a full disk (see package ballast).
func (l Layout) BallastPath() string { return filepath.Join(l.StateDir, "ballast") }

// AckedDir is StateDir/acked, where sessiond records, per transcript,
// the entries it acknowledged and compacted into it.
func (l Layout) AckedDir() string { return filepath.Join(l.StateDir, ackedDirName) }

// AckedPath is StateDir/acked/<key>/<sid>.acked for a main transcript and
// StateDir/acked/<key>/<sid>/<subpath>.acked otherwise, or "" for an
// invalid key.
func (l Layout) AckedPath(k Key) string { return keyPath(l.AckedDir(), k, AckedExt) }

// MissingDir is StateDir/missing, where sessiond notes the transcripts
// found missing entries it had acknowledged, until they are repaired.
func (l Layout) MissingDir() string { return filepath.Join(l.StateDir, missingDirName) }

// MissingPath is StateDir/missing/<key>/<sid>.missing.json (subpath
// transcripts: <sid>/<subpath>.missing.json), or "" for an invalid key.
func (l Layout) MissingPath(k Key) string { return keyPath(l.MissingDir(), k, MissingExt) }

// ParseMissingPath is the inverse of MissingPath.
func (l Layout) ParseMissingPath(path string) (Key, bool) {
	return parseKeyPath(l.MissingDir(), path, MissingExt)
}

// ParseTranscriptPath is the inverse of TranscriptPath. It reports false for
// anything that is not a transcript sessiond could have written: a path
// outside Root/projects or not in clean form, another extension (temp files,
// .meta.json sidecars, archived.json), a name that is not a session id, or a
// part that does not validate.
func (l Layout) ParseTranscriptPath(path string) (Key, bool) {
	return parseKeyPath(l.ProjectsDir(), path, TranscriptExt)
}

func keyPath(base string, k Key, ext string) string {
	if k.Validate() != nil {
		return ""
	}
	if k.Subpath == "" {
		return filepath.Join(base, k.ProjectKey, k.SessionID+ext)
	}
	return filepath.Join(base, k.ProjectKey, k.SessionID, filepath.FromSlash(k.Subpath)+ext)
}

func parseKeyPath(base, path, ext string) (Key, bool) {
	if path == "" || filepath.Clean(path) != path {
		return Key{}, false
	}
	prefix := base
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	rel, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return Key{}, false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 2 {
		return Key{}, false
	}
	last := len(parts) - 1
	name, ok := strings.CutSuffix(parts[last], ext)
	if !ok {
		return Key{}, false
	}
	parts[last] = name
	k := Key{ProjectKey: parts[0], SessionID: parts[1]}
	if len(parts) > 2 {
		k.Subpath = strings.Join(parts[2:], "/")
	}
	// Rebuilding the path rules out every other spelling of the same key
	// (an empty last name such as "<sid>/.jsonl", for one).
	if keyPath(base, k, ext) != path {
		return Key{}, false
	}
	return k, true
}
