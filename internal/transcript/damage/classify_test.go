package damage

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// A record cut anywhere is a prefix: the scan must end at the cut wanting
// more (that is how a torn line is told from garbage).
func TestParseValueCutIsEOF(t *testing.T) {
	for i, fl := range transcripttest.FixtureLines(t) {
		if i%5 != 0 {
			continue
		}
		line := fl.Line
		for k := 1; k < len(line); k += 1 + len(line)/40 {
			_, _, err := rawjson.ParseValue(line[:k], 0, true)
			if err == nil || !err.EOF {
				t.Fatalf("%s cut at %d of %d: err %+v, want end of data", fl.File, k, len(line), err)
			}
			if v := classifyLine(line[:k]); v.kind != KindTorn {
				t.Fatalf("%s cut at %d: ClassifyLine says %s (%s), want %s", fl.File, k, v.kind, v.detail, KindTorn)
			}
		}
	}
}

// Edits change the edited value only: every other byte of a real line
// stays, whatever its escapes and key order.
func TestEditsKeepOtherBytes(t *testing.T) {
	n := 0
	for _, fl := range transcripttest.FixtureLines(t) {
		if kind, _ := ClassifyLine(fl.Line); kind != "" {
			continue // the torn line
		}
		m, ok := rawjson.LastMember(fl.Line, 0, "parentUuid")
		if !ok {
			continue
		}
		out := setParent(fl.Line, "new-parent")
		if !bytes.Equal(out[:m.Val.Start], fl.Line[:m.Val.Start]) || !bytes.Equal(out[len(out)-(len(fl.Line)-m.Val.End):], fl.Line[m.Val.End:]) {
			t.Fatalf("%s: setParent changed more than the value", fl.File)
		}
		if got, _ := rawjson.TopLevelString(out, "parentUuid"); got != "new-parent" {
			t.Fatalf("%s: parentUuid is %q after setParent", fl.File, got)
		}
		r := readRecord(fl.Line)
		if len(r.results) > 0 {
			out := removeContent(fl.Line, []int{int(r.results[0].elem)})
			var before, after map[string]any
			if json.Unmarshal(fl.Line, &before) != nil || json.Unmarshal(out, &after) != nil {
				t.Fatalf("%s: removeContent made invalid JSON", fl.File)
			}
			bc := before["message"].(map[string]any)["content"].([]any)
			ac := after["message"].(map[string]any)["content"].([]any)
			if len(ac) != len(bc)-1 {
				t.Fatalf("%s: content has %d elements after removing one of %d", fl.File, len(ac), len(bc))
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no tool results in the fixtures")
	}
}

func TestClassifyLine(t *testing.T) {
	cases := []struct {
		line, kind string
		fix        fixKind
	}{
		{`{"type":"user","uuid":"u"}`, "", fixNone},
		{` {"type":"user"} ` + "\r", "", fixNone},
		{``, KindMalformed, fixDrop},
		{"\x00\x00", KindNUL, fixStripNUL},
		{"\x00{}", KindNUL, fixStripNUL},
		{`{"type":"user","mess`, KindTorn, fixDrop},
		{`{"type":"user","n":12`, KindTorn, fixDrop},
		{`{"type":"user"}{"type":"user"}`, KindSpliced, fixSplit},
		{`{"type":"user","message":{"content":"ab{"type":"user","uuid":"x","parentUuid":null}`, KindSpliced, fixSplit},
		// A progress entry's nested message is not a record: it has no
		// parentUuid.
		{`{"type":"progress","data":{"message":{"type":"user","uuid":"x"}`, KindTorn, fixDrop},
		{`{"type":"progress","data":{"message":{"type":"user","uuid":"x"},"more":1`, KindTorn, fixDrop},
		// An inner object completing at the cut is not taken for a record.
		{`{"type":"user","message":{"content":[{"type":"text","text":"a"}`, KindTorn, fixDrop},
		{`{"type":"user"} garbage`, KindMalformed, fixSplit},
		{`garbage {"type":"user","uuid":"x","parentUuid":"y"}`, KindMalformed, fixSplit},
		{`garbage {"type":"custom-title","customTitle":"x"}`, KindMalformed, fixSplit},
		{`garbage {"type":"text","text":"x"}`, KindMalformed, fixDrop},
		{"{\"t\":\"\xff\"}", KindInvalidUTF8, fixReplace},
		{`{"t":"\udc00"}`, KindLoneSurrogate, fixReplace},
		{`{"t":"\ud83d\ude00"}`, "", fixNone},
		{`{"t":"\\ud800"}`, "", fixNone}, // an escaped backslash, then text
		{"{\"t\":\"a\x01\"}", KindMalformed, fixEscape},
		{"\xef\xbb\xbf{}", KindMalformed, fixBOM},
		{`{"uuid":7}`, KindMalformed, fixDrop},
		{`[{"type":"user"}]`, KindMalformed, fixDrop},
		{`not json`, KindMalformed, fixDrop},
	}
	for _, c := range cases {
		v := classifyLine([]byte(c.line))
		if v.kind != c.kind || v.fix != c.fix {
			t.Errorf("ClassifyLine(%q) = %q (%s), fix %d; want %q, fix %d", c.line, v.kind, v.detail, v.fix, c.kind, c.fix)
		}
	}
}

// fixEncoding replaces exactly what it counts, and the result is valid.
func TestFixEncoding(t *testing.T) {
	in := []byte("{\"a\":\"x\xff\xfey\",\"b\":\"\\ud800 \\ud83d\\ude00 \\\\ud800\",\"c\":\"tab\there\"}")
	fx := fixEncoding(in, true)
	want := `{"a":"x` + "\uFFFD\uFFFD" + `y","b":"\ufffd \ud83d\ude00 \\ud800","c":"tab\there"}`
	if string(fx.out) != want {
		t.Fatalf("got  %s\nwant %s", fx.out, want)
	}
	if st := fx.stats; st.badUTF8 != 2 || st.lone != 1 || st.ctrl != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := transcript.Normalize(fx.out, 0); err != nil {
		t.Fatal(err)
	}
}
