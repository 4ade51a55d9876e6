package sdkcheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

func TestVersionMatchesPin(t *testing.T) {
	s := Require(t)
	v, err := s.Version(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := pinnedVersion(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != pinned {
		t.Errorf("sdkcli.mjs loads SDK %s, package.json pins %s", v.Version, pinned)
	}
	// The session functions this package wraps, plus the store class the
	// import op needs: an SDK upgrade that renames one must fail here.
	for _, name := range []string{
		"listSessions", "getSessionInfo", "getSessionMessages", "listSubagents", "getSubagentMessages",
		"forkSession", "renameSession", "tagSession", "deleteSession", "archiveSession", "unarchiveSession",
		"importSessionToStore", "InMemorySessionStore",
	} {
		if !slices.Contains(v.Exports, name) {
			t.Errorf("SDK %s does not export %s", v.Version, name)
		}
	}
}

func TestCallErrors(t *testing.T) {
	s := Require(t)
	config := t.TempDir()

	err := s.Call(ctx(t), config, map[string]any{"op": "noSuchOp"}, nil)
	var sdkErr *SDKError
	if err == nil || errors.As(err, &sdkErr) || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("unknown op: err = %v, want a request error naming the op", err)
	}
	err = s.Call(ctx(t), config, map[string]any{"op": "listSessions", "dirr": "/x"}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown argument "dirr"`) {
		t.Errorf("misspelt argument: err = %v", err)
	}
	if err := s.Call(ctx(t), "", map[string]any{"op": "listSessions"}, nil); err == nil {
		t.Error("empty configDir: no error, want a refusal (the SDK would read ~/.claude)")
	}

	// An error thrown by the SDK itself comes back typed.
	err = s.RenameSession(ctx(t), config, "not-a-uuid", "x", "")
	if !errors.As(err, &sdkErr) || sdkErr.Op != "renameSession" || !strings.Contains(sdkErr.Message, "Invalid sessionId") {
		t.Errorf("RenameSession(not-a-uuid) = %v, want an SDKError from renameSession", err)
	}
	err = s.RenameSession(ctx(t), config, shortSID, "x", "")
	if !errors.As(err, &sdkErr) || !strings.Contains(sdkErr.Message, "not found") {
		t.Errorf("RenameSession(missing session) = %v, want SDK's not found", err)
	}

	// An empty config dir has no sessions, and reads say so without error.
	list, err := s.ListSessions(ctx(t), config, "")
	if err != nil || len(list) != 0 {
		t.Errorf("ListSessions(empty) = %v, %v; want none", list, err)
	}
	info, err := s.GetSessionInfo(ctx(t), config, shortSID, "")
	if err != nil || info != nil {
		t.Errorf("GetSessionInfo(missing) = %+v, %v; want nil, nil", info, err)
	}
}

func TestListSessions(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	fx := fixtures(t)

	// Files the listing must ignore: a subagent transcript under a
	// session-like name (first line isSidechain), names that are not
	// <uuid>.jsonl, an empty transcript, and a session folder.
	sub, err := os.ReadFile(filepath.Join(fx, spotterAgents["a7be2f0"]))
	if err != nil {
		t.Fatal(err)
	}
	later := w.mtimes[spotterSID].Add(time.Hour)
	writeFile(t, filepath.Join(w.spotterKey, "0c6a4f2e-1111-4222-8333-444455556666.jsonl"), sub, later)
	writeFile(t, filepath.Join(w.spotterKey, "notes.jsonl"), sub, later)
	writeFile(t, filepath.Join(w.spotterKey, "0c6a4f2e-1111-4222-8333-444455557777.jsonl.tmp"), sub, later)
	writeFile(t, filepath.Join(w.spotterKey, "0c6a4f2e-1111-4222-8333-444455558888.jsonl"), nil, later)

	got, err := s.ListSessions(ctx(t), w.config, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("spotter project lists %d sessions, want only %s: %+v", len(got), spotterSID, got)
	}
	createdAt := firstTimestamp(t, filepath.Join(fx, spotterMain))
	want := SessionInfo{
		SessionID:    spotterSID,
		Summary:      spotterPrompt,
		LastModified: w.mtimes[spotterSID].UnixMilli(),
		FileSize:     spotterFileSize,
		FirstPrompt:  spotterPrompt,
		GitBranch:    "spotter-fum",
		Cwd:          spotterCwd,
		CreatedAt:    createdAt.UnixMilli(),
	}
	if got[0] != want {
		t.Errorf("spotter session:\n got  %+v\n want %+v", got[0], want)
	}

	got, err = s.ListSessions(ctx(t), w.config, w.demoDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, si := range got {
		ids = append(ids, si.SessionID)
	}
	var wantIDs []string
	for _, d := range demoSessions {
		wantIDs = append(wantIDs, d.sid)
	}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("demo project lists\n %v\nwant, newest first,\n %v", ids, wantIDs)
	}
	for i, d := range demoSessions {
		si := got[i]
		if !strings.HasPrefix(si.Summary, d.summaryPrefix) {
			t.Errorf("%s: summary %q, want it to start with %q", d.file, si.Summary, d.summaryPrefix)
		}
		if si.LastModified != w.mtimes[d.sid].UnixMilli() {
			t.Errorf("%s: lastModified %d, want the mtime %d", d.file, si.LastModified, w.mtimes[d.sid].UnixMilli())
		}
		if si.CustomTitle != "" || si.Tag != "" || si.Archived != nil {
			t.Errorf("%s: title %q, tag %q, archived %v; the fixture has none", d.file, si.CustomTitle, si.Tag, si.Archived)
		}
	}

	page, err := s.ListSessionsWith(ctx(t), w.config, ListOptions{Dir: w.demoDir, Limit: 2, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].SessionID != wantIDs[1] || page[1].SessionID != wantIDs[2] {
		t.Errorf("limit 2 offset 1 = %+v, want sessions %v", page, wantIDs[1:3])
	}

	all, err := s.ListSessions(ctx(t), w.config, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1+len(demoSessions) {
		t.Errorf("all projects list %d sessions, want %d", len(all), 1+len(demoSessions))
	}

	info, err := s.GetSessionInfo(ctx(t), w.config, spotterSID, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	if info == nil || *info != want {
		t.Errorf("GetSessionInfo(spotter) = %+v, want %+v", info, want)
	}
	info, err = s.GetSessionInfo(ctx(t), w.config, "0c6a4f2e-1111-4222-8333-444455556666", w.spotterDir)
	if err != nil || info != nil {
		t.Errorf("GetSessionInfo(subagent file under a session name) = %+v, %v; want nil", info, err)
	}
}

// firstTimestamp is the first "timestamp":"..." in the file's head, which
// is where the SDK takes createdAt from (nested ones included).
func firstTimestamp(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"timestamp":"([^"]+)"`).FindSubmatch(b[:min(len(b), 64<<10)])
	if m == nil {
		t.Fatalf("%s: no timestamp", path)
	}
	ts, err := time.Parse(time.RFC3339Nano, string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestSessionMessagesOfTruncatedSession(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	entries := readEntries(t, filepath.Join(w.spotterKey, spotterSID+".jsonl"))

	raws, err := s.GetSessionMessages(ctx(t), w.config, spotterSID, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	msgs := decodeAll(t, raws)
	checkChain(t, msgs, entries, spotterSID, true)

	// The chain starts after the compaction: its summary comes first.
	boundary := slices.IndexFunc(entries, func(e entry) bool { return e.Subtype == "compact_boundary" })
	if boundary < 0 {
		t.Fatal("fixture has no compact_boundary")
	}
	if !msgs[0].IsCompactSummary {
		t.Errorf("first message %s is not the compact summary", msgs[0].UUID)
	}
	// It ends at the last whole user/assistant line: the cut line is
	// skipped.
	if last := lastChat(entries); msgs[len(msgs)-1].UUID != last.UUID {
		t.Errorf("last message %s, want the last whole user/assistant line's %s", msgs[len(msgs)-1].UUID, last.UUID)
	}
	// The cut line held a tool_result: its tool_use is now unanswered, and
	// the checker finds exactly that.
	orphans := unansweredToolUses(entries)
	if len(orphans) != 1 {
		t.Fatalf("fixture has unanswered tool_uses %v, want exactly one", orphans)
	}
	problems := ToolPairingProblems(raws)
	if len(problems) != 1 || !strings.Contains(problems[0], orphans[0]) {
		t.Errorf("ToolPairingProblems = %q, want one naming %s", problems, orphans[0])
	}

	// includeSystemMessages adds the compact boundary in front.
	withSys, err := s.GetSessionMessagesWith(ctx(t), w.config, spotterSID, MessageOptions{Dir: w.spotterDir, IncludeSystemMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	sys := decodeAll(t, withSys)
	if len(sys) != len(msgs)+1 || sys[0].Type != "system" || sys[0].UUID != entries[boundary].UUID {
		t.Errorf("with system messages: %d messages starting with %s %s; want %d starting with the compact boundary %s",
			len(sys), sys[0].Type, sys[0].UUID, len(msgs)+1, entries[boundary].UUID)
	}

	page, err := s.GetSessionMessagesWith(ctx(t), w.config, spotterSID, MessageOptions{Dir: w.spotterDir, Limit: 5, Offset: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 5 || !slices.EqualFunc(page, raws[2:7], func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		t.Errorf("limit 5 offset 2 gave %d messages, not messages 2..6", len(page))
	}

	// The project is found by the working folder: another folder sees none.
	none, err := s.GetSessionMessages(ctx(t), w.config, spotterSID, w.demoDir)
	if err != nil || len(none) != 0 {
		t.Errorf("messages from the wrong project folder: %d, %v; want none", len(none), err)
	}
}

func TestSubagents(t *testing.T) {
	s := Require(t)
	w := newWorld(t)

	ids, err := s.ListSubagents(ctx(t), w.config, spotterSID, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{"a7be2f0", "acompact-f46190"}; !slices.Equal(ids, want) {
		t.Fatalf("ListSubagents = %v, want %v", ids, want)
	}
	for id, f := range spotterAgents {
		entries := readEntries(t, filepath.Join(fixtures(t), f))
		raws, err := s.GetSubagentMessages(ctx(t), w.config, spotterSID, id, w.spotterDir)
		if err != nil {
			t.Fatal(err)
		}
		msgs := decodeAll(t, raws)
		checkChain(t, msgs, entries, spotterSID, false)
		// The subagent reader walks back from the last user/assistant
		// line.
		if got, last := msgs[len(msgs)-1].UUID, lastChat(entries); got != last.UUID {
			t.Errorf("agent %s: last message %s, want %s", id, got, last.UUID)
		}
		if p := ToolPairingProblems(raws); len(p) != 0 {
			t.Errorf("agent %s: tool pairing problems: %q", id, p)
		}
	}

	none, err := s.GetSubagentMessages(ctx(t), w.config, spotterSID, "nosuchagent", w.spotterDir)
	if err != nil || len(none) != 0 {
		t.Errorf("unknown agent: %d messages, %v; want none", len(none), err)
	}
	ids, err = s.ListSubagents(ctx(t), w.config, shortSID, w.demoDir)
	if err != nil || len(ids) != 0 {
		t.Errorf("session without subagents: %v, %v; want none", ids, err)
	}

	// Nested folders under subagents/ are searched too.
	b, err := os.ReadFile(filepath.Join(fixtures(t), spotterAgents["acompact-f46190"]))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(w.spotterKey, spotterSID, "subagents", "workflows", "run-1", "agent-anested.jsonl"), b, time.Now())
	ids, err = s.ListSubagents(ctx(t), w.config, spotterSID, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ids, "anested") {
		t.Errorf("ListSubagents = %v, want the nested agent-anested too", ids)
	}
}

func TestToolPairingOfFixtures(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	for _, d := range demoSessions {
		t.Run(d.file, func(t *testing.T) {
			raws, err := s.GetSessionMessages(ctx(t), w.config, d.sid, w.demoDir)
			if err != nil {
				t.Fatal(err)
			}
			entries := readEntries(t, filepath.Join(w.demoKey, d.sid+".jsonl"))
			checkChain(t, decodeAll(t, raws), entries, d.sid, true)
			problems := ToolPairingProblems(raws)
			if d.sid != cctraceSID {
				if len(problems) != 0 {
					t.Errorf("clean fixture has tool pairing problems:\n%s", strings.Join(problems, "\n"))
				}
				return
			}
			// cctrace was copied while a tool ran: its last tool_use has no
			// result anywhere in the file.
			orphans := unansweredToolUses(entries)
			if len(orphans) != 1 {
				t.Fatalf("cctrace has unanswered tool_uses %v, want exactly one", orphans)
			}
			if len(problems) != 1 || !strings.Contains(problems[0], orphans[0]) {
				t.Errorf("ToolPairingProblems = %q, want one naming %s", problems, orphans[0])
			}
		})
	}
}

func TestMutations(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	c := ctx(t)
	path := filepath.Join(w.demoKey, shortSID+".jsonl")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info := func(sid string) *SessionInfo {
		t.Helper()
		i, err := s.GetSessionInfo(c, w.config, sid, w.demoDir)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}

	// Rename appends one custom-title line and leaves the rest alone.
	title := "  Renamed <&> \u2028 ok  "
	if err := s.RenameSession(c, w.config, shortSID, title, w.demoDir); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := `{"type":"custom-title","customTitle":"Renamed <&> ` + "\u2028" + ` ok","sessionId":"` + shortSID + `"}` + "\n"
	if !bytes.HasPrefix(after, before) || string(after[len(before):]) != wantLine {
		t.Errorf("rename appended %q, want %q", after[min(len(before), len(after)):], wantLine)
	}
	if i := info(shortSID); i.CustomTitle != strings.TrimSpace(title) || i.Summary != strings.TrimSpace(title) {
		t.Errorf("after rename: title %q, summary %q", i.CustomTitle, i.Summary)
	}

	if err := s.TagSession(c, w.config, shortSID, "red", w.demoDir); err != nil {
		t.Fatal(err)
	}
	if i := info(shortSID); i.Tag != "red" {
		t.Errorf("after tag: tag %q", i.Tag)
	}
	var sdkErr *SDKError
	if err := s.TagSession(c, w.config, shortSID, " ", w.demoDir); !errors.As(err, &sdkErr) {
		t.Errorf("blank tag: %v, want the SDK's refusal", err)
	}
	if err := s.ClearTag(c, w.config, shortSID, w.demoDir); err != nil {
		t.Fatal(err)
	}
	if i := info(shortSID); i.Tag != "" {
		t.Errorf("after clearing: tag %q", i.Tag)
	}

	if err := s.ArchiveSession(c, w.config, shortSID, w.demoDir); err != nil {
		t.Fatal(err)
	}
	if i := info(shortSID); i.Archived == nil || !*i.Archived {
		t.Errorf("after archive: archived %v", i.Archived)
	}
	if err := s.UnarchiveSession(c, w.config, shortSID, w.demoDir); err != nil {
		t.Fatal(err)
	}
	if i := info(shortSID); i.Archived == nil || *i.Archived {
		t.Errorf("after unarchive: archived %v", i.Archived)
	}

	// Fork up to the fourth message: the copy has those four, new uuids.
	src, err := s.GetSessionMessages(c, w.config, shortSID, w.demoDir)
	if err != nil {
		t.Fatal(err)
	}
	srcMsgs := decodeAll(t, src)
	forkID, err := s.ForkSession(c, w.config, shortSID, ForkOptions{Dir: w.demoDir, UpToMessageID: srcMsgs[3].UUID, Title: "My fork"})
	if err != nil {
		t.Fatal(err)
	}
	forked, err := s.GetSessionMessages(c, w.config, forkID, w.demoDir)
	if err != nil {
		t.Fatal(err)
	}
	forkMsgs := decodeAll(t, forked)
	if len(forkMsgs) != 4 {
		t.Fatalf("fork has %d messages, want 4", len(forkMsgs))
	}
	for i, m := range forkMsgs {
		if m.UUID == srcMsgs[i].UUID || m.SessionID != forkID || !bytes.Equal(m.Message, srcMsgs[i].Message) {
			t.Errorf("fork message %d: uuid %s session %s; want a new uuid, session %s, the source's message", i, m.UUID, m.SessionID, forkID)
		}
	}
	if i := info(forkID); i == nil || i.CustomTitle != "My fork" {
		t.Errorf("fork info %+v, want title %q", i, "My fork")
	}
	if runtime.GOOS != "windows" {
		st, err := os.Stat(filepath.Join(w.demoKey, forkID+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("fork file mode %v, want 0600", st.Mode().Perm())
		}
	}
	untitled, err := s.ForkSession(c, w.config, shortSID, ForkOptions{Dir: w.demoDir})
	if err != nil {
		t.Fatal(err)
	}
	if i, want := info(untitled), strings.TrimSpace(title)+" (fork)"; i == nil || i.CustomTitle != want {
		t.Errorf("untitled fork info %+v, want title %q", i, want)
	}
	if _, err := s.ForkSession(c, w.config, shortSID, ForkOptions{Dir: w.demoDir, UpToMessageID: "nope"}); !errors.As(err, &sdkErr) {
		t.Errorf("fork up to an unknown message: %v, want the SDK's error", err)
	}

	// Delete removes the transcript and its folder (archived.json is in it).
	if err := s.DeleteSession(c, w.config, shortSID, w.demoDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(w.demoKey, shortSID)} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after delete, %s: %v", p, err)
		}
	}
	if i := info(shortSID); i != nil {
		t.Errorf("after delete: info %+v", i)
	}
	if err := s.DeleteSession(c, w.config, shortSID, w.demoDir); !errors.As(err, &sdkErr) {
		t.Errorf("second delete: %v, want the SDK's not found", err)
	}
}

func TestImportSessionToStore(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	keys, err := s.ImportSessionToStore(ctx(t), w.config, spotterSID, w.spotterDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"":                                filepath.Join(w.spotterKey, spotterSID+".jsonl"),
		"subagents/agent-a7be2f0":         filepath.Join(w.spotterKey, spotterSID, "subagents", "agent-a7be2f0.jsonl"),
		"subagents/agent-acompact-f46190": filepath.Join(w.spotterKey, spotterSID, "subagents", "agent-acompact-f46190.jsonl"),
	}
	if len(keys) != len(want) {
		t.Fatalf("import wrote %d keys, want %d", len(keys), len(want))
	}
	for _, k := range keys {
		path, ok := want[k.Key.Subpath]
		if !ok {
			t.Errorf("unexpected key %+v", k.Key)
			continue
		}
		if k.Key.ProjectKey != filepath.Base(w.spotterKey) || k.Key.SessionID != spotterSID {
			t.Errorf("key %+v, want project %s session %s", k.Key, filepath.Base(w.spotterKey), spotterSID)
		}
		// Every line that parses, in order; the cut line is dropped.
		entries := readEntries(t, path)
		if len(k.Entries) != len(entries) {
			t.Errorf("%q: %d entries, want %d", k.Key.Subpath, len(k.Entries), len(entries))
			continue
		}
		for i, raw := range k.Entries {
			var e entry
			if err := json.Unmarshal(raw, &e); err != nil || e.Type != entries[i].Type || e.UUID != entries[i].UUID {
				t.Errorf("%q entry %d is %s %s, want %s %s", k.Key.Subpath, i, e.Type, e.UUID, entries[i].Type, entries[i].UUID)
				break
			}
		}
	}
}

// TestReadsWriteNothing: reading must leave the config dir as it was.
func TestReadsWriteNothing(t *testing.T) {
	s := Require(t)
	w := newWorld(t)
	before := tree(t, w.config)
	c := ctx(t)
	if _, err := s.ListSessions(c, w.config, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSessionInfo(c, w.config, spotterSID, w.spotterDir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSessionMessages(c, w.config, spotterSID, w.spotterDir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListSubagents(c, w.config, spotterSID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSubagentMessages(c, w.config, spotterSID, "a7be2f0", ""); err != nil {
		t.Fatal(err)
	}
	if after := tree(t, w.config); !slices.Equal(before, after) {
		t.Errorf("reads changed the config dir:\nbefore %v\nafter  %v", before, after)
	}
}

// tree lists every path under root with its size and mtime.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out = append(out, rel+"/")
		} else {
			out = append(out, rel+" "+info.ModTime().UTC().Format(time.RFC3339Nano)+" "+strconv.FormatInt(info.Size(), 10))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
