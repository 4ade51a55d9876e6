package index

import (
	"bytes"
	"testing"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// searchPromptTime is promptTime as a search of the whole line per mark
// and a scan per key: the reference the one-walk version must agree with.
func searchPromptTime(line []byte) (int64, bool) {
	if !bytes.HasPrefix(line, []byte(`{"`)) {
		return 0, false
	}
	if t, _ := rawjson.TopLevelString(line, "type"); t != "user" {
		return 0, false
	}
	if bytes.Contains(line, markToolResult) || bytes.Contains(line, markMeta) || bytes.Contains(line, markCompact) {
		return 0, false
	}
	ts, ok := rawjson.TopLevelString(line, "timestamp")
	if !ok {
		return 0, false
	}
	return stampMs(ts)
}

// TestPromptTimeAgreesWithSearch: on every valid line of the real
// transcripts, and on lines made to trip a one-walk reading (repeated and
// escaped keys, a type that is no string, marks inside strings and keys),
// promptTime says what the plain search says.
func TestPromptTimeAgreesWithSearch(t *testing.T) {
	lines := [][]byte{
		[]byte(prompt), []byte(toolReply), []byte(assistant),
		[]byte(`{"type":"assistant","timestamp":"2025-01-02T03:04:05.678Z","type":"user"}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","type":"assistant"}`),
		[]byte(`{"typ\u0065":"user","timestamp":"2025-01-02T03:04:05.678Z"}`),
		[]byte(`{"type":"us\u0065r","timestamp":"2025-01-02T03:04:05.678Z"}`),
		[]byte(`{"type":["user"],"timestamp":"2025-01-02T03:04:05.678Z"}`),
		[]byte(`{"type":"user","timestamp":17}`),
		[]byte(`{"type":"user","timestamp":"yesterday"}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","note":"say \"isMeta\":true"}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","x":{"isMeta":true}}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","isMeta":false}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","isCompactSummary":true}`),
		[]byte(`{"type":"user","m":{"timestamp":"2025-01-02T03:04:05.678Z"}}`),
		[]byte(`{"type":"user","timestamp":"2025-01-02T03:04:05.678Z","k":"\"tool_result\""}`),
		[]byte(`{"type" : "user" , "timestamp" : "2025-01-02T03:04:05.678Z"}`),
		[]byte(` {"type":"user","timestamp":"2025-01-02T03:04:05.678Z"}`),
		[]byte(`{}`),
	}
	valid, prompts := 0, 0
	for _, fl := range transcripttest.FixtureLines(t) {
		lines = append(lines, fl.Line)
	}
	for _, l := range lines {
		if kind, _ := damage.ClassifyLine(l); kind != "" {
			continue // promptTime sees valid entries only
		}
		valid++
		gotMs, gotOK := promptTime(l)
		wantMs, wantOK := searchPromptTime(l)
		if gotMs != wantMs || gotOK != wantOK {
			t.Errorf("promptTime(%.200s) = %d, %v; the search says %d, %v", l, gotMs, gotOK, wantMs, wantOK)
		}
		if gotOK {
			prompts++
		}
	}
	if valid < 100 || prompts < 5 {
		t.Fatalf("only %d valid lines, %d prompts: the fixtures are not being read", valid, prompts)
	}
}

// BenchmarkPromptTime times the check on every valid line of the real
// transcripts, against the search it replaced.
func BenchmarkPromptTime(b *testing.B) {
	var lines [][]byte
	for _, fl := range transcripttest.FixtureLines(b) {
		if kind, _ := damage.ClassifyLine(fl.Line); kind == "" {
			lines = append(lines, fl.Line)
		}
	}
	for _, f := range []struct {
		name string
		fn   func([]byte) (int64, bool)
	}{{"walk", promptTime}, {"search", searchPromptTime}} {
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				for _, l := range lines {
					f.fn(l)
				}
			}
		})
	}
}
