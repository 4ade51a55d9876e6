package sdkcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

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
