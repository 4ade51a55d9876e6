package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mockapi"
	"github.com/sessiond/sessiond/internal/sdkcheck"
)

// materializeWorld is a daemon holding one real session with a subagent
// (the spotter fixtures) whose metadata arrived as an agent_metadata
// entry, as the SDK mirrors a .meta.json to a store.
type materializeWorld struct {
	d        *daemon
	cwd, pk  string
	sid, sub string
	meta     map[string]any // the .meta.json the metadata entry describes
}

func newMaterializeWorld(t *testing.T) *materializeWorld {
	t.Helper()
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	w := &materializeWorld{d: d, cwd: t.TempDir(), sub: "subagents/agent-a7be2f0"}
	w.pk, _ = layout.ProjectKeyFromCwd(w.cwd)
	main := fixture(t, "marot__spotter__tool_heavy.jsonl")
	w.sid = sessionIDOf(t, main)
	appendAll(t, c, client.Session{Cwd: w.cwd, ID: w.sid}, main)
	sub := fixture(t, "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20__subagents__agent-a7be2f0.jsonl")
	meta := `{"type":"agent_metadata","agentType":"Explore","toolUseId":"toolu_01materialize","description":"look around"}`
	appendAll(t, c, client.Session{Cwd: w.cwd, ID: w.sid, Subpath: w.sub}, append(append(sub, meta...), '\n'))
	w.meta = map[string]any{"agentType": "Explore", "toolUseId": "toolu_01materialize", "description": "look around"}
	// The title stays in the log, not yet in the file: the copy holds it
	// all the same (Read serves what sessiond acknowledged).
	if _, err := c.Rename(context.Background(), client.Session{Cwd: w.cwd, ID: w.sid}, "Copied elsewhere"); err != nil {
		t.Fatal(err)
	}
	return w
}

