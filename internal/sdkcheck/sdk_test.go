package sdkcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
