package damage

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"testing"
)

// Small handmade transcripts, one per decision Check and Repair make about
// chains and pairing. Entries are written by e() so that each line shows
// only what matters.

// e writes an entry: typ, uuid, parent ("" = null) and extra members.
func e(typ, uuid, parent string, extra ...string) string {
	p := "null"
	if parent != "" {
		p = fmt.Sprintf("%q", parent)
	}
	s := fmt.Sprintf(`{"parentUuid":%s,"isSidechain":false,"sessionId":"s1","type":%q`, p, typ)
	for _, x := range extra {
		if strings.HasPrefix(x, `"isSidechain"`) {
			s = strings.Replace(s, `"isSidechain":false`, x, 1)
			continue
		}
		s += "," + x
	}
	return s + fmt.Sprintf(`,"uuid":%q,"timestamp":"2026-01-01T00:00:00.000Z"}`, uuid)
}

func call(id string, tools ...string) string {
	blocks := make([]string, len(tools))
	for i, t := range tools {
		blocks[i] = fmt.Sprintf(`{"type":"tool_use","id":%q,"name":"Bash","input":{}}`, t)
	}
	return fmt.Sprintf(`"message":{"id":%q,"role":"assistant","content":[%s]}`, id, strings.Join(blocks, ","))
}

func result(tools ...string) string {
	blocks := make([]string, len(tools))
	for i, t := range tools {
		blocks[i] = fmt.Sprintf(`{"tool_use_id":%q,"type":"tool_result","content":"ok"}`, t)
	}
	return fmt.Sprintf(`"message":{"role":"user","content":[%s]}`, strings.Join(blocks, ","))
}

const prompt = `"message":{"role":"user","content":"go on"}`