// files lists the regular files below dir, relative, with their bytes.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if !d.Type().IsRegular() {
			to, err := os.Readlink(p)
			out[rel] = []byte("-> " + to)
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMaterializeOfficialSDKReadsTheCopy: `sessionctl materialize` writes
// a config folder in which the official TypeScript SDK sees exactly the
// session sessiond holds (messages, subagents and their messages, the
// listing), and from which the SDK would mirror back to a store exactly
// what sessiond stores.
func TestMaterializeOfficialSDKReadsTheCopy(t *testing.T) {
	t.Parallel()
	sdk := sdkcheck.Require(t)
	w := newMaterializeWorld(t)
	ctx := context.Background()
	copyDir := filepath.Join(t.TempDir(), "copy")
	before, _ := os.ReadFile(w.d.transcript(w.pk, w.sid))
	journaled := !bytes.Contains(before, []byte("Copied elsewhere")) // else compacted already
	out := w.d.ctlOK("CLAUDE_CONFIG_DIR="+copyDir+" claude --resume "+w.sid, "materialize", w.sid, "--into", copyDir)
	// The fixture's cwd is another machine's: the project is named.
	if !strings.Contains(out, "in a working directory of the project "+w.pk+":") {
		t.Errorf("the output does not say where to run the agent:\n%s", out)
	}
	copied, _ := os.ReadFile(filepath.Join(copyDir, "projects", w.pk, w.sid+".jsonl"))
	if !bytes.Contains(copied, []byte(`"customTitle":"Copied elsewhere"`)) {
		t.Errorf("the copy lacks the title line (journaled before the copy: %v)", journaled)
	}
	if _, errOut, code := w.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatal(errOut)
	}

	// Exactly the session's files, the metadata entry turned into the
	// .meta.json and taken out of the transcript, as the SDK does.
	got := files(t, copyDir)
	p := filepath.Join("projects", w.pk, w.sid)
	mainFile, err := os.ReadFile(w.d.transcript(w.pk, w.sid))
	if err != nil {
		t.Fatal(err)
	}
	subFile, err := os.ReadFile(filepath.Join(w.d.root, p, w.sub+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var subLines []byte
	for _, l := range lines(subFile) {
		if !bytes.Contains(l, []byte(`"type":"agent_metadata"`)) {
			subLines = append(append(subLines, l...), '\n')
		}
	}
	if len(subLines) == len(subFile) {
		t.Fatal("sessiond's subagent transcript holds no agent_metadata line: the test proves nothing")
	}
	var names []string
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	wantNames := []string{p + ".jsonl", filepath.Join(p, w.sub+".jsonl"), filepath.Join(p, w.sub+".meta.json")}
	sort.Strings(wantNames)
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("the copy holds %v, want %v", names, wantNames)
	}
	if !bytes.Equal(got[p+".jsonl"], mainFile) {
		t.Error("the main transcript differs from sessiond's")
	}
	if !bytes.Equal(got[filepath.Join(p, w.sub+".jsonl")], subLines) {
		t.Error("the subagent's transcript is not sessiond's without its agent_metadata line")
	}
	var meta map[string]any
	if err := json.Unmarshal(got[filepath.Join(p, w.sub+".meta.json")], &meta); err != nil || !reflect.DeepEqual(meta, w.meta) {
		t.Errorf(".meta.json = %s (%v), want %v", got[filepath.Join(p, w.sub+".meta.json")], err, w.meta)
	}
	for _, rel := range []string{".", "projects", p, filepath.Join(p, "subagents"), p + ".jsonl", filepath.Join(p, w.sub+".meta.json")} {
		fi, err := os.Stat(filepath.Join(copyDir, rel))
		want := fs.FileMode(0o600)
		if fi != nil && fi.IsDir() {
			want = 0o700
		}
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", rel, err, fi.Mode().Perm(), want)
		}
	}

	// What the SDK reads there is what it reads in sessiond's root.
	read := func(root string) map[string]any {
		t.Helper()
		r := map[string]any{}
		var err error
		if r["listSessions"], err = sdk.ListSessions(ctx, root, w.cwd); err != nil {
			t.Fatal(err)
		}
		if r["info"], err = sdk.GetSessionInfo(ctx, root, w.sid, w.cwd); err != nil {
			t.Fatal(err)
		}
		msgs, err := sdk.GetSessionMessages(ctx, root, w.sid, w.cwd)
		if err != nil || len(msgs) < 10 {
			t.Fatalf("getSessionMessages in %s: %d messages, %v", root, len(msgs), err)
		}
		r["messages"] = msgs
		agents, err := sdk.ListSubagents(ctx, root, w.sid, w.cwd)
		if err != nil || fmt.Sprint(agents) != "[a7be2f0]" {
			t.Fatalf("listSubagents in %s: %v, %v", root, agents, err)
		}
		sub, err := sdk.GetSubagentMessages(ctx, root, w.sid, "a7be2f0", w.cwd)
		if err != nil || len(sub) == 0 {
			t.Fatalf("getSubagentMessages in %s: %d messages, %v", root, len(sub), err)
		}
		r["subagentMessages"] = sub
		b, _ := json.Marshal(r)
		var v map[string]any
		json.Unmarshal(b, &v)
		return normalize(v).(map[string]any) // a file's mtime and size differ
	}
	want, have := read(w.d.root), read(copyDir)
	for k := range want {
		if !reflect.DeepEqual(have[k], want[k]) {
			hj, _ := json.Marshal(have[k])
			wj, _ := json.Marshal(want[k])
			t.Errorf("%s differs in the copy:\ncopy:     %.1500s\nsessiond: %.1500s", k, hj, wj)
		}
	}
	if info, _ := want["info"].(map[string]any); info["customTitle"] != "Copied elsewhere" {
		t.Errorf("getSessionInfo: %v, want the title given", info)
	}

	// The SDK would mirror from the copy exactly what sessiond stores: the
	// sidecar comes back as the agent_metadata entry.
	imported, err := sdk.ImportSessionToStore(ctx, copyDir, w.sid, w.cwd)
	if err != nil {
		t.Fatal(err)
	}
	c := w.d.client()
	defer c.Close()
	if len(imported) != 2 {
		t.Fatalf("importSessionToStore wrote %d keys, want the main transcript and the subagent's", len(imported))
	}
	for _, k := range imported {
		var stored []any
		err := c.Read(ctx, client.Session{ProjectKey: w.pk, ID: w.sid, Subpath: k.Key.Subpath}, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
			if e.GetMalformed() {
				return nil
			}
			var v any
			if err := json.Unmarshal(e.GetData(), &v); err != nil {
				return err
			}
			stored = append(stored, v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var mirrored []any
		for _, e := range k.Entries {
			var v any
			json.Unmarshal(e, &v)
			mirrored = append(mirrored, v)
		}
		if !reflect.DeepEqual(mirrored, stored) {
			t.Errorf("subpath %q: the SDK would mirror %d entries from the copy, sessiond holds %d (or they differ)", k.Key.Subpath, len(mirrored), len(stored))
		}
	}
}

// TestMaterializeRefusals: what sessionctl materialize refuses, with exit
// status 2, leaving what was there as it was and making nothing.
func TestMaterializeRefusals(t *testing.T) {
	t.Parallel()
	w := newMaterializeWorld(t)
	base := t.TempDir()
	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o700)
	os.WriteFile(filepath.Join(full, ".credentials.json"), []byte("{}"), 0o600)
	target := filepath.Join(base, "target")
	os.Mkdir(target, 0o700)
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"an id no rule takes", []string{"materialize", strings.ToUpper(w.sid[:8]), "--into", filepath.Join(base, "new1")}, "materialize takes a whole session id"},
		{"a path for an id", []string{"materialize", "../" + w.sid, "--into", filepath.Join(base, "new2")}, "materialize takes a whole session id"},
		{"a folder that is not empty", []string{"materialize", w.sid, "--into", full}, `is not empty (it holds ".credentials.json")`},
		{"a symbolic link to an empty folder", []string{"materialize", w.sid, "--into", link}, "is a symbolic link"},
		{"no folder", []string{"materialize", w.sid}, "--into DIR is required"},
		{"a project key that is not one", []string{"materialize", w.sid, "--project", "../x", "--into", filepath.Join(base, "new3")}, "project key"},
	}
	if os.Geteuid() == 0 {
		foreign := filepath.Join(base, "foreign")
		os.Mkdir(foreign, 0o700)
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"a folder of another user", []string{"materialize", w.sid, "--into", foreign}, "belongs to uid 65534, not to you (uid 0)"})
	} else {
		t.Log("not root: the folder of another user is not tried")
	}
	before := files(t, base)
	for _, tc := range cases {
		_, errOut, code := w.d.ctl("", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit 2 saying %q", tc.name, code, errOut, tc.want)
		}
	}
	if after := files(t, base); !reflect.DeepEqual(after, before) {
		t.Errorf("refusals changed files: %v, were %v", after, before)
	}
	ents, _ := os.ReadDir(target)
	for _, n := range []string{"new1", "new2", "new3"} {
		if _, err := os.Lstat(filepath.Join(base, n)); !errors.Is(err, fs.ErrNotExist) || len(ents) > 0 {
			t.Errorf("a refusal made %s (%v) or wrote through the link (%d entries)", n, err, len(ents))
		}
	}
}

