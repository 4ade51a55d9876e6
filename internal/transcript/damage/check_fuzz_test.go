package damage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

var allKinds = map[string]bool{
	"": true, KindMalformed: true, KindTorn: true, KindNUL: true, KindSpliced: true,
	KindInvalidUTF8: true, KindLoneSurrogate: true,
}

// seedLines adds fixture and golden lines (cut to a fuzzer-friendly size)
// and the kinds of damage repair handles.
func seedLines(f *testing.F) {
	for i, fl := range transcripttest.FixtureLines(f) {
		if i%7 == 0 && len(fl.Line) < 4096 {
			f.Add(fl.Line)
			f.Add(fl.Line[:len(fl.Line)/2])
		}
	}
	for _, s := range []string{
		``, ` `, "\x00\x00\x00", "\xef\xbb\xbf{}", `{}{}`, `{"a":{"b":1}{"type":"user","uuid":"x"}`,
		`{"type":"user","text":"\ud800"}`, "{\"t\":\"\xff\"}", "{\"t\":\"a\tb\"}", `{"uuid":1}`,
		`[1]`, `"s"`, `{"a":"\u12`, `{"type":"tag","tag":"x"} trailing`, "{\"type\":\"user\"}\x00{\"type\":\"user\"}",
	} {
		f.Add([]byte(s))
	}
}

// FuzzClassifyLine: ClassifyLine never panics, names a known kind with a
// detail, and agrees with Normalize: a line it calls valid is accepted, and
// an accepted line is valid or holds a lone surrogate escape (stored as the
// CLI wrote it, reported by check).
func FuzzClassifyLine(f *testing.F) {
	seedLines(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		kind, detail := ClassifyLine(line)
		if !allKinds[kind] {
			t.Fatalf("unknown kind %q", kind)
		}
		if (kind == "") != (detail == "") {
			t.Fatalf("kind %q with detail %q", kind, detail)
		}
		if bytes.IndexByte(line, '\n') < 0 {
			_, err := transcript.Normalize(line, 0)
			if (kind == "" && err != nil) || (err == nil && kind != "" && kind != KindLoneSurrogate) {
				t.Fatalf("ClassifyLine says %q (%s), Normalize says %v, for %s", kind, detail, err, transcripttest.Shorten(line))
			}
		}
		if kind == "" {
			readRecord(line)
		}
	})
}

// FuzzRepair: Repair takes any input without failing; its output has no
// problem it could repair, is what After describes, and repairing it again
// changes nothing.
func FuzzRepair(f *testing.F) {
	seedLines(f)
	names, _ := filepath.Glob(filepath.Join(goldenDir, "*.jsonl"))
	for _, n := range names {
		f.Add(readGolden(f, n))
	}
	for _, s := range []string{
		// Handmade chains: a cycle, a stray result, a split assistant
		// message with one result lost, a compact boundary.
		`{"type":"user","uuid":"a","parentUuid":"b"}` + "\n" + `{"type":"user","uuid":"b","parentUuid":"a"}` + "\n",
		`{"type":"user","uuid":"r","parentUuid":null,"message":{"content":[{"type":"tool_result","tool_use_id":"x"},{"type":"text","text":"hi"}]}}` + "\n",
		`{"type":"assistant","uuid":"a1","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t1"}]}}` + "\n" +
			`{"type":"assistant","uuid":"a2","parentUuid":"a1","message":{"id":"m","content":[{"type":"tool_use","id":"t2"}]}}` + "\n" +
			`{"type":"user","uuid":"r2","parentUuid":"a2","message":{"content":[{"type":"tool_result","tool_use_id":"t2"}]}}` + "\n" +
			`{"type":"user","uuid":"u","parentUuid":"r2","message":{"content":"next"}}` + "\n",
		`{"type":"system","subtype":"compact_boundary","uuid":"c","parentUuid":null,"logicalParentUuid":"z"}` + "\n",
		// Found by the fuzzer: nothing can chain to an empty uuid.
		`{"message":{"content":[{"type":"tool_use","id":"0"}]},"type":"assistant","uuid":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		opt := RepairOptions{
			Now:     func() time.Time { return time.Unix(0, 0) },
			NewUUID: func() string { n++; return fmt.Sprintf("fuzz-%d", n) },
		}
		var out bytes.Buffer
		res, err := Repair(bytes.NewReader(data), int64(len(data)), &out, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.After.Problems {
			if Repairable(p.Kind) {
				t.Fatalf("repaired output still has %s at line %d: %s\ninput:\n%q\noutput:\n%q", p.Kind, p.Line, p.Message, data, out.Bytes())
			}
		}
		after, err := Check(bytes.NewReader(out.Bytes()), CheckOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(after)
		b, _ := json.Marshal(res.After)
		if !bytes.Equal(a, b) {
			t.Fatalf("RepairResult.After is not Check of the output")
		}
		if res.Changed == bytes.Equal(out.Bytes(), data) {
			t.Fatalf("Changed = %v, but the output %s the input", res.Changed, map[bool]string{true: "equals", false: "differs from"}[!res.Changed])
		}
		var again bytes.Buffer
		res2, err := Repair(bytes.NewReader(out.Bytes()), int64(out.Len()), &again, opt)
		if err != nil {
			t.Fatal(err)
		}
		if res2.Changed || !bytes.Equal(again.Bytes(), out.Bytes()) {
			t.Fatalf("second repair changed the output:\n%s\ninput:\n%q\noutput:\n%q", actionList(res2.Actions), data, out.Bytes())
		}
	})
}
