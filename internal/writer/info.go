package writer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Info describes one session.
type Info struct {
	Key         layout.Key
	Path        string
	Title       string
	FirstPrompt string
	Cwd         string
	Entries     uint64
	Bytes       uint64
	Pending     uint64
	Malformed   uint64
	ModifiedMs  int64
	CreatedMs   int64
	Active      bool
}

// summary accumulates listing metadata line by line.
type summary struct {
	customTitle, aiTitle, firstPrompt, cwd string
	created                                int64
	entries, bytes, malformed              uint64
}

func (s *summary) add(line []byte) {
	s.entries++
	s.bytes += uint64(len(line)) + 1
	if !json.Valid(line) || len(line) == 0 || line[0] != '{' {
		s.malformed++
		return
	}
	typ, _ := transcript.TopLevelString(line, "type")
	if s.cwd == "" {
		if c, ok := transcript.TopLevelString(line, "cwd"); ok {
			s.cwd = c
		}
	}
	if s.created == 0 {
		if ts, ok := transcript.TopLevelString(line, "timestamp"); ok {
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				s.created = t.UnixMilli()
			}
		}
	}
	switch typ {
	case "custom-title":
		if t, ok := transcript.TopLevelString(line, "customTitle"); ok {
			s.customTitle = t
		}
	case "ai-title":
		if t, ok := transcript.TopLevelString(line, "aiTitle"); ok {
			s.aiTitle = t
		}
	case "user":
		if s.firstPrompt == "" {
			s.firstPrompt = firstPrompt(line)
		}
	}
}

// firstPrompt returns the text of a real user prompt: not a tool result,
// not a meta entry, not a compaction summary.
func firstPrompt(line []byte) string {
	var e struct {
		IsMeta           bool `json:"isMeta"`
		IsCompactSummary bool `json:"isCompactSummary"`
		Message          struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(line, &e) != nil || e.IsMeta || e.IsCompactSummary {
		return ""
	}
	var text string
	if json.Unmarshal(e.Message.Content, &text) != nil {
		var blocks []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(e.Message.Content, &blocks) != nil {
			return ""
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				return ""
			}
			if b.Type == "text" && text == "" {
				text = b.Text
			}
		}
	}
	text = strings.TrimSpace(text)
	if strings.HasPrefix(text, "<") { // command wrappers and caveats, not a prompt
		return ""
	}
	return cut(text, 200)
}

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

func (s *summary) title() string {
	if s.customTitle != "" {
		return s.customTitle
	}
	return s.aiTitle
}

// Info describes key. A session without a writer or journal is read
// straight from its file, without starting a writer.
func (m *Manager) Info(ctx context.Context, key layout.Key) (Info, error) {
	if err := key.Validate(); err != nil {
		return Info{}, err
	}
	info := Info{Key: key, Path: m.cfg.Layout.TranscriptPath(key)}
	if !m.existsOnDisk(key) {
		return info, fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
	}
	var sum summary
	_, jerr := m.cfg.FS.Lstat(m.cfg.Layout.JournalPath(key))
	if m.IsActive(key) || jerr == nil {
		var sn *snapshot
		err := m.do(ctx, key, func(st *state) error {
			var err error
			sn, err = st.snapshot()
			return err
		})
		if err != nil {
			return info, err
		}
		defer sn.close()
		if !sn.exists {
			return info, fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
		}
		info.Pending = uint64(len(sn.pending))
		r := reader{send: func(es []Entry) error {
			for _, e := range es {
				sum.add(e.Data)
			}
			return nil
		}}
		if err := r.serve(sn); err != nil {
			return info, err
		}
		info.Active = m.IsActive(key)
	} else {
		f, err := m.cfg.FS.OpenFile(info.Path, os.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return info, fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
			}
			return info, fmt.Errorf("open %s: %w", info.Path, errdefs.FromIO(err))
		}
		defer f.Close()
		sc := transcript.NewLineScanner(f)
		for sc.Scan() {
			sum.add(sc.Line())
			if !sc.HasNewline() {
				sum.bytes--
			}
		}
		if err := sc.Err(); err != nil {
			return info, fmt.Errorf("read %s: %w", info.Path, errdefs.FromIO(err))
		}
	}
	for _, p := range []string{info.Path, m.cfg.Layout.JournalPath(key)} {
		if fi, err := m.cfg.FS.Lstat(p); err == nil && fi.ModTime().UnixMilli() > info.ModifiedMs {
			info.ModifiedMs = fi.ModTime().UnixMilli()
		}
	}
	info.Title = sum.title()
	info.FirstPrompt = sum.firstPrompt
	info.Cwd = sum.cwd
	info.CreatedMs = sum.created
	info.Entries = sum.entries
	info.Bytes = sum.bytes
	info.Malformed = sum.malformed
	return info, nil
}

