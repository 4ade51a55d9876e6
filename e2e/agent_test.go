package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mockapi"
	"github.com/sessiond/sessiond/internal/testharness"
)

// The agent tests run the real Claude Code CLI (shipped in the official
// SDK's platform package) through query() with the TypeScript SessiondStore,
// against internal/mockapi: sdk/typescript/test/agent/driver.mjs does the
// SDK side, these tests judge what reached sessiond.

// agentDir is the TypeScript adapter's folder, built (make sdk-ts).
var agentDir = filepath.Join("..", "sdk", "typescript")

func requireAgentSetup(t *testing.T) {
	t.Helper()
	for _, p := range []string{"dist/index.js", "node_modules/@anthropic-ai/claude-agent-sdk-linux-x64/claude"} {
		if _, err := os.Stat(filepath.Join(agentDir, p)); err != nil {
			const why = "the TypeScript adapter is not built or the SDK's CLI is not installed: run make sdk-ts"
			if os.Getenv("CI") != "" || os.Getenv("SESSIOND_REQUIRE_SDK") != "" {
				t.Fatalf("%s (%v)", why, err)
			}
			t.Skip(why)
		}
	}
}

// agentEnv is one agent's world: its working directory, its CLI's config
// dir (never sessiond's root), a home of its own and the mock API.
type agentEnv struct {
	t      *testing.T
	d      *daemon
	api    *mockapi.Server
	cwd    string
	home   string
	pk     string
	dialed *client.Client
}

func newAgentEnv(t *testing.T) *agentEnv { return newAgentEnvRoot(t, false) }

// newAgentEnvRoot is newAgentEnv; with onDefaults, sessiond's root is the
// agent's ~/.claude (its home's), as when both run on their defaults.
func newAgentEnvRoot(t *testing.T, onDefaults bool) *agentEnv {
	requireAgentSetup(t)
	d := newDaemon(t)
	base := t.TempDir()
	a := &agentEnv{t: t, d: d, cwd: filepath.Join(base, "work"), home: filepath.Join(base, "home")}
	for _, dir := range []string{a.cwd, a.home} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if onDefaults {
		d.root = filepath.Join(a.home, ".claude")
	}
	d.start()
	api, err := mockapi.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	a.api = api
	if a.pk, err = layout.ProjectKeyFromCwd(a.cwd); err != nil {
		t.Fatal(err)
	}
	return a
}

// turnResult is what one driver run reported.
type turnResult struct {
	SessionID string
	Error     string
	Msgs      []map[string]any
	// Appended: the main transcript's batches the SDK mirrored, on
	// defaults (the driver reports them then).
	Appended [][]any
	// Module: where the driver loaded the adapter from (the Python and
	// Ruby drivers report it).
	Module string
}

func (r turnResult) mirrorErrors() []map[string]any {
	var out []map[string]any
	for _, m := range r.Msgs {
		if m["subtype"] == "mirror_error" {
			out = append(out, m)
		}
	}
	return out
}

// startTurn starts one agent turn; wait returns its result.
func (a *agentEnv) startTurn(configDir, prompt, resume, flush string) (cmd *exec.Cmd, wait func() turnResult) {
	a.t.Helper()
	args := map[string]string{"op": "turn", "socket": a.d.socket, "cwd": a.cwd, "configDir": configDir,
		"home": a.home, "baseURL": a.api.URL, "prompt": prompt, "resume": resume, "flush": flush}
	if resume == "" {
		delete(args, "resume")
	}
	if configDir == "" {
		args["reportAppends"] = "1"
	}
	cfg, _ := json.Marshal(args)
	cmd = exec.Command("node", filepath.Join(agentDir, "test", "agent", "driver.mjs"), string(cfg))
	if configDir == "" {
		// On defaults: the driver, its store and its CLI see no
		// CLAUDE_CONFIG_DIR, only a HOME whose .claude is sessiond's root.
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CLAUDE_CONFIG_DIR=") && !strings.HasPrefix(kv, "HOME=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "HOME="+a.home)
	}
	return cmd, a.runTurn(cmd, prompt)
}

