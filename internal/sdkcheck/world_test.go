package sdkcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// The real transcripts in shared/fixtures (see SOURCES.md there).
const (
	spotterSID = "8463c716-a2ea-4c14-9efa-87158ebd9f20" // TRUNCATED main + two subagents
	cctraceSID = "132b2f66-ee5f-46f6-8904-32d9dc4d36c3" // ends with an unanswered tool_use
	shortSID   = "55604662-cf2a-4331-851a-ec234028f8ca"
)

var (
	spotterMain     = "marot__spotter__" + spotterSID + ".TRUNCATED.jsonl"
	spotterAgents   = map[string]string{"a7be2f0": "marot__spotter__" + spotterSID + "__subagents__agent-a7be2f0.jsonl", "acompact-f46190": "marot__spotter__" + spotterSID + "__subagents__agent-acompact-f46190.jsonl"}
	spotterCwd      = "/home/USER/projects/spotter-worktrees/spotter-fum"
	spotterPrompt   = "Work on bead spotter-fum. Run bd show spotter-fum to see the issue details and bd ready to find available subtasks. Start with the first ready task."
	spotterFileSize = int64(1702797)
)

// demoSessions are the clean main transcripts that go into one project,
// newest first (the test gives them mtimes in this order), with what the SDK
// must show as their summary: no fixture has a title, so it is the first
// real prompt (a slash command counts only when nothing else does).
var demoSessions = []struct {
	file, sid, summaryPrefix string
}{
	{"marot__spotter__short.jsonl", shortSID, "mix phx.server doesnt seem to start"},
	{"marot__spotter__tool_heavy.jsonl", "d6e0bada-1959-4eec-a9d2-0bfade768d8f", "start phoenix in background"},
	{"marot__spotter__subagent.jsonl", "491e126e-1e71-469c-ade2-fcc8af567c74", "/handgemacht:create-beads"},
	{"jimmc414__cctrace__main.jsonl", cctraceSID, "@claude-code-prompt.md really ULTRATHINK this"},
	{"d-kimuson__claude-code-viewer__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", "1af7fc5e-8455-4414-9ccd-011d40f70b2a", "/init"},
	// The SDK takes the first user line that is no tool_result, meta or
	// compact summary, sidechain or not: here an inline Task prompt.
	{"d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl", "5c0375b4-57a5-4f26-b12d-d022ee4e51b7", "Examine the package.json file(s) in /path/to/Demo"},
	// Its leading summary entry is outside the last 64 KiB, where the SDK
	// looks for one.
	{"d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl", "fe5e1c67-53e7-4862-81ae-d0e013e3270b", "Create React components for the TODO app"},
}

// fixtures is shared/fixtures beside the repository; the tests fail without
// it rather than pass having checked nothing.
func fixtures(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "SOURCES.md")); err != nil {
		t.Fatalf("the real transcripts are missing (want shared/fixtures beside the repository): %v", err)
	}
	return dir
}

// world is a CLAUDE_CONFIG_DIR built from the fixtures, with two projects
// whose working folders exist.
type world struct {
	config     string // CLAUDE_CONFIG_DIR
	spotterDir string // working folder of the spotter project
	spotterKey string // its projects/<key> folder
	demoDir    string
	demoKey    string
	mtimes     map[string]time.Time // session id -> mtime given
}

func newWorld(t *testing.T) *world {
	t.Helper()
	fx := fixtures(t)
	root := t.TempDir()
	w := &world{config: filepath.Join(root, "claude"), mtimes: map[string]time.Time{}}
	w.spotterDir, w.spotterKey = w.project(t, filepath.Join(root, "work", "spotter"))
	w.demoDir, w.demoKey = w.project(t, filepath.Join(root, "work", "demo"))

	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w.copy(t, filepath.Join(fx, spotterMain), filepath.Join(w.spotterKey, spotterSID+".jsonl"), base)
	w.mtimes[spotterSID] = base
	for id, f := range spotterAgents {
		w.copy(t, filepath.Join(fx, f), filepath.Join(w.spotterKey, spotterSID, "subagents", "agent-"+id+".jsonl"), base)
	}
	for i, s := range demoSessions {
		mt := base.Add(-time.Duration(i) * time.Minute)
		w.copy(t, filepath.Join(fx, s.file), filepath.Join(w.demoKey, s.sid+".jsonl"), mt)
		w.mtimes[s.sid] = mt
	}
	return w
}