// TestMaterializeLeavesNothingOnFailure: a write that fails halfway (the
// main transcript written, the subagent's over the file size limit) and an
// interruption while the daemon does not answer (SIGTERM, SIGINT, SIGHUP)
// each end with the folder removed, and say so.
func TestMaterializeLeavesNothingOnFailure(t *testing.T) {
	t.Parallel()
	w := newMaterializeWorld(t)
	main, err := os.Stat(w.d.transcript(w.pk, w.sid))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10 // the main transcript fits, the subagent's does not
	if main.Size() >= limit {
		t.Fatalf("the main transcript is %d bytes, over the limit %d: the write would not fail halfway", main.Size(), limit)
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is needed to limit the file size")
	}
	t.Run("write fails halfway", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "copy")
		cmd := exec.Command(prlimit, fmt.Sprintf("--fsize=%d", limit), "--", bins.Sessionctl(), "--socket", w.d.socket, "materialize", w.sid, "--into", dir)
		_, errOut, code := runCmd(t, cmd, "")
		if code != 1 || !strings.Contains(errOut, "file too large") || !strings.Contains(errOut, "/subagents/") ||
			!strings.Contains(errOut, "nothing of the copy is kept in "+dir) {
			t.Errorf("exit %d, %q; want exit 1, the subagent's write failing (file too large) and the folder removed", code, errOut)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there: %v", dir, err)
		}
	})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			// The daemon stopped: sessionctl makes the folder, then waits
			// for its first answer, which never comes, until the signal.
			if err := w.d.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer w.d.Signal(syscall.SIGCONT)
			dir := filepath.Join(t.TempDir(), "copy")
			cmd := exec.Command(bins.Sessionctl(), "--socket", w.d.socket, "materialize", w.sid, "--into", dir)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Lstat(dir); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("sessionctl did not make %s: %s", dir, errOut.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut.String(), "interrupted; nothing of the copy is kept in "+dir) {
				t.Errorf("after %v: %v, %q; want exit 1 saying it was interrupted and the folder removed", sig, err, errOut.String())
			}
			if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after %v, %s is still there: %v", sig, dir, err)
			}
		})
	}
	// The daemon, continued, still serves: the copy works after all that.
	w.d.ctlOK("materialized session", "materialize", w.sid, "--into", filepath.Join(t.TempDir(), "copy"))
}

