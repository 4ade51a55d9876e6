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

// fileEntries returns every line of a transcript file, decoded, the CLI's
// api-request lines included unless mirroredOnly.
func fileEntries(t *testing.T, path string, mirroredOnly bool) []any {
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
		if typ, _ := v["type"].(string); mirroredOnly && strings.HasPrefix(typ, "api-request") {
			continue
		}
		out = append(out, v)
	}
	return out
}

// sortedTypes is the entries' types, sorted: two runs of the same turns
// write the same lines, the parallel tool results perhaps in another order.
func sortedTypes(es []any) []string {
	out := types(es)
	slices.Sort(out)
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
// wrote exactly once (as a run with a config dir of its own shows them) and
// every line it mirrored, sessiond's Read serves the same, the SDK's
// readers find the session in ~/.claude, and the resumed conversation is
// valid.
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
	// What the CLI writes of the first turn, with a config dir of its own.
	sep := newAgentEnv(t)
	sepCfg := filepath.Join(t.TempDir(), "agent-config")
	s1 := sep.turn(sepCfg, "run the commands", "", flush)
	sepTurn1 := fileEntries(t, filepath.Join(sepCfg, "projects", sep.pk, s1.SessionID+".jsonl"), false)

	a := newAgentEnvRoot(t, true)
	r := a.turn("", "run the commands", "", flush)
	path := filepath.Join(a.home, ".claude", "projects", a.pk, r.SessionID+".jsonl")
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	turn1 := fileEntries(t, path, false)
	if got, want := sortedTypes(turn1), sortedTypes(sepTurn1); !reflect.DeepEqual(got, want) {
		t.Fatalf("after one turn on defaults the transcript holds %d lines, the CLI writes %d:\n%v\n%v", len(turn1), len(sepTurn1), got, want)
	}
	// Each mirrored entry is one of the CLI's lines there (it wrote them
	// first): none was stored again.
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
	if got := a.stored(r.SessionID, ""); !reflect.DeepEqual(got, turn1) {
		t.Fatalf("sessiond's Read serves %d entries, its file holds %d", len(got), len(turn1))
	}

	// The resume runs from the store in a temporary config dir the SDK
	// fills: its CLI writes there, and what it mirrors is stored.
	r2 := a.turn("", "say hi", r.SessionID, flush)
	if r2.SessionID != r.SessionID {
		t.Fatalf("resumed as %s, want %s", r2.SessionID, r.SessionID)
	}
	if refused := a.refusals(); len(refused) > 0 {
		t.Fatalf("the API refused the resumed conversation: %v", refused)
	}
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		t.Fatalf("flush: %s", errOut)
	}
	all := fileEntries(t, path, false)
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
	compareFunctions(t, a, r.SessionID)
}