// project creates the working folder dir and returns it with the folder of
// its transcripts: projects/<key>, key = realpath(dir) with every character
// outside [A-Za-z0-9] replaced by '-'.
func (w *world) project(t *testing.T, dir string) (string, string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(real, "-")
	if len(key) > 200 {
		t.Fatalf("temp folder %s is too long for a plain project key", real)
	}
	return dir, filepath.Join(w.config, "projects", key)
}

func (w *world) copy(t *testing.T, src, dst string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, b, mtime)
}

func writeFile(t *testing.T, path string, b []byte, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// entry is what the tests read of a raw transcript line.
type entry struct {
	Type        string `json:"type"`
	UUID        string `json:"uuid"`
	IsSidechain bool   `json:"isSidechain"`
	Subtype     string `json:"subtype"`
	Message     struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// readEntries parses a transcript's lines, skipping those that do not parse
// (the fixture cut mid-line has one).
func readEntries(t *testing.T, path string) []entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unansweredToolUses lists the tool_use ids of a raw transcript that no
// tool_result anywhere in it answers.
func unansweredToolUses(entries []entry) []string {
	var uses []string
	results := map[string]bool{}
	for _, e := range entries {
		var blocks []struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			ToolUseID string `json:"tool_use_id"`
		}
		if json.Unmarshal(e.Message.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			switch b.Type {
			case "tool_use":
				uses = append(uses, b.ID)
			case "tool_result":
				results[b.ToolUseID] = true
			}
		}
	}
	var out []string
	for _, id := range uses {
		if !results[id] {
			out = append(out, id)
		}
	}
	return out
}

// lastChat is the last user or assistant entry.
func lastChat(entries []entry) entry {
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.Type == "user" || e.Type == "assistant" {
			return e
		}
	}
	return entry{}
}

func decodeAll(t *testing.T, raws []json.RawMessage) []SessionMessage {
	t.Helper()
	out := make([]SessionMessage, len(raws))
	for i, raw := range raws {
		m, err := DecodeMessage(raw)
		if err != nil {
			t.Fatalf("message %d: %v: %s", i, err, raw)
		}
		out[i] = m
	}
	return out
}

// checkChain asserts that msgs are user/assistant messages of sessionID,
// taken from entries (non-sidechain ones when main is set) in file order.
func checkChain(t *testing.T, msgs []SessionMessage, entries []entry, sessionID string, main bool) {
	t.Helper()
	if len(msgs) == 0 {
		t.Fatal("no messages")
	}
	index := map[string]int{}
	for i, e := range entries {
		if e.UUID != "" && (!main || !e.IsSidechain) {
			index[e.UUID] = i
		}
	}
	last := -1
	for i, m := range msgs {
		if m.Type != "user" && m.Type != "assistant" {
			t.Errorf("message %d (%s) has type %q", i, m.UUID, m.Type)
		}
		if m.SessionID != sessionID {
			t.Errorf("message %d has session_id %q, want %q", i, m.SessionID, sessionID)
		}
		at, ok := index[m.UUID]
		if !ok {
			t.Errorf("message %d: uuid %s is not an entry of the file", i, m.UUID)
			continue
		}
		if at <= last {
			t.Errorf("message %d (line %d) is not after the one before it (line %d)", i, at+1, last+1)
		}
		last = at
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*CallTimeout)
	t.Cleanup(cancel)
	return c
}
