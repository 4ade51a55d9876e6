package damage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

var update = transcripttest.Update

// The golden transcripts are real ones (cut from the shared fixtures)
// damaged the ways transcripts are damaged in the field. Each
// testdata/damaged/<name>.jsonl has its expected Check report
// (.check.json), repaired output (.repaired.jsonl) and action list
// (.actions.txt). Besides matching the goldens byte for byte, every case
// states, independently of them, which problems Check must find and
// whether repair must give back the undamaged transcript.

const goldenDir = "testdata/damaged"

// goldenCase builds one damaged transcript from the fixtures.
type goldenCase struct {
	name string
	// build returns the damaged transcript and, when repair must give
	// it back exactly, the undamaged one.
	build func(t testing.TB) (damaged, restored []byte)
	want  map[string]int // problem kinds Check must report, with counts
	opt   RepairOptions
}

// Deterministic synthetic entries for the goldens.
func goldenOptions(sessionID string) RepairOptions {
	n := 0
	return RepairOptions{
		SessionID: sessionID,
		Now:       func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) },
		NewUUID: func() string {
			n++
			return fmt.Sprintf("5e551011-0000-4000-8000-%012d", n)
		},
	}
}

// Bases, cut from the fixtures to keep testdata small.
//   - heavy: Claude Code 2.1.38, tool results chained to their assistant
//     entry (a tree), progress, queue-operation and snapshot lines.
//   - parallel: the same file's two parallel tool calls.
//   - linear: Claude Code 1.0.98, everything chained in file order, five
//     parallel tool calls.
//   - sidechain: 1.0.108, Task subagents written inline as sidechains.
//   - truncated: the real torn end of a 2.1.39 session.
func baseHeavy(t testing.TB) [][]byte {
	return cutLines(t, "marot__spotter__tool_heavy.jsonl", 1, 18)
}

func baseParallel(t testing.TB) [][]byte {
	return reroot(t, cutLines(t, "marot__spotter__tool_heavy.jsonl", 26, 33))
}

func baseLinear(t testing.TB) [][]byte {
	return cutLines(t, "d-kimuson__claude-code-viewer__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", 1, 23)
}

func baseSidechain(t testing.TB) [][]byte {
	return cutLines(t, "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl", 1, 24)
}