// runTurn starts a driver that prints one agent turn's events as JSON
// lines (driver.mjs's form, which the Python and Ruby drivers share); the
// function it returns waits for the result.
func (a *agentEnv) runTurn(cmd *exec.Cmd, prompt string) func() turnResult {
	a.t.Helper()
	var stderr testharness.SyncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	done := make(chan turnResult, 1)
	go func() {
		var r turnResult
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var line struct {
				Module   string
				Msg      map[string]any
				Appended *struct {
					Subpath string
					Entries []any
				}
				End *struct {
					SessionID string `json:"session_id"`
					Error     string
				}
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Module != "" {
				r.Module = line.Module
			}
			if line.Msg != nil {
				r.Msgs = append(r.Msgs, line.Msg)
			}
			if line.Appended != nil && line.Appended.Subpath == "" {
				r.Appended = append(r.Appended, line.Appended.Entries)
			}
			if line.End != nil {
				r.SessionID, r.Error = line.End.SessionID, line.End.Error
			}
		}
		cmd.Wait()
		if r.SessionID == "" && r.Error == "" {
			r.Error = "driver ended without a result: " + stderr.String()
		}
		done <- r
	}()
	return func() turnResult {
		select {
		case r := <-done:
			return r
		case <-time.After(3 * time.Minute):
			cmd.Process.Kill()
			a.t.Fatalf("agent turn %q did not end; stderr:\n%s", prompt, stderr.String())
			return turnResult{}
		}
	}
}

func (a *agentEnv) turn(configDir, prompt, resume, flush string) turnResult {
	a.t.Helper()
	_, wait := a.startTurn(configDir, prompt, resume, flush)
	return a.mustTurn(wait(), prompt)
}

// mustTurn fails the test when the turn failed or reported mirror errors.
func (a *agentEnv) mustTurn(r turnResult, prompt string) turnResult {
	a.t.Helper()
	if r.Error != "" {
		a.t.Fatalf("agent turn %q failed: %s", prompt, r.Error)
	}
	if me := r.mirrorErrors(); len(me) > 0 {
		a.t.Fatalf("agent turn %q reported mirror errors: %v", prompt, me)
	}
	return r
}

func (a *agentEnv) client() *client.Client {
	if a.dialed == nil {
		a.dialed = a.d.client()
		a.t.Cleanup(func() { a.dialed.Close() })
	}
	return a.dialed
}

// stored returns sessiond's entries of a transcript, decoded.
func (a *agentEnv) stored(sid, subpath string) []any {
	a.t.Helper()
	var out []any
	err := a.client().Read(context.Background(), client.Session{ProjectKey: a.pk, ID: sid, Subpath: subpath}, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		if e.GetMalformed() {
			return fmt.Errorf("malformed line at %d: %.200s", e.GetIndex(), e.GetData())
		}
		var v any
		if err := json.Unmarshal(e.GetData(), &v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		a.t.Fatalf("read %s %s from sessiond: %v", sid, subpath, err)
	}
	return out
}

// local returns the lines the CLI wrote to its own config dir that it
// mirrors (all but the api-request* ones), decoded.
func (a *agentEnv) local(configDir, sid, subpath string) []any {
	a.t.Helper()
	p := filepath.Join(configDir, "projects", a.pk, sid+".jsonl")
	if subpath != "" {
		p = filepath.Join(configDir, "projects", a.pk, sid, subpath+".jsonl")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		a.t.Fatalf("the CLI's local transcript: %v", err)
	}
	var out []any
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			a.t.Fatalf("the CLI wrote a line that is not JSON: %.200s", l)
		}
		if typ, _ := v["type"].(string); strings.HasPrefix(typ, "api-request") {
			continue
		}
		out = append(out, v)
	}
	return out
}

func typeOf(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["type"].(string)
	return s
}

// toolPairs counts the tool_use blocks and the tool_results answering them
// among entries.
func toolPairs(entries []any) (uses, answered int) {
	ids := map[string]bool{}
	var results []string
	for _, e := range entries {
		m, _ := e.(map[string]any)
		msg, _ := m["message"].(map[string]any)
		content, _ := msg["content"].([]any)
		for _, c := range content {
			b, _ := c.(map[string]any)
			switch b["type"] {
			case "tool_use":
				ids[b["id"].(string)] = true
			case "tool_result":
				results = append(results, b["tool_use_id"].(string))
			}
		}
	}
	for _, r := range results {
		if ids[r] {
			answered++
		}
	}
	return len(ids), answered
}

