package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
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
	checkDefaultsTwoTurns(t, a, func(prompt, resume string) turnResult {
		return a.turn("", prompt, resume, flush)
	}, func(sid string) { compareFunctions(t, a, sid) })
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