func goldenCases() []goldenCase {
	const heavySession = "d6e0bada-1959-4eec-a9d2-0bfade768d8f"
	return []goldenCase{
		{name: "torn_tail", want: kinds(KindTorn, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)[:17] // the file ends in the middle of line 17, a tool result
				l[16] = l[16][:len(l[16])/2]
				return join(l, false), nil
			}},
		{name: "truncated_real", want: kinds(KindTorn, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				l := reroot(t, cutLines(t, "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20.TRUNCATED.jsonl", 864, 885))
				return join(l, false), nil
			}},
		{name: "no_newline", want: kinds(KindTorn),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				return join(l, false), join(l, true)
			}},
		{name: "spliced_whole", want: kinds(KindSpliced, KindDanglingParent, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t) // line 11 lost its newline: the next record follows on the same line
				return join(spliceLines(l, 11, cat(l[10], l[11])), true), join(l, true)
			}},
		{name: "spliced_interleaved", want: kinds(KindSpliced, KindMalformed, KindOrphanToolUse, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				// Two parallel tool results: the first one's writer
				// wrote its line in two parts and the second one's whole
				// line landed in between.
				l := baseParallel(t)
				a, b := l[6], l[7]
				d := append(clone(l[:6]), cat(a[:300], b), a[300:])
				return join(d, true), nil
			}},
		{name: "spliced_torn_lost", want: kinds(KindSpliced, KindDanglingParent, KindStrayToolResult, KindStrayToolResult, KindOrphanToolUse, KindOrphanToolUse, KindOrphanToolUse, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				// Line 12 was cut short and the next record followed it;
				// its rest never made it to the file.
				l := baseLinear(t)
				return join(spliceLines(l, 12, cat(l[11][:200], l[12])), true), nil
			}},
		{name: "dropped_result_tree", want: kinds(KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				return join(deleteLine(baseParallel(t), 7), true), nil
			}},
		{name: "dropped_result_linear", want: kinds(KindDanglingParent, KindStrayToolResult, KindStrayToolResult, KindStrayToolResult, KindOrphanToolUse, KindOrphanToolUse, KindOrphanToolUse, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				return join(deleteLine(baseLinear(t), 12), true), nil
			}},
		{name: "duplicate_line", want: kinds(KindDuplicateUUID, KindDuplicateUUID),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				d := clone(l[:12])
				d = append(d, l[11]) // written twice in a row
				d = append(d, l[12:]...)
				d = append(d, l[4]) // and an old entry written again at the end
				return join(d, true), join(l, true)
			}},
		{name: "nul_runs", want: kinds(KindNUL, KindNUL, KindDanglingParent, KindDanglingParent, KindStrayToolResult),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				d := clone(l)
				d[11] = insertAfter(t, d[11], `"text":"`, bytes.Repeat([]byte{0}, 7))
				d[12] = cat([]byte{0, 0, 0}, d[12])
				return join(d, true), join(l, true)
			}},
		{name: "nul_block", want: kinds(KindNUL, KindOrphanToolUse, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				// After a crash the blocks holding lines 6 and 7 read as
				// zeros; the agent then appended line 8 after them.
				l := baseParallel(t)
				zeros := bytes.Repeat([]byte{0}, len(l[5])+1+len(l[6])+1)
				d := append(clone(l[:5]), cat(zeros, l[7]))
				return join(d, true), nil
			}},
		{name: "lone_surrogate", want: kinds(KindLoneSurrogate, KindLoneSurrogate),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				l[11] = insertAfter(t, l[11], `"text":"`, []byte(`\ud83d and a pair \ud83d\ude00 kept `))
				l[17] = insertAfter(t, l[17], `"text":"`, []byte(`\udc00`))
				return join(l, true), nil
			}},
		{name: "invalid_utf8", want: kinds(KindInvalidUTF8, KindInvalidUTF8),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				l[11] = insertAfter(t, l[11], `"text":"`, []byte("\xff\xfe binary "))
				l[17] = insertAfter(t, l[17], `"text":"`, []byte("\xc3("))
				return join(l, true), nil
			}},
		{name: "garbage_lines", want: kinds(KindMalformed, KindMalformed, KindMalformed, KindMalformed, KindDanglingParent),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				d := clone(l[:9])
				d = append(d, []byte("\x7fELF\x02\x01 not a transcript line"), nil) // garbage, an empty line
				d = append(d, l[9:]...)
				d[13] = cat(rawjson.BOM, d[13])
				d[19] = insertAfter(t, d[19], `"text":"`, []byte("tab\there, bell\x07"))
				want := clone(l)
				want[17] = insertAfter(t, want[17], `"text":"`, []byte(`tab\there, bell\u0007`))
				return join(d, true), join(want, true)
			}},
		{name: "deleted_chain_entry", want: kinds(KindDanglingParent, KindDanglingParent, KindStrayToolResult),
			build: func(t testing.TB) ([]byte, []byte) {
				return join(deleteLine(baseHeavy(t), 13), true), nil // an assistant entry with a tool_use
			}},
		{name: "stray_tool_result", want: kinds(KindStrayToolResult, KindStrayToolResult),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				// A result block for an unknown call added to line 17,
				// and a user line holding only such a block chained
				// between lines 17 and 18.
				block := []byte(`{"tool_use_id":"toolu_01STRAYSTRAYSTRAYSTRAY01","type":"tool_result","content":"stale","is_error":false}`)
				d := clone(l)
				d[16] = insertAfter(t, d[16], `"content":[`, cat(block, []byte(",")))
				stray := setTop(t, l[16], "uuid", `"0b5e1e55-0000-4000-8000-000000000017"`)
				stray = setTop(t, stray, "parentUuid", strconv.Quote(topString(t, l[16], "uuid")))
				id := readRecord(l[16]).results[0].id
				stray = bytes.Replace(stray, []byte(id), []byte("toolu_01STRAYSTRAYSTRAYSTRAY02"), 1)
				d[17] = setTop(t, d[17], "parentUuid", `"0b5e1e55-0000-4000-8000-000000000017"`)
				d = append(d[:17], append([][]byte{stray}, d[17:]...)...)
				return join(d, true), join(l, true)
			}},
		{name: "cycle", want: kinds(KindCycle),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				d := clone(l)
				d[3] = setTop(t, d[3], "parentUuid", strconv.Quote(topString(t, l[11], "uuid")))
				return join(d, true), join(l, true)
			}},
		{name: "sidechain_dropped_result", want: kinds(KindDanglingParent, KindOrphanToolUse),
			build: func(t testing.TB) ([]byte, []byte) {
				return join(deleteLine(baseSidechain(t), 21), true), nil
			}},
		{name: "multiple_roots", want: kinds(KindMultipleRoots),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				l[17] = setTop(t, l[17], "parentUuid", "null")
				return join(l, true), join(l, true) // not repairable: left as it is
			}},
		{name: "session_mismatch", want: kinds(KindSessionMismatch), opt: goldenOptions(heavySession),
			build: func(t testing.TB) ([]byte, []byte) {
				l := baseHeavy(t)
				l[11] = setTop(t, l[11], "sessionId", `"00000000-0000-4000-8000-000000000bad"`)
				return join(l, true), join(l, true)
			}},
	}
}

