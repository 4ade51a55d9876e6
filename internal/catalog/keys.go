package catalog

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

// Subkeys lists the subagent transcripts of key's session, from disk,
// the journal and live writers.
func (c *Catalog) Subkeys(key layout.Key) ([]string, error) {
	main := key.Main()
	if err := main.Validate(); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	dir := c.layout.SessionDir(main)
	err := fsys.Walk(c.fs, dir, func(path string, d fs.DirEntry) error {
		if d.Type().IsRegular() {
			if k, ok := c.layout.ParseTranscriptPath(path); ok && k.Subpath != "" && k.Main() == main {
				set[k.Subpath] = true
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	for _, k := range c.w.WriterKeys() {
		if k.Subpath != "" && k.Main() == main {
			set[k.Subpath] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// AllKeys lists every transcript key of one project (or all), subagents
// included when subagents is set: files on disk, the journal, live
// writers.
func (c *Catalog) AllKeys(projectKey string, subagents bool) ([]layout.Key, error) {
	set := map[layout.Key]bool{}
	L := c.layout
	root := L.ProjectsDir()
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		root = L.ProjectDir(projectKey)
	}
	err := fsys.Walk(c.fs, root, func(path string, d fs.DirEntry) error {
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
	for _, k := range c.w.WriterKeys() {
		if (projectKey == "" || k.ProjectKey == projectKey) && (subagents || k.Subpath == "") {
			set[k] = true
		}
	}
	return sortedKeys(set, byName), nil
}

// mainKeys lists the main sessions of one project (or all) without reading
// any transcript: folder listings, the journal, live writers.
func (c *Catalog) mainKeys(projectKey string) ([]layout.Key, error) {
	projects, err := c.projects(projectKey)
	if err != nil {
		return nil, err
	}
	L := c.layout
	set := map[layout.Key]bool{}
	for _, p := range projects {
		dir := L.ProjectDir(p)
		ents, err := c.fs.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			if k, ok := L.ParseTranscriptPath(filepath.Join(dir, e.Name())); ok && k.Subpath == "" {
				set[k] = true
			}
		}
	}
	// Sessions that so far live only in the journal, or in a writer.
	for _, k := range c.w.WriterKeys() {
		if k.Subpath == "" && (projectKey == "" || k.ProjectKey == projectKey) {
			set[k] = true
		}
	}
	return sortedKeys(set, layout.Key.Less), nil
}

// projects lists projectKey alone when set (validated), else every
// project folder.
func (c *Catalog) projects(projectKey string) ([]string, error) {
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		return []string{projectKey}, nil
	}
	dir := c.layout.ProjectsDir()
	ents, err := c.fs.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	var projects []string
	for _, e := range ents {
		if e.IsDir() {
			projects = append(projects, e.Name())
		}
	}
	return projects, nil
}

// Find returns the keys of every session with this id (and subpath) in any
// project: live writers, canonical files and the journal. The id may be in
// either case (see SessionKey).
func (c *Catalog) Find(sessionID, subpath string) ([]layout.Key, error) {
	if err := layout.ValidateSessionID(sessionID); err != nil {
		return nil, err
	}
	if subpath != "" {
		if err := layout.ValidateSubpath(subpath); err != nil {
			return nil, err
		}
	}
	// The lower-case form first: an id in upper case finds the session
	// stored under lower case, and only where there is none one stored
	// under the id exactly as given.
	for _, id := range layout.SessionIDForms(sessionID) {
		keys, err := c.find(id, subpath)
		if err != nil || len(keys) > 0 {
			return keys, err
		}
	}
	return nil, nil
}

func (c *Catalog) find(sessionID, subpath string) ([]layout.Key, error) {
	found := make(map[layout.Key]bool)
	for _, k := range c.w.WriterKeys() {
		if k.SessionID == sessionID && k.Subpath == subpath {
			found[k] = true
		}
	}
	onDisk, err := c.inProjects(sessionID, subpath)
	if err != nil {
		return nil, err
	}
	for _, k := range onDisk {
		found[k] = true
	}
	return sortedKeys(found, func(a, b layout.Key) bool { return a.ProjectKey < b.ProjectKey }), nil
}

// inProjects returns the keys of sessionID (and subpath) in the projects
// whose transcript is a regular file.
func (c *Catalog) inProjects(sessionID, subpath string) ([]layout.Key, error) {
	dir := c.layout.ProjectsDir()
	ents, err := c.fs.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", dir, errdefs.FromIO(err))
	}
	var keys []layout.Key
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		k := layout.Key{ProjectKey: e.Name(), SessionID: sessionID, Subpath: subpath}
		if k.Validate() != nil {
			continue
		}
		p := c.layout.TranscriptPath(k)
		fi, err := c.fs.Lstat(p)
		switch {
		case err == nil:
			if fi.Mode().IsRegular() {
				keys = append(keys, k)
			}
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			// A project that cannot be looked in may hold the session:
			// taken for absent, another copy would be picked as the
			// only one.
			return nil, fmt.Errorf("look for session %s in %s: %w", sessionID, p, errdefs.FromIO(err))
		}
	}
	return keys, nil
}

// SessionKey returns the key under which the session k names is stored:
// one UUID is one session whatever its case, and sessiond stores every
// session under the lower-case id (layout.CanonicalSessionID). A session
// stored under an upper- or mixed-case id, exactly as given, is kept under
// that name while no lower-case one exists, so that writing to it does not
// start a second file for the same UUID.
// A disk that cannot tell is an error: either answer could start a second
// file for the same UUID.
func (c *Catalog) SessionKey(k layout.Key) (layout.Key, error) {
	forms := layout.SessionIDForms(k.SessionID)
	if len(forms) > 1 {
		for _, id := range forms {
			s := k
			s.SessionID = id
			stored, err := c.sessionStored(s)
			if err != nil {
				return k, fmt.Errorf("find under which id session %s is stored: %w", k.SessionID, err)
			}
			if stored {
				return s, nil
			}
		}
	}
	k.SessionID = forms[0]
	return k, nil
}

// sessionStored reports whether k's session has anything under its id:
// a writer, journaled entries, its transcript or its session folder.
func (c *Catalog) sessionStored(k layout.Key) (bool, error) {
	keys := []layout.Key{k.Main()}
	if k.Subpath != "" {
		keys = append(keys, k)
	}
	for _, x := range keys {
		if ok, err := c.w.Exists(x); err != nil || ok {
			return ok, err
		}
	}
	p := c.layout.SessionDir(k)
	_, err := c.fs.Lstat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return false, nil
	}
	return false, fmt.Errorf("inspect %s: %w", p, errdefs.FromIO(err))
}

// sortedKeys returns the keys of set in the order less gives.
func sortedKeys(set map[layout.Key]bool, less func(a, b layout.Key) bool) []layout.Key {
	keys := make([]layout.Key, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
	return keys
}

// byName orders keys by their string form.
func byName(a, b layout.Key) bool { return a.String() < b.String() }