// TestMaterializeResumesWithTheCLI: the real Claude Code CLI, given no
// store, resumes a session from the folder sessionctl materialize wrote
// (CLAUDE_CONFIG_DIR=<copy> claude --resume <id>): the API receives the
// whole earlier conversation, the CLI appends to the copy, and sessiond's
// session is left as it was.
func TestMaterializeResumesWithTheCLI(t *testing.T) {
	t.Parallel()
	a := newAgentEnv(t)
	r := a.turn(filepath.Join(t.TempDir(), "agent-config"), "use a subagent", "", "batched")
	stored := a.stored(r.SessionID, "")
	subs, err := a.client().Subkeys(context.Background(), client.Session{ProjectKey: a.pk, ID: r.SessionID})
	if err != nil || len(subs) != 1 {
		t.Fatalf("subkeys %v, %v; want the subagent's", subs, err)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	a.d.ctlOK("materialized session", "materialize", r.SessionID, "--into", copyDir, "--cwd", a.cwd)
	if _, err := os.Stat(filepath.Join(copyDir, "projects", a.pk, r.SessionID, subs[0]+".meta.json")); err != nil {
		t.Errorf("the subagent's .meta.json is not in the copy: %v", err)
	}
	before := len(a.api.Requests())

	r2 := a.turn(copyDir, "say hi", r.SessionID, "none")
	if r2.SessionID != r.SessionID {
		t.Fatalf("resumed as %s, want %s", r2.SessionID, r.SessionID)
	}
	if refused := a.refusals(); len(refused) > 0 {
		t.Fatalf("the API refused the resumed conversation: %v", refused)
	}
	var hi *mockapi.Request
	for _, q := range a.api.Requests()[before:] {
		if q.Kind == "hi" {
			hi = &q
		}
	}
	if hi == nil {
		t.Fatal("the resumed turn never reached the API")
	}
	prompted := false
	uses, results := 0, 0
	for _, m := range hi.Messages {
		for _, b := range m.Content {
			switch {
			case b.Type == "text" && m.Role == "user" && strings.Contains(b.Text, "use a subagent"):
				prompted = true
			case b.Type == "tool_use":
				uses++
			case b.Type == "tool_result":
				results++
			}
		}
	}
	if !prompted || uses != 1 || results != 1 {
		t.Fatalf("the resumed request (%d messages) carries the first prompt: %v, %d tool_use, %d tool_result; want the first turn's prompt and its Agent call answered",
			len(hi.Messages), prompted, uses, results)
	}
	local := a.local(copyDir, r.SessionID, "")
	if len(local) <= len(stored) || !reflect.DeepEqual(local[:len(stored)], stored) {
		t.Fatalf("the copy holds %d entries after the resumed turn; want sessiond's %d, then the new turn's", len(local), len(stored))
	}
	if after := a.stored(r.SessionID, ""); !reflect.DeepEqual(after, stored) {
		t.Fatalf("sessiond's session changed (%d entries, was %d): the copy is not sessiond's", len(after), len(stored))
	}
}