// checkMirrored: sessiond holds exactly the lines the CLI wrote and
// mirrors, in order, none twice.
func (a *agentEnv) checkMirrored(configDir, sid string) []any {
	a.t.Helper()
	got, want := a.stored(sid, ""), a.local(configDir, sid, "")
	if !reflect.DeepEqual(got, want) {
		a.t.Fatalf("sessiond holds %d entries, the CLI wrote %d mirrored lines; they differ\nfirst stored types: %v\nfirst local types:  %v",
			len(got), len(want), types(got), types(want))
	}
	return got
}

func types(es []any) []string {
	var out []string
	for _, e := range es {
		out = append(out, typeOf(e))
	}
	return out
}

// refusals returns the requests the mock refused for broken pairing.
func (a *agentEnv) refusals() []string {
	var out []string
	for _, r := range a.api.Requests() {
		if r.Kind == "refused" {
			out = append(out, r.Refusal)
		}
	}
	return out
}

// TestAgentParallelToolsThroughStore: a real agent turn with 8 parallel
// Bash calls lands in sessiond whole (every result, pairing intact, check
// clean), identical to the CLI's own lines; it resumes from the store in a
// fresh config dir and the API sees a valid conversation; the SDK's session
// functions return the same with the store as from sessiond's files.
func TestAgentParallelToolsThroughStore(t *testing.T) {
	t.Parallel()
	a := newAgentEnv(t)
	cfg1 := filepath.Join(t.TempDir(), "agent-config")
	r := a.turn(cfg1, "run the commands", "", "batched")
	entries := a.checkMirrored(cfg1, r.SessionID)
	if uses, answered := toolPairs(entries); uses != mockapi.Parallel || answered != mockapi.Parallel {
		t.Fatalf("sessiond holds %d tool_use and %d answered results, want %d of each", uses, answered, mockapi.Parallel)
	}
	if out, errOut, code := a.d.ctl("", "check", r.SessionID, "--project", a.pk); code != 0 {
		t.Fatalf("sessionctl check: exit %d\n%s%s", code, out, errOut)
	}

	// Resume from the store alone: a fresh config dir with nothing in it.
	cfg2 := filepath.Join(t.TempDir(), "agent-config-2")
	r2 := a.turn(cfg2, "say hi", r.SessionID, "batched")
	if r2.SessionID != r.SessionID {
		t.Fatalf("resumed as %s, want %s", r2.SessionID, r.SessionID)
	}
	if refused := a.refusals(); len(refused) > 0 {
		t.Fatalf("the API refused the resumed conversation: %v", refused)
	}
	var hi *mockapi.Request
	for _, q := range a.api.Requests() {
		if q.Kind == "hi" {
			hi = &q
		}
	}
	if hi == nil {
		t.Fatal("the resumed turn never reached the API")
	}
	uses, results := blockCounts(hi.Messages)
	if uses != mockapi.Parallel || results != mockapi.Parallel {
		t.Fatalf("the resumed request carries %d tool_use and %d tool_result, want %d each", uses, results, mockapi.Parallel)
	}
	after := a.stored(r.SessionID, "")
	if len(after) <= len(entries) || !reflect.DeepEqual(after[:len(entries)], entries) {
		t.Fatalf("the resumed turn did not append after the first one's %d entries (now %d)", len(entries), len(after))
	}

	compareFunctions(t, a, r.SessionID)
}

// compareFunctions: the SDK's session functions return the same with
// { sessionStore } as reading sessiond's files (after a flush, so the files
// hold everything).
func compareFunctions(t *testing.T, a *agentEnv, sid string) {
	t.Helper()
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	cfg, _ := json.Marshal(map[string]string{"op": "functions", "socket": a.d.socket, "root": a.d.root, "cwd": a.cwd, "sessionId": sid})
	out, err := exec.Command("node", filepath.Join(agentDir, "test", "agent", "driver.mjs"), string(cfg)).Output()
	if err != nil {
		t.Fatalf("driver functions: %v\n%s", err, out)
	}
	compareReaders(t, out)
}

