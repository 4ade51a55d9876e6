package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sdkcheck"
)

const fixtures = "../../shared/fixtures"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatalf("fixture %s: %v (the fixtures must sit in ../shared/fixtures beside the repository)", name, err)
	}
	return b
}

func lines(b []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// sessionIDOf returns the sessionId the fixture's entries carry.
func sessionIDOf(t *testing.T, b []byte) string {
	for _, l := range lines(b) {
		var v struct{ SessionID string }
		if json.Unmarshal(l, &v) == nil && layout.ValidateSessionID(v.SessionID) == nil {
			return v.SessionID
		}
	}
	t.Fatal("fixture has no sessionId")
	return ""
}

// appendAll stores a whole transcript through the daemon.
func appendAll(t *testing.T, c *client.Client, s client.Session, b []byte) {
	t.Helper()
	if _, err := c.Append(context.Background(), s, lines(b)...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Flush(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestFixturesThroughSessiond: every real transcript round-trips
// byte-identical through append, compaction and show, and check reports
// its known state.
func TestFixturesThroughSessiond(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.jsonl"))
	if len(names) < 10 {
		t.Fatalf("found %d fixtures in %s", len(names), fixtures)
	}
	known := map[string][]string{ // fixture -> problem kinds check must report (nil: clean)
		"jimmc414__cctrace__main.jsonl": {"orphan_tool_use"},
	}
	for _, path := range names {
		name := filepath.Base(path)
		if strings.Contains(name, "TRUNCATED") {
			continue // not a valid transcript: tested as a foreign damaged file below
		}
		t.Run(name, func(t *testing.T) {
			b := fixture(t, name)
			s := client.Session{Cwd: cwd, ID: uuid.NewString()}
			if strings.Contains(name, "__subagents__") {
				s.ID = sessionIDOf(t, b)
				s.Subpath = "subagents/" + strings.TrimSuffix(name[strings.LastIndex(name, "__")+2:], ".jsonl")
			} else {
				s.ID = sessionIDOf(t, b)
			}
			appendAll(t, c, s, b)
			path := filepath.Join(d.root, "projects", pk, s.ID+".jsonl")
			if s.Subpath != "" {
				path = filepath.Join(d.root, "projects", pk, s.ID, s.Subpath+".jsonl")
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("canonical file differs from the fixture (%v)", err)
			}
			var shown bytes.Buffer
			err = c.Read(context.Background(), s, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
				shown.Write(e.GetData())
				shown.WriteByte('\n')
				return nil
			})
			if err != nil || !bytes.Equal(shown.Bytes(), b) {
				t.Fatalf("show differs from the fixture (%v)", err)
			}
			var problems []*sessiondv1.Problem
			err = c.Check(context.Background(), s, func(m *sessiondv1.CheckResponse) error {
				problems = append(problems, m.GetProblems()...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, p := range problems {
				kinds = append(kinds, p.GetKind())
			}
			if fmt.Sprint(kinds) != fmt.Sprint(known[name]) {
				t.Fatalf("check found %v, want %v: %v", kinds, known[name], problems)
			}
		})
	}
}

// sdkDir lays out a config dir holding one raw transcript, to ask the SDK
// what it makes of the original bytes.
func sdkDir(t *testing.T, cwd, sid string, files map[string][]byte) string {
	root := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	for rel, b := range files {
		p := filepath.Join(root, "projects", pk, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestOfficialSDKReadsSessiondOutputs: what sessiond writes (appends,
// rename, tag, archive, fork, subagents, repair, delete/restore) is read by
// the official TypeScript SDK as it reads its own files.
func TestOfficialSDKReadsSessiondOutputs(t *testing.T) {
	t.Parallel()
	sdk := sdkcheck.Require(t)
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	cwd := t.TempDir()

	main := fixture(t, "marot__spotter__tool_heavy.jsonl")
	sid := sessionIDOf(t, main)
	s := client.Session{Cwd: cwd, ID: sid}
	appendAll(t, c, s, main)
	sub := fixture(t, "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20__subagents__agent-a7be2f0.jsonl")
	appendAll(t, c, client.Session{Cwd: cwd, ID: sid, Subpath: "subagents/agent-a7be2f0"}, sub)

	// The SDK sees sessiond's files exactly as it sees the originals.
	raw := sdkDir(t, cwd, sid, map[string][]byte{sid + ".jsonl": main, sid + "/subagents/agent-a7be2f0.jsonl": sub})
	wantMsgs, err := sdk.GetSessionMessages(ctx, raw, sid, cwd)
	if err != nil {
		t.Fatal(err)
	}
	gotMsgs, err := sdk.GetSessionMessages(ctx, d.root, sid, cwd)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotMsgs) == 0 || fmt.Sprint(gotMsgs) != fmt.Sprint(wantMsgs) {
		t.Fatalf("getSessionMessages differ: %d vs %d messages", len(gotMsgs), len(wantMsgs))
	}
	wantSub, _ := sdk.GetSubagentMessages(ctx, raw, sid, "a7be2f0", cwd)
	gotSub, err := sdk.GetSubagentMessages(ctx, d.root, sid, "a7be2f0", cwd)
	if err != nil || len(gotSub) == 0 || fmt.Sprint(gotSub) != fmt.Sprint(wantSub) {
		t.Fatalf("getSubagentMessages differ: %v, %d vs %d", err, len(gotSub), len(wantSub))
	}
	agents, err := sdk.ListSubagents(ctx, d.root, sid, cwd)
	if err != nil || fmt.Sprint(agents) != "[a7be2f0]" {
		t.Fatalf("listSubagents: %v %v", agents, err)
	}
	subs, err := c.Subkeys(ctx, s)
	if err != nil || fmt.Sprint(subs) != "[subagents/agent-a7be2f0]" {
		t.Fatalf("subkeys: %v %v", subs, err)
	}

	find := func(id string) *sdkcheck.SessionInfo {
		t.Helper()
		infos, err := sdk.ListSessions(ctx, d.root, cwd)
		if err != nil {
			t.Fatal(err)
		}
		for i := range infos {
			if infos[i].SessionID == id {
				return &infos[i]
			}
		}
		return nil
	}
	info := find(sid)
	if info == nil {
		t.Fatal("listSessions does not list the session")
	}
	ours, err := c.Info(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if ours.GetSummary() != info.Summary || ours.GetFirstPrompt() != info.FirstPrompt || ours.GetCreatedMs() != info.CreatedAt || ours.GetGitBranch() != info.GitBranch {
		t.Fatalf("sessiond's listing disagrees with the SDK's:\nours %v\nsdk  %+v", ours, info)
	}

	// Rename, tag, archive.
	if _, err := c.Rename(ctx, s, "Renamed by sessiond"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tag(ctx, s, "reviewed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetArchived(ctx, s, true); err != nil {
		t.Fatal(err)
	}
	c.Flush(ctx, s)
	info = find(sid)
	if info.CustomTitle != "Renamed by sessiond" || info.Summary != "Renamed by sessiond" || info.Tag != "reviewed" || info.Archived == nil || !*info.Archived {
		t.Fatalf("after rename/tag/archive the SDK sees %+v", info)
	}
	ours, _ = c.Info(ctx, s)
	if ours.GetTitle() != "Renamed by sessiond" || ours.GetTag() != "reviewed" || !ours.GetArchived() {
		t.Fatalf("sessiond's own listing after rename/tag/archive: %v", ours)
	}
	if _, err := c.SetArchived(ctx, s, false); err != nil {
		t.Fatal(err)
	}
	if info = find(sid); info.Archived != nil && *info.Archived {
		t.Fatal("still archived after unarchive")
	}

	// Fork: the SDK reads the fork like one of its own.
	fk, err := c.Fork(ctx, s, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	forkID := fk.GetSession().GetSessionId()
	forkMsgs, err := sdk.GetSessionMessages(ctx, d.root, forkID, cwd)
	if err != nil || len(forkMsgs) != len(gotMsgs) {
		t.Fatalf("fork: %v, %d messages, original %d", err, len(forkMsgs), len(gotMsgs))
	}
	if fi := find(forkID); fi == nil || !strings.HasSuffix(fi.Summary, "(fork)") {
		t.Fatalf("fork listed as %+v", fi)
	}
	if _, err := c.Fork(ctx, s, "", "", forkID); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a fork onto an existing id must be refused: %v", err)
	}

	// Delete and restore.
	del, err := c.Delete(ctx, client.Session{Cwd: cwd, ID: forkID}, false)
	if err != nil {
		t.Fatal(err)
	}
	if find(forkID) != nil {
		t.Fatal("deleted fork still listed by the SDK")
	}
	if _, err := os.Stat(filepath.Join(del.GetTrashPath(), forkID+".jsonl")); err != nil {
		t.Fatalf("trash does not hold the transcript: %v", err)
	}
	if _, err := c.Restore(ctx, client.Session{ID: forkID}); err != nil {
		t.Fatal(err)
	}
	if find(forkID) == nil {
		t.Fatal("restored fork not listed")
	}
	if _, err := c.Delete(ctx, client.Session{Cwd: cwd, ID: forkID}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restore(ctx, client.Session{ID: forkID}); err == nil {
		t.Fatal("a purged session cannot be restored")
	}
}

// TestRepairMakesSessionResumable: a transcript damaged the known ways,
// written before sessiond existed, is reported by check and repaired so
// that the official reader sees every tool_use answered.
func TestRepairMakesSessionResumable(t *testing.T) {
	t.Parallel()
	sdk := sdkcheck.Require(t)
	d := newDaemon(t)
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	orig := fixture(t, "marot__spotter__tool_heavy.jsonl")
	sid := sessionIDOf(t, orig)
	// Drop one tool_result line as unsynchronised writers do (its child
	// chained to its parent, so the chain stays whole and only the pairing
	// breaks), splice two lines, add a NUL run and a torn tail.
	var out [][]byte
	var droppedID, droppedParent string
	for _, l := range lines(orig) {
		if droppedID == "" && bytes.Contains(l, []byte(`"tool_result"`)) {
			var v struct{ UUID, ParentUUID string }
			json.Unmarshal(l, &v)
			droppedID, droppedParent = v.UUID, v.ParentUUID
			continue
		}
		out = append(out, l)
	}
	for i, l := range out {
		out[i] = bytes.ReplaceAll(l, []byte(`"parentUuid":"`+droppedID+`"`), []byte(`"parentUuid":"`+droppedParent+`"`))
	}
	out[3] = append(out[3], []byte("\x00\x00\x00")...)
	spliced := append(append([]byte(nil), out[1]...), out[2]...)
	out = append(append(out[:1], spliced), out[3:]...)
	damaged := append(bytes.Join(out, []byte("\n")), []byte("\n{\"type\":\"user\",\"mess")...)
	path := filepath.Join(d.root, "projects", pk, sid+".jsonl")
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before, err := sdk.GetSessionMessages(ctx, d.root, sid, cwd)
	if err != nil {
		t.Fatal(err)
	}
	if len(sdkcheck.ToolPairingProblems(before)) == 0 {
		t.Fatal("the damaged transcript should have a tool pairing problem for the official reader")
	}
	d.start()
	if out, _, code := d.ctl("", "check", sid); code != 1 || !strings.Contains(out, "orphan_tool_use") {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	if out, _, code := d.ctl("", "list", "--cwd", cwd); code != 0 || !strings.Contains(out, "damaged") {
		t.Fatalf("list must show the damaged session, marked: %d\n%s", code, out)
	}
	out2, _, code := d.ctl("", "repair", sid, "--dry-run")
	if code != 0 || !strings.Contains(out2, "insert_tool_result") || !strings.Contains(out2, "nothing was written") {
		t.Fatalf("repair --dry-run: %d\n%s", code, out2)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, damaged) {
		t.Fatal("dry run changed the file")
	}
	out2, _, code = d.ctl("", "repair", sid)
	if code != 0 || !strings.Contains(out2, "original is kept at") {
		t.Fatalf("repair: %d\n%s", code, out2)
	}
	kept := out2[strings.Index(out2, "kept at ")+8:]
	kept = strings.TrimSpace(strings.SplitN(kept, "\n", 2)[0])
	if b, err := os.ReadFile(kept); err != nil || !bytes.Equal(b, damaged) {
		t.Fatalf("the original was not kept at %s: %v", kept, err)
	}
	if out, _, code := d.ctl("", "check", sid); code != 0 {
		t.Fatalf("check after repair: %d\n%s", code, out)
	}
	after, err := sdk.GetSessionMessages(ctx, d.root, sid, cwd)
	if err != nil {
		t.Fatal(err)
	}
	if p := sdkcheck.ToolPairingProblems(after); len(p) > 0 {
		t.Fatalf("after repair the official reader still sees: %v", p)
	}
	if out, _, _ := d.ctl("", "repair", sid); !strings.Contains(out, "nothing to repair") {
		t.Fatalf("repair is not idempotent:\n%s", out)
	}
	d.stop(syscall.SIGTERM, 30*time.Second)
}

// TestForeignAppendRace: an agent appending to the canonical file directly
// while sessiond appends and compacts: no line lost, none duplicated, the
// agent's lines in their order.
//
// Heavy load makes the agent write into the file a compaction has just
// replaced: such a line must be rescued before the lines the agent writes
// to the new file next, and a line written there after the rescue must be
// kept. internal/writer's TestForeignLinesDuringRenameKeepTheirOrder
// replays both orders.
func TestForeignAppendRace(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "2ms", "--compact-within", "2ms")
	d.start()
	c := d.client()
	defer c.Close()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	sid := uuid.NewString()
	s := client.Session{Cwd: cwd, ID: sid}
	path := filepath.Join(d.root, "projects", pk, sid+".jsonl")
	if _, err := c.Append(context.Background(), s, []byte(`{"type":"user","k":"first"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Flush(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the foreign writer: open, append one line, close, as agents do
		defer wg.Done()
		for i := 0; i < n; i++ {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(f, "{\"type\":\"user\",\"uuid\":\"%s\",\"k\":\"foreign-%d\"}\n", uuid.NewString(), i)
			f.Close()
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if _, err := c.Append(context.Background(), s, []byte(fmt.Sprintf(`{"type":"user","uuid":"%s","k":"daemon-%d"}`, uuid.NewString(), i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	if _, err := c.Flush(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range lines(b) {
		var v struct{ K string }
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("broken line %q", l)
		}
		seen[v.K]++
	}
	for i := 0; i < n; i++ {
		for _, k := range []string{fmt.Sprintf("foreign-%d", i), fmt.Sprintf("daemon-%d", i)} {
			if seen[k] != 1 {
				t.Errorf("%s present %d times", k, seen[k])
			}
		}
	}
	// Foreign lines keep their own order.
	last := -1
	for _, l := range lines(b) {
		var v struct{ K string }
		json.Unmarshal(l, &v)
		var i int
		if _, err := fmt.Sscanf(v.K, "foreign-%d", &i); err == nil {
			if i < last {
				t.Fatalf("foreign line %d after %d", i, last)
			}
			last = i
		}
	}
}

// TestSessionctlSessionOperations: the lifecycle commands through the CLI.
func TestSessionctlSessionOperations(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	cwd := t.TempDir()
	b := fixture(t, "marot__spotter__short.jsonl")
	sid := sessionIDOf(t, b)
	if _, errOut, code := d.ctl(string(b), "append", "--cwd", cwd, "--session", sid); code != 0 {
		t.Fatal(errOut)
	}
	// A subagent transcript of this session (the fixture's, moved over).
	sub := bytes.ReplaceAll(fixture(t, "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20__subagents__agent-acompact-f46190.jsonl"),
		[]byte("8463c716-a2ea-4c14-9efa-87158ebd9f20"), []byte(sid))
	if _, errOut, code := d.ctl(string(sub), "append", "--cwd", cwd, "--session", sid, "--subpath", "subagents/agent-acompact-f46190"); code != 0 {
		t.Fatal(errOut)
	}
	run := d.ctlOK
	run("clean", "check", sid)
	run("clean", "check", sid, "--subpath", "subagents/agent-acompact-f46190")
	// A relative --cwd means one below sessionctl's working directory.
	rel := exec.Command(bins.Sessionctl(), "--socket", d.socket, "list", "--cwd", filepath.Base(cwd))
	rel.Dir = filepath.Dir(cwd)
	if out, err := rel.CombinedOutput(); err != nil || !strings.Contains(string(out), sid) {
		t.Fatalf("list --cwd %s from %s: %v\n%s", filepath.Base(cwd), rel.Dir, err, out)
	}
	rel = exec.Command(bins.Sessionctl(), "--socket", d.socket, "check", sid, "--cwd", ".")
	rel.Dir = cwd
	if out, err := rel.CombinedOutput(); err != nil || !strings.Contains(string(out), "clean") {
		t.Fatalf("check --cwd . from %s: %v\n%s", cwd, err, out)
	}
	run("0 damaged", "check", "--all", "--cwd", cwd)
	run("subagents/agent-acompact-f46190", "subkeys", sid)
	run("renamed", "rename", sid, "My session")
	run("tagged", "tag", sid, "wip")
	run("archived", "archive", sid)
	out := run("My session", "list", "--cwd", cwd)
	if !strings.Contains(out, "archived") || !strings.Contains(out, "#wip") {
		t.Fatalf("list does not mark archive and tag:\n%s", out)
	}
	if out := run("", "list", "--cwd", cwd, "--exclude-archived"); strings.Contains(out, sid) {
		t.Fatalf("--exclude-archived still lists it:\n%s", out)
	}
	run("unarchived", "unarchive", sid)
	run("cleared the tag of "+sid, "tag", "--clear", sid)
	if out := run("", "list", "--cwd", cwd); strings.Contains(out, "#wip") {
		t.Fatalf("the tag is still listed after tag --clear:\n%s", out)
	}
	out = run("forked into", "fork", sid, "--title", "Branch")
	forkID := strings.Fields(out)[2]
	run("Branch", "list", "--cwd", cwd)
	if out := run(forkID, "list", "--cwd", cwd, "--continue"); strings.Contains(out, "for more") { // the newest, alone
		t.Fatalf("--continue offers more pages:\n%s", out)
	}
	if out := run("", "list", "--cwd", cwd, "--limit", "1"); !strings.Contains(out, "1 of 2") {
		t.Fatalf("paging:\n%s", out)
	}
	run("moved", "delete", sid)
	if _, errOut, code := d.ctl("", "show", sid); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("deleted session still shown: %s", errOut)
	}
	run("restored", "restore", sid)
	run("clean", "check", sid, "--subpath", "subagents/agent-acompact-f46190") // subagents came back too
	// A subagent transcript deleted on its own comes back with the
	// command the delete prints.
	out = run("sessionctl restore "+sid+" --subpath subagents/agent-acompact-f46190", "delete", sid, "--subpath", "subagents/agent-acompact-f46190")
	if _, errOut, code := d.ctl("", "check", sid, "--subpath", "subagents/agent-acompact-f46190"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("deleted subagent still checked: %d %s", code, errOut)
	}
	hint := out[strings.Index(out, "(sessionctl ")+len("(sessionctl ") : strings.LastIndex(out, " brings it back")]
	run("restored", strings.Fields(hint)...)
	run("clean", "check", sid, "--subpath", "subagents/agent-acompact-f46190")
	// Titles and tags belong to the whole session.
	if _, errOut, code := d.ctl("", "rename", sid, "x", "--subpath", "subagents/agent-acompact-f46190"); code == 0 || !strings.Contains(errOut, "whole session") {
		t.Fatalf("rename of a subagent transcript: %d %s", code, errOut)
	}
	run("removed", "delete", forkID, "--purge")
	if _, errOut, code := d.ctl("", "restore", forkID); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("restore of a purged session: %d %s", code, errOut)
	}
	if _, errOut, code := d.ctl("", "fork", sid, "--up-to", uuid.NewString()); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("fork up to an unknown entry: %d %s", code, errOut)
	}
	if _, errOut, code := d.ctl("", "rename", sid, "  "); code == 0 || !strings.Contains(errOut, "non-empty") {
		t.Fatalf("empty title: %d %s", code, errOut)
	}
	if _, errOut, code := d.ctl("", "check", uuid.NewString()); code != 2 || !strings.Contains(errOut, "not found") {
		t.Fatalf("check of an unknown session: exit %d %s", code, errOut)
	}
}
