package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/mockapi"
)

// fileEntries returns every line of a transcript file, decoded.
func fileEntries(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("transcript: %v", err)
	}
	var out []any
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("a line that is not JSON: %.200s", l)
		}
		out = append(out, v)
	}
	return out
}

// flat is the entries of batches, in order.
func flat(batches [][]any) []any {
	var out []any
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// TestAgentDefaultsSharedFile: an agent with only the README's three lines
// (no CLAUDE_CONFIG_DIR at all, a HOME of its own) against sessiond whose
// root is that HOME's .claude: the defaults of both sides. Two turns, the
// second a resume: no mirror error, the transcript holds every line the CLI
// wrote exactly once and every line it mirrored, sessiond's Read serves the
// same, the SDK's readers find the session in ~/.claude, and the resumed
// conversation is valid.
func TestAgentDefaultsSharedFile(t *testing.T) {
	t.Parallel()
	// Batched, the SDK's default, mirrors a turn's lines at its result;
	// eager mirrors each line right after the CLI wrote it, so sessiond
	// takes in lines whose copies come in the next appends.
	for _, flush := range []string{"batched", "eager"} {
		t.Run(flush, func(t *testing.T) {
			t.Parallel()
			defaultsTwoTurns(t, flush)
		})
	}
}

func defaultsTwoTurns(t *testing.T, flush string) {
	a := newAgentEnvRoot(t, true)
	var sid string
	checkDefaultsTwoTurns(t, a, func(prompt, resume string) turnResult {
		r := a.turn("", prompt, resume, flush)
		sid = r.SessionID
		return r
	}, func(sid string) { compareFunctions(t, a, sid) })
	cliResumeOnDefaults(t, a, sid)
}

// cliResumeOnDefaults runs `claude --resume sid -p` in the user's
// ~/.claude, the CLI alone (no SDK, no store), after the SDK's turns: it
// finds the session the CLI and sessiond share, sends the API the whole
// conversation (the first turn's tool calls, each answered), and the
// lines it writes there itself, with no store to mirror them, are taken in
// by sessiond as another program's: the ledger check stays clean and
// sessiond serves the file as it is.
func cliResumeOnDefaults(t *testing.T, a *agentEnv, sid string) {
	t.Helper()
	cli, err := filepath.Abs(cliInTSPkg)
	if err != nil {
		t.Fatal(err)
	}
	before := len(a.api.Requests())
	cmd := exec.Command(cli, "--resume", sid, "-p", "say hi", "--output-format", "json")
	cmd.Dir = a.cwd
	cmd.Env = append(driverEnv(a.home), "ANTHROPIC_BASE_URL="+a.api.URL, "ANTHROPIC_API_KEY=sk-test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("claude --resume %s in ~/.claude: %v\n%s", sid, err, out)
	}
	if refused := a.refusals(); len(refused) > 0 {
		t.Fatalf("the API refused the conversation claude --resume sent: %v", refused)
	}
	var hi *mockapi.Request
	for _, q := range a.api.Requests()[before:] {
		if q.Kind == "hi" {
			hi = &q
		}
	}
	if hi == nil {
		t.Fatal("claude --resume never reached the API")
	}
	if uses, results := blockCounts(hi.Messages); uses != mockapi.Parallel || results != mockapi.Parallel {
		t.Fatalf("claude --resume sent %d tool_use and %d tool_result, want the first turn's %d of each", uses, results, mockapi.Parallel)
	}
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	if out, errOut, code := a.d.ctl("", "check", sid, "--project", a.pk); code != 0 {
		t.Fatalf("sessionctl check after claude --resume: exit %d\n%s%s", code, out, errOut)
	}
	path := filepath.Join(a.home, ".claude", "projects", a.pk, sid+".jsonl")
	if got, file := a.stored(sid, ""), fileEntries(t, path); !reflect.DeepEqual(got, file) {
		t.Fatalf("after claude --resume sessiond's Read serves %d entries, its file holds %d", len(got), len(file))
	}
}

// blockCounts counts the tool_use and tool_result blocks of messages.
func blockCounts(messages []mockapi.Message) (uses, results int) {
	for _, m := range messages {
		for _, b := range m.Content {
			switch b.Type {
			case "tool_use":
				uses++
			case "tool_result":
				results++
			}
		}
	}
	return uses, results
}

// checkDefaultsTwoTurns runs the two turns with turn (an SDK's driver on
// defaults, reporting what it mirrored) and judges them; readers compares
// that SDK's session functions with the store and from ~/.claude.
func checkDefaultsTwoTurns(t *testing.T, a *agentEnv, turn func(prompt, resume string) turnResult, readers func(sid string)) {
	t.Helper()
	r := turn("run the commands", "")
	path := filepath.Join(a.home, ".claude", "projects", a.pk, r.SessionID+".jsonl")
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	turn1 := fileEntries(t, path)
	// Each mirrored entry is one of the CLI's lines there (it wrote them
	// first), and what is left is what the CLI never mirrors: none was
	// stored again. (Compared with another run's lines instead, with a
	// config dir of its own, the test failed by chance: the CLI writes a
	// varying number of last-prompt lines from run to run in eager mode.)
	left := slices.Clone(turn1)
	for _, e := range flat(r.Appended) {
		i := slices.IndexFunc(left, func(l any) bool { return reflect.DeepEqual(l, e) })
		if i < 0 {
			t.Fatalf("a mirrored entry is not one of the CLI's lines in the transcript: %.300v", e)
		}
		left = slices.Delete(left, i, i+1)
	}
	if len(r.Appended) == 0 {
		t.Fatal("the driver reported no mirrored batch")
	}
	for _, e := range left {
		if !strings.HasPrefix(typeOf(e), "api-request") {
			t.Fatalf("the transcript holds a line besides the CLI's mirrored and unmirrored ones: %.300v", e)
		}
	}
	if got := a.stored(r.SessionID, ""); !reflect.DeepEqual(got, turn1) {
		t.Fatalf("sessiond's Read serves %d entries, its file holds %d", len(got), len(turn1))
	}

	// The resume runs from the store in a temporary config dir the SDK
	// fills: its CLI writes there, and what it mirrors is stored.
	r2 := turn("say hi", r.SessionID)
	if r2.SessionID != r.SessionID {
		t.Fatalf("resumed as %s, want %s", r2.SessionID, r.SessionID)
	}
	if refused := a.refusals(); len(refused) > 0 {
		t.Fatalf("the API refused the resumed conversation: %v", refused)
	}
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	all := fileEntries(t, path)
	if want := append(slices.Clone(turn1), flat(r2.Appended)...); !reflect.DeepEqual(all, want) {
		t.Fatalf("after the resume the transcript holds\n%v\nwant the first turn's lines, then every line the resumed turn mirrored:\n%v", types(all), types(want))
	}
	seen := map[string]bool{}
	for _, e := range all {
		if id, _ := e.(map[string]any)["uuid"].(string); id != "" {
			if seen[id] {
				t.Fatalf("uuid %s is in the transcript twice", id)
			}
			seen[id] = true
		}
	}
	if got := a.stored(r.SessionID, ""); !reflect.DeepEqual(got, all) {
		t.Fatalf("sessiond's Read serves %d entries, its file holds %d", len(got), len(all))
	}
	// The ledger sessiond keeps of the transcript (records of the lines it
	// took in from the CLI among them) agrees with the file.
	if out, errOut, code := a.d.ctl("", "check", r.SessionID, "--project", a.pk); code != 0 {
		t.Fatalf("sessionctl check: exit %d\n%s%s", code, out, errOut)
	}
	// The official readers, in ~/.claude as claude --resume reads it, and
	// with the store, agree.
	readers(r.SessionID)
}