// jsonl joins lines into a transcript, one per line.
func jsonl(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

func TestChainAndPairingCases(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want map[string]int
		// out, when set, is the exact repaired transcript.
		out []byte
	}{
		{name: "tree-format parallel results are paired", want: kinds(),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("assistant", "a2", "a1", call("m1", "t2")),
				e("progress", "p1", "a2"),
				e("user", "r2", "a2", result("t2")),
				e("user", "r1", "a1", result("t1")),
				e("assistant", "a3", "r1", call("m2")),
			)},
		{name: "a result chained through progress is paired", want: kinds(),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("progress", "p1", "a1"),
				e("user", "r1", "p1", result("t1")),
			)},
		{name: "a prompt between call and result ends the turn", want: kinds(KindOrphanToolUse, KindStrayToolResult),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("user", "u2", "a1", prompt),
				e("user", "r1", "u2", result("t1")),
			)},
		{name: "compact boundaries and sidechain roots are explained roots", want: kinds(),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("user", "s1", "", `"isSidechain":true`, prompt),
				e("system", "c1", "", `"subtype":"compact_boundary"`, `"logicalParentUuid":"u1"`),
				e("user", "u2", "c1", prompt),
			)},
		{name: "a second root is reported and left", want: kinds(KindMultipleRoots),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("user", "u2", "", prompt),
			)},
		{name: "a compact boundary without logicalParentUuid is a second root", want: kinds(KindMultipleRoots),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("system", "c1", "", `"subtype":"compact_boundary"`),
			)},
		{name: "a subagent file may start with parents in the main transcript", want: kinds(),
			in: jsonl(
				e("user", "x1", "main-1", `"isSidechain":true`, prompt),
				e("user", "x2", "main-2", `"isSidechain":true`, prompt),
				e("assistant", "x3", "x2", `"isSidechain":true`, call("m1")),
			)},
		{name: "but a lost parent after that is dangling", want: kinds(KindDanglingParent),
			in: jsonl(
				e("user", "x1", "main-1", `"isSidechain":true`, prompt),
				e("assistant", "x2", "x1", `"isSidechain":true`, call("m1")),
				e("user", "x3", "lost", `"isSidechain":true`, prompt),
			),
			out: jsonl(
				e("user", "x1", "main-1", `"isSidechain":true`, prompt),
				e("assistant", "x2", "x1", `"isSidechain":true`, call("m1")),
				e("user", "x3", "x2", `"isSidechain":true`, prompt),
			)},
		{name: "a dangling main entry is not linked to a sidechain", want: kinds(KindDanglingParent),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("user", "s1", "", `"isSidechain":true`, prompt),
				e("user", "u2", "lost", prompt),
			),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("user", "s1", "", `"isSidechain":true`, prompt),
				e("user", "u2", "u1", prompt),
			)},
		{name: "a dangling result goes back to its assistant entry", want: kinds(KindDanglingParent, KindStrayToolResult, KindOrphanToolUse),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("progress", "p1", "a1"),
				e("user", "r1", "lost", result("t1"), `"sourceToolAssistantUUID":"a1"`),
			),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("progress", "p1", "a1"),
				e("user", "r1", "a1", result("t1"), `"sourceToolAssistantUUID":"a1"`),
			)},
		{name: "a two-entry cycle with a forward link", want: kinds(KindCycle),
			in: jsonl(
				e("user", "u0", "", prompt),
				e("user", "u1", "u2", prompt),
				e("user", "u2", "u1", prompt),
			),
			out: jsonl(
				e("user", "u0", "", prompt),
				e("user", "u1", "u0", prompt),
				e("user", "u2", "u1", prompt),
			)},
		{name: "a stray block among others is removed, the rest kept", want: kinds(KindStrayToolResult),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("user", "r1", "a1", `"message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"ok"}, {"tool_use_id":"zz","type":"tool_result","content":"old"} ,{"type":"text","text":"hi"}]}`),
			),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1")),
				e("user", "r1", "a1", `"message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"ok"}, {"type":"text","text":"hi"}]}`),
			)},
		{name: "a later copy of a uuid is dropped even if it differs", want: kinds(KindDuplicateUUID),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("user", "u1", "", `"message":{"role":"user","content":"other"}`),
			),
			out: jsonl(
				e("user", "u1", "", prompt),
			)},
		{name: "orphans of a split message get one result each, chained", want: kinds(KindOrphanToolUse, KindOrphanToolUse),
			in: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1"), `"cwd":"/w"`, `"version":"2.1.39"`, `"gitBranch":"main"`, `"agentId":"ag"`, `"slug":"sl"`),
				e("assistant", "a2", "a1", call("m1", "t2")),
				e("user", "u2", "a2", prompt),
			),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("assistant", "a1", "u1", call("m1", "t1"), `"cwd":"/w"`, `"version":"2.1.39"`, `"gitBranch":"main"`, `"agentId":"ag"`, `"slug":"sl"`),
				e("assistant", "a2", "a1", call("m1", "t2")),
				`{"parentUuid":"a2","isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s1","version":"2.1.39","gitBranch":"main","agentId":"ag","slug":"sl","type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"[sessiond] The result of this tool call was lost before it was saved to the transcript.","is_error":true,"tool_use_id":"t1"}]},"uuid":"5e551011-0000-4000-8000-000000000001","timestamp":"2026-01-01T00:00:00.000Z","toolUseResult":"Error: [sessiond] The result of this tool call was lost before it was saved to the transcript.","sourceToolAssistantUUID":"a1"}`,
				`{"parentUuid":"5e551011-0000-4000-8000-000000000001","isSidechain":false,"userType":"external","sessionId":"s1","type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"[sessiond] The result of this tool call was lost before it was saved to the transcript.","is_error":true,"tool_use_id":"t2"}]},"uuid":"5e551011-0000-4000-8000-000000000002","timestamp":"2026-01-01T00:00:00.000Z","toolUseResult":"Error: [sessiond] The result of this tool call was lost before it was saved to the transcript.","sourceToolAssistantUUID":"a2"}`,
				e("user", "u2", "5e551011-0000-4000-8000-000000000002", prompt),
			)},
		{name: "a synthetic result without a timestamp or session to copy takes Now and the file's", want: kinds(KindOrphanToolUse),
			in: []byte(`{"type":"assistant","uuid":"a1","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t1"}]}}` + "\n"),
			out: []byte(`{"type":"assistant","uuid":"a1","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t1"}]}}` + "\n" +
				`{"parentUuid":"a1","isSidechain":false,"userType":"external","sessionId":"s1","type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"[sessiond] The result of this tool call was lost before it was saved to the transcript.","is_error":true,"tool_use_id":"t1"}]},"uuid":"5e551011-0000-4000-8000-000000000001","timestamp":"2026-03-01T12:00:00.000Z","toolUseResult":"Error: [sessiond] The result of this tool call was lost before it was saved to the transcript.","sourceToolAssistantUUID":"a1"}` + "\n")},
		{name: "a record cut after a space inside a string is joined with that space", want: kinds(KindSpliced, KindMalformed),
			in: []byte(e("user", "u1", "", prompt) + "\n" +
				e("user", "u2", "u1", `"message":{"role":"user","content":"two  spaces"}`)[:len(`{"parentUuid":"u1","isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":"two `)] +
				e("user", "u3", "u1", prompt) + "\n" +
				e("user", "u2", "u1", `"message":{"role":"user","content":"two  spaces"}`)[len(`{"parentUuid":"u1","isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":"two `):] + "\n"),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("user", "u3", "u1", prompt),
				e("user", "u2", "u1", `"message":{"role":"user","content":"two  spaces"}`),
			)},
		{name: "a torn record that the next line does not complete is dropped", want: kinds(KindSpliced, KindTorn),
			in: []byte(e("user", "u1", "", prompt) + "\n" +
				e("user", "u2", "u1", prompt)[:40] + e("user", "u3", "u1", prompt) + "\n" +
				e("user", "u4", "u3", prompt)[:30] + "\n"),
			out: jsonl(
				e("user", "u1", "", prompt),
				e("user", "u3", "u1", prompt),
			)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Check(bytes.NewReader(c.in), CheckOptions{SessionID: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			if got := problemKinds(rep); !maps.Equal(got, c.want) {
				t.Fatalf("Check found %v, want %v:\n%s", got, c.want, problemList(rep))
			}
			var out bytes.Buffer
			opt := goldenOptions("s1")
			res, err := Repair(bytes.NewReader(c.in), int64(len(c.in)), &out, opt)
			if err != nil {
				t.Fatal(err)
			}
			assertRepaired(t, out.Bytes(), res, CheckOptions{SessionID: "s1"})
			if c.out != nil && !bytes.Equal(out.Bytes(), c.out) {
				t.Fatalf("repaired:\n%s\nwant:\n%s\nactions:\n%s", out.Bytes(), c.out, actionList(res.Actions))
			}
			if rep.Clean() && (res.Changed || !bytes.Equal(out.Bytes(), c.in)) {
				t.Fatalf("repair changed a clean transcript:\n%s", actionList(res.Actions))
			}
		})
	}
}

// Repair reads its input through io.ReaderAt; a failing reader is an
// error, not a truncated repair.
func TestRepairReadError(t *testing.T) {
	var out bytes.Buffer
	if _, err := Repair(failingReaderAt{}, 100, &out, RepairOptions{}); err == nil {
		t.Fatal("no error from a failing reader")
	}
	if _, err := Check(failingReaderAt{}, CheckOptions{}); err == nil {
		t.Fatal("no error from a failing reader")
	}
}

type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errReadFailed }
func (failingReaderAt) Read([]byte) (int, error)          { return 0, errReadFailed }

var errReadFailed = fmt.Errorf("disk on fire")