// compareReaders judges a driver's functions output ({"store", "disk"}:
// what an SDK's readers returned with the store and from sessiond's files).
// The Python and Ruby SDKs name the fields in snake_case.
func compareReaders(t *testing.T, out []byte) {
	t.Helper()
	var res struct{ Store, Disk map[string]any }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("driver output: %v\n%s", err, out)
	}
	// listSessions' lastModified is the summary's mtime with the store and
	// the file's on disk. sessiond lists a compacted session by its file's
	// mtime, so they are normally equal; a summary stored before the last
	// compaction can be older (seen once in four runs, by 1 ms), never newer.
	storeList, _ := res.Store["listSessions"].([]any)
	diskList, _ := res.Disk["listSessions"].([]any)
	if len(storeList) != len(diskList) {
		t.Errorf("listSessions: %d sessions with the store, %d from disk", len(storeList), len(diskList))
	}
	for i := range storeList {
		if i < len(diskList) {
			s, d := lastModified(storeList[i]), lastModified(diskList[i])
			if s == 0 || s > d {
				t.Errorf("listSessions[%d].lastModified: store %v, disk %v; the store's may not be newer", i, s, d)
			}
		}
	}
	for _, k := range []string{"listSessions", "info", "messages", "subagents", "subagentMessages"} {
		s, d := normalize(res.Store[k]), normalize(res.Disk[k])
		if !reflect.DeepEqual(s, d) {
			sj, _ := json.Marshal(s)
			dj, _ := json.Marshal(d)
			t.Errorf("%s differs between the store and sessiond's files:\nstore: %.1500s\ndisk:  %.1500s", k, sj, dj)
		}
	}
	if msgs, _ := res.Store["messages"].([]any); len(msgs) == 0 {
		t.Error("getSessionMessages with the store returned nothing")
	}
}

// lastModified is a listed session's lastModified (last_modified in the
// Python and Ruby SDKs), in epoch ms.
func lastModified(v any) float64 {
	m, _ := v.(map[string]any)
	if f, ok := m["lastModified"].(float64); ok {
		return f
	}
	f, _ := m["last_modified"].(float64)
	return f
}

// normalize drops what legitimately differs between a store and files: a
// file's size exists only on disk, and lastModified is the file's mtime on
// disk while with a store the SDK takes it from the summary (listSessions,
// checked apart: equal) or, in getSessionInfo, from the last entry's
// timestamp, else the time of the call: the SDK's own rule, which no store
// can change.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k == "fileSize" || k == "lastModified" || k == "file_size" || k == "last_modified" {
				continue
			}
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

// TestAgentSubagentThroughStore: a subagent's transcript lands under its
// subpath, its metadata as entries (what load returns) and as the
// .meta.json disk readers use, and the SDK's subagent functions agree.
func TestAgentSubagentThroughStore(t *testing.T) {
	t.Parallel()
	a := newAgentEnv(t)
	cfg1 := filepath.Join(t.TempDir(), "agent-config")
	r := a.turn(cfg1, "use a subagent", "", "batched")
	a.checkMirrored(cfg1, r.SessionID)
	var keys []string
	keys, err := a.client().Subkeys(context.Background(), client.Session{ProjectKey: a.pk, ID: r.SessionID})
	if err != nil || len(keys) != 1 || !strings.HasPrefix(keys[0], "subagents/agent-") {
		t.Fatalf("subkeys %v, %v; want one subagents/agent-*", keys, err)
	}
	sub := a.stored(r.SessionID, keys[0])
	var metas, lines []any
	for _, e := range sub {
		if typeOf(e) == "agent_metadata" {
			metas = append(metas, e)
		} else {
			lines = append(lines, e)
		}
	}
	if len(metas) == 0 {
		t.Fatal("no agent_metadata entry reached sessiond for the subagent")
	}
	if want := a.local(cfg1, r.SessionID, keys[0]); !reflect.DeepEqual(lines, want) {
		t.Fatalf("the subagent's lines in sessiond (%v) differ from the CLI's (%v)", types(lines), types(want))
	}
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatal(errOut)
	}
	meta, err := os.ReadFile(filepath.Join(a.d.root, "projects", a.pk, r.SessionID, keys[0]+".meta.json"))
	if err != nil {
		t.Fatalf("no .meta.json beside the subagent's transcript: %v", err)
	}
	var got map[string]any
	json.Unmarshal(meta, &got)
	want := map[string]any{}
	for k, v := range metas[len(metas)-1].(map[string]any) {
		if k != "type" {
			want[k] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf(".meta.json = %s, want the last agent_metadata entry without type: %v", meta, want)
	}
	compareFunctions(t, a, r.SessionID)
}