// List describes the main sessions of one project (projectKey != "") or of
// every project, newest first. Sessions that exist only in a journal are
// included.
func (m *Manager) List(ctx context.Context, projectKey string) ([]Info, error) {
	keys := make(map[layout.Key]bool)
	var projects []string
	if projectKey != "" {
		if err := layout.ValidateProjectKey(projectKey); err != nil {
			return nil, err
		}
		projects = []string{projectKey}
	} else {
		ents, err := m.cfg.FS.ReadDir(m.cfg.Layout.ProjectsDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", m.cfg.Layout.ProjectsDir(), errdefs.FromIO(err))
		}
		for _, e := range ents {
			if e.IsDir() {
				projects = append(projects, e.Name())
			}
		}
	}
	for _, p := range projects {
		ents, err := m.cfg.FS.ReadDir(m.cfg.Layout.ProjectDir(p))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", m.cfg.Layout.ProjectDir(p), errdefs.FromIO(err))
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			if k, ok := m.cfg.Layout.ParseTranscriptPath(m.cfg.Layout.ProjectDir(p) + "/" + e.Name()); ok && k.Subpath == "" {
				keys[k] = true
			}
		}
	}
	journaled, err := m.journaledKeys()
	if err != nil {
		return nil, err
	}
	for _, k := range journaled {
		if k.Subpath == "" && (projectKey == "" || k.ProjectKey == projectKey) {
			keys[k] = true
		}
	}
	out := make([]Info, 0, len(keys))
	for k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, err := m.Info(ctx, k)
		if errdefs.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ModifiedMs != out[j].ModifiedMs {
			return out[i].ModifiedMs > out[j].ModifiedMs
		}
		return out[i].Key.String() < out[j].Key.String()
	})
	return out, nil
}

// Find returns the keys of every session with this id (and subpath) in any
// project: open writers, canonical files and journals.
func (m *Manager) Find(sessionID, subpath string) ([]layout.Key, error) {
	if err := layout.ValidateSessionID(sessionID); err != nil {
		return nil, err
	}
	if subpath != "" {
		if err := layout.ValidateSubpath(subpath); err != nil {
			return nil, err
		}
	}
	found := make(map[layout.Key]bool)
	m.mu.Lock()
	for k := range m.sessions {
		if k.SessionID == sessionID && k.Subpath == subpath {
			found[k] = true
		}
	}
	m.mu.Unlock()
	for _, base := range []struct {
		dir  string
		path func(layout.Key) string
	}{
		{m.cfg.Layout.ProjectsDir(), m.cfg.Layout.TranscriptPath},
		{m.cfg.Layout.JournalDir(), m.cfg.Layout.JournalPath},
	} {
		ents, err := m.cfg.FS.ReadDir(base.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", base.dir, errdefs.FromIO(err))
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			k := layout.Key{ProjectKey: e.Name(), SessionID: sessionID, Subpath: subpath}
			if k.Validate() != nil {
				continue
			}
			if fi, err := m.cfg.FS.Lstat(base.path(k)); err == nil && fi.Mode().IsRegular() {
				found[k] = true
			}
		}
	}
	keys := make([]layout.Key, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ProjectKey < keys[j].ProjectKey })
	return keys, nil
}