func kinds(k ...string) map[string]int {
	m := map[string]int{}
	for _, x := range k {
		m[x]++
	}
	return m
}

// TestGoldenInputs rebuilds every damaged transcript from the fixtures and
// compares it with the one in testdata (-update rewrites them). It fails
// when the fixtures are missing.
func TestGoldenInputs(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			damaged, _ := c.build(t)
			path := filepath.Join(goldenDir, c.name+".jsonl")
			if *update {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				writeGolden(t, path, damaged)
				return
			}
			if got := readGolden(t, path); !bytes.Equal(got, damaged) {
				t.Errorf("%s differs from what the fixtures give; run go test -run TestGolden -update", path)
			}
		})
	}
}

// TestGolden checks and repairs every damaged transcript.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			damaged := readGolden(t, filepath.Join(goldenDir, c.name+".jsonl"))
			opt := c.opt
			if opt.NewUUID == nil {
				opt = goldenOptions("")
			}
			checkOpt := CheckOptions{SessionID: opt.SessionID}

			rep, err := Check(bytes.NewReader(damaged), checkOpt)
			if err != nil {
				t.Fatal(err)
			}
			if got := problemKinds(rep); !maps.Equal(got, c.want) {
				t.Errorf("Check found %v, want %v:\n%s", got, c.want, problemList(rep))
			}

			var out bytes.Buffer
			res, err := Repair(bytes.NewReader(damaged), int64(len(damaged)), &out, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !reportsEqual(res.Before, rep) {
				t.Errorf("RepairResult.Before differs from Check of the input")
			}
			assertRepaired(t, out.Bytes(), res, checkOpt)
			if _, restored := c.build(t); restored != nil && !bytes.Equal(out.Bytes(), restored) {
				t.Errorf("repair did not give back the undamaged transcript:\n%s", firstDiff(out.Bytes(), restored))
			}
			if res.Changed != !bytes.Equal(out.Bytes(), damaged) {
				t.Errorf("Changed = %v, but the output is %s the input", res.Changed, map[bool]string{true: "the same as", false: "not"}[bytes.Equal(out.Bytes(), damaged)])
			}

			checkJSON, _ := json.MarshalIndent(rep, "", "  ")
			golden := map[string][]byte{
				".check.json":     append(checkJSON, '\n'),
				".repaired.jsonl": out.Bytes(),
				".actions.txt":    actionList(res.Actions),
			}
			for ext, data := range golden {
				path := filepath.Join(goldenDir, c.name+ext)
				if *update {
					writeGolden(t, path, data)
					continue
				}
				if want := readGolden(t, path); !bytes.Equal(data, want) {
					t.Errorf("%s differs from the golden (go test -run TestGolden -update to accept):\n%s", path, firstDiff(data, want))
				}
			}
		})
	}
}

// assertRepaired checks what must hold of any repair: the output has only
// problems Repair leaves by definition, After is its Check, and repairing
// it again changes nothing.
func assertRepaired(t testing.TB, out []byte, res *RepairResult, opt CheckOptions) {
	t.Helper()
	after, err := Check(bytes.NewReader(out), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reportsEqual(after, res.After) {
		t.Errorf("RepairResult.After differs from Check of the output")
	}
	for _, p := range after.Problems {
		if Repairable(p.Kind) {
			t.Errorf("repaired output still has %s at line %d: %s", p.Kind, p.Line, p.Message)
		}
	}
	if after.Malformed != 0 || after.Entries != after.Lines {
		t.Errorf("repaired output has %d malformed lines of %d", after.Malformed, after.Lines)
	}
	var again bytes.Buffer
	res2, err := Repair(bytes.NewReader(out), int64(len(out)), &again, RepairOptions{SessionID: opt.SessionID})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Changed || len(res2.Actions) > 0 || !bytes.Equal(again.Bytes(), out) {
		t.Errorf("repair is not idempotent: a second repair did %d actions:\n%s", len(res2.Actions), actionList(res2.Actions))
	}
}

// actionList renders actions for people and goldens.
func actionList(actions []Action) []byte {
	var b bytes.Buffer
	for _, a := range actions {
		fmt.Fprintf(&b, "line %d %s: %s\n", a.Line, a.Kind, a.Detail)
		if a.Before != nil {
			fmt.Fprintf(&b, "  - %s\n", strconv.Quote(string(a.Before)))
		}
		if a.After != nil {
			fmt.Fprintf(&b, "  + %s\n", strconv.Quote(string(a.After)))
		}
	}
	return b.Bytes()
}

func problemList(r *Report) string {
	var b strings.Builder
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  line %d %s %v: %s\n", p.Line, p.Kind, p.IDs, p.Message)
	}
	return b.String()
}