// TestAgentFaultsMidTurn: faults while a live turn holds at the API (the
// tool results already written and, in eager mode, mirrored): sessiond
// stopped with SIGTERM and started again, sessiond killed with kill -9 and
// started again, and the agent process killed (seed 004). Afterwards the
// store holds every line the CLI mirrored, in order, none twice; where the
// daemon came back within the SDK's retry window no mirror_error was
// reported; and the session resumes from the store with a conversation the
// API accepts.
func TestAgentFaultsMidTurn(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"sessiond SIGTERM", "sessiond kill -9", "agent killed"} {
		t.Run(fault, func(t *testing.T) {
			a := newAgentEnv(t)
			cfg1 := filepath.Join(t.TempDir(), "agent-config")
			arrived, release := a.api.Hold("done")
			cmd, wait := a.startTurn(cfg1, "run the commands", "", "eager")
			select {
			case <-arrived:
			case <-time.After(2 * time.Minute):
				t.Fatal("the turn never reached the tool results")
			}
			// Eager mirroring sends each line as the CLI writes it: wait
			// until sessiond holds every tool result before the fault.
			a.waitMirroredResults(mockapi.Parallel)
			switch fault {
			case "sessiond SIGTERM":
				if code := a.d.stop(syscall.SIGTERM, time.Minute); code != 0 {
					t.Fatalf("sessiond exited %d on SIGTERM", code)
				}
				a.d.start()
			case "sessiond kill -9":
				a.d.Kill()
				a.d.start()
			case "agent killed":
				cmd.Process.Signal(syscall.SIGKILL)
			}
			if a.dialed != nil {
				a.dialed.Close()
				a.dialed = nil
			}
			release()
			r := wait()
			sid := r.SessionID
			if fault != "agent killed" {
				if r.Error != "" {
					t.Fatalf("the turn failed after the daemon came back: %s", r.Error)
				}
				if me := r.mirrorErrors(); len(me) > 0 {
					t.Fatalf("mirror errors although sessiond came back within the retry window: %v", me)
				}
				a.checkMirrored(cfg1, sid)
			} else {
				sid = sessionOfLocal(t, cfg1, a.pk)
				// The store holds a prefix of what the CLI wrote: every
				// line up to the tool results it mirrored, none twice.
				got, local := a.stored(sid, ""), a.local(cfg1, sid, "")
				if len(got) == 0 || len(got) > len(local) || !reflect.DeepEqual(got, local[:len(got)]) {
					t.Fatalf("sessiond holds %v, not a prefix of the CLI's %v", types(got), types(local))
				}
				if uses, answered := toolPairs(got); uses != mockapi.Parallel || answered != mockapi.Parallel {
					t.Fatalf("after the agent was killed sessiond holds %d tool_use and %d answered, want all %d mirrored before the kill", uses, answered, mockapi.Parallel)
				}
			}
			cfg2 := filepath.Join(t.TempDir(), "agent-config-2")
			a.turn(cfg2, "say hi", sid, "batched")
			if refused := a.refusals(); len(refused) > 0 {
				t.Fatalf("the API refused the resumed conversation: %v", refused)
			}
			if _, errOut, code := a.d.ctl("", "check", sid, "--project", a.pk); code != 0 {
				t.Fatalf("sessionctl check after the resume: %s", errOut)
			}
		})
	}
}

// waitMirroredResults waits until the project's one session in sessiond
// holds n answered tool_use blocks.
func (a *agentEnv) waitMirroredResults(n int) {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		infos, err := a.client().List(context.Background(), "", a.pk)
		if err == nil && len(infos) == 1 {
			if _, answered := toolPairs(a.stored(infos[0].GetSession().GetSessionId(), "")); answered >= n {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.t.Fatalf("sessiond never held the %d tool results the CLI mirrors eagerly", n)
}

// sessionOfLocal finds the one session the CLI wrote locally.
func sessionOfLocal(t *testing.T, configDir, pk string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(configDir, "projects", pk, "*.jsonl"))
	if len(m) != 1 {
		t.Fatalf("the CLI wrote %v", m)
	}
	return strings.TrimSuffix(filepath.Base(m[0]), ".jsonl")
}