func reportsEqual(a, b *Report) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// problemKinds counts the problems of r by kind.
func problemKinds(r *Report) map[string]int {
	kinds := map[string]int{}
	for _, p := range r.Problems {
		kinds[p.Kind]++
	}
	return kinds
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, transcripttest.Shorten(gl), transcripttest.Shorten(wl))
		}
	}
	return "(no difference)"
}

func readGolden(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create the goldens)", err)
	}
	return data
}

func writeGolden(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Building damaged transcripts.

// fixtureLinesOf returns the lines of a fixture (without their '\n'). It
// fails when the fixture is missing.
func fixtureLinesOf(t testing.TB, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, name))
	if err != nil {
		t.Fatalf("fixture %s: %v (the real transcripts from /work/shared/fixtures are needed)", name, err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\n"))
	}
	return lines
}

// cutLines returns lines from..to (1-based, inclusive) of a fixture.
func cutLines(t testing.TB, name string, from, to int) [][]byte {
	t.Helper()
	l := fixtureLinesOf(t, name)
	if to > len(l) {
		t.Fatalf("fixture %s has %d lines, not %d", name, len(l), to)
	}
	return clone(l[from-1 : to])
}

// reroot makes the first chain entry of a cut transcript its root.
func reroot(t testing.TB, lines [][]byte) [][]byte {
	t.Helper()
	for i, l := range lines {
		if _, ok := rawjson.LastMember(l, 0, "parentUuid"); ok {
			lines[i] = setTop(t, l, "parentUuid", "null")
			return lines
		}
	}
	t.Fatal("no chain entry to make a root")
	return nil
}

func clone(lines [][]byte) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = bytes.Clone(l)
	}
	return out
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func join(lines [][]byte, finalNewline bool) []byte {
	b := bytes.Join(lines, []byte("\n"))
	if finalNewline {
		b = append(b, '\n')
	}
	return b
}

// spliceLines replaces lines n and n+1 (1-based) with one line.
func spliceLines(lines [][]byte, n int, line []byte) [][]byte {
	out := clone(lines[:n-1])
	out = append(out, line)
	return append(out, clone(lines[n+1:])...)
}

func deleteLine(lines [][]byte, n int) [][]byte {
	return append(clone(lines[:n-1]), clone(lines[n:])...)
}

func insertAfter(t testing.TB, line []byte, marker string, ins []byte) []byte {
	t.Helper()
	i := bytes.Index(line, []byte(marker))
	if i < 0 {
		t.Fatalf("no %s in %s", marker, transcripttest.Shorten(line))
	}
	i += len(marker)
	return cat(line[:i], ins, line[i:])
}

// setTop replaces the value of a top-level member, which must exist.
func setTop(t testing.TB, line []byte, key, value string) []byte {
	t.Helper()
	m, ok := rawjson.LastMember(line, 0, key)
	if !ok {
		t.Fatalf("no %s in %s", key, transcripttest.Shorten(line))
	}
	return rawjson.ReplaceSpan(line, m.Val, []byte(value))
}

func topString(t testing.TB, line []byte, key string) string {
	t.Helper()
	s, ok := rawjson.TopLevelString(line, key)
	if !ok {
		t.Fatalf("no string %s in %s", key, transcripttest.Shorten(line))
	}
	return s
}

// goldenNames lists the damaged transcripts in testdata, for tests that
// use them as seeds or inputs.
func goldenNames(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".repaired.jsonl") {
			names = append(names, strings.TrimSuffix(filepath.Base(f), ".jsonl"))
		}
	}
	sort.Strings(names)
	return names
}
