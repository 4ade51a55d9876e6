package transcript

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// ParseValue must agree with encoding/json on what is one JSON value (both
// leave UTF-8 and surrogate escapes unchecked).
func TestParseValueMatchesEncodingJSON(t *testing.T) {
	cases := []string{
		`{}`, `[]`, `{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, ` {"a":1} `, `-0.5e+3`, `"x"`, `true`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, `{"a":"\u12G4"}`, `nul`, `{"a":1}}`,
		"{\"a\":\"\xff\"}", `{"a":"\ud800"}`, "{\"a\":\"\t\"}", `[` + strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10002),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		e := genEntry(r)
		if len(e) > 0 && i%2 == 0 {
			e = mutate(r, e)
		}
		cases = append(cases, string(e))
	}
	for _, c := range cases {
		data := []byte(c)
		s := SkipWS(data, 0)
		ok := false
		if s < len(data) {
			end, _, err := ParseValue(data, s, false)
			ok = err == nil && SkipWS(data, end) == len(data)
		}
		if want := json.Valid(data); ok != want {
			t.Fatalf("parseValue says %v, encoding/json %v, for %s", ok, want, shorten(data))
		}
	}
}

// A record cut anywhere is a prefix: the scan must end at the cut wanting
// more (that is how a torn line is told from garbage).
func TestParseValueCutIsEOF(t *testing.T) {
	for i, fl := range fixtureLines(t) {
		if i%5 != 0 {
			continue
		}
		line := fl.line
		for k := 1; k < len(line); k += 1 + len(line)/40 {
			_, _, err := ParseValue(line[:k], 0, true)
			if err == nil || !err.EOF {
				t.Fatalf("%s cut at %d of %d: err %+v, want end of data", fl.file, k, len(line), err)
			}
			if v := classifyLine(line[:k]); v.kind != KindTorn {
				t.Fatalf("%s cut at %d: ClassifyLine says %s (%s), want %s", fl.file, k, v.kind, v.detail, KindTorn)
			}
		}
	}
}

func TestRemoveElements(t *testing.T) {
	cases := []struct {
		in   string
		drop []bool
		want string
	}{
		{`[1,2,3]`, []bool{true, false, false}, `[2,3]`},
		{`[1,2,3]`, []bool{false, true, false}, `[1,3]`},
		{`[1,2,3]`, []bool{false, false, true}, `[1,2]`},
		{`[1,2,3]`, []bool{false, true, true}, `[1]`},
		{`[1,2,3]`, []bool{true, false, true}, `[2]`},
		{`[1,2,3]`, []bool{true, true, true}, `[]`},
		{`[ 1 , 2 , 3 ]`, []bool{false, true, false}, `[ 1 , 3 ]`},
		{`[ 1 , 2 , 3 ]`, []bool{false, false, true}, `[ 1 , 2 ]`},
		{`{"a":[{"x":[1]} ,{"y":2}]}`, []bool{true, false}, `{"a":[{"y":2}]}`},
	}
	for _, c := range cases {
		data := []byte(c.in)
		arr := bytes.IndexByte(data, '[')
		if strings.HasPrefix(c.in, "{") {
			arr = strings.Index(c.in, ":[") + 1
		}
		var spans []Span
		EachElement(data, arr, func(_ int, s Span) bool { spans = append(spans, s); return true })
		if got := string(RemoveElements(data, spans, c.drop)); got != c.want {
			t.Errorf("removeElements(%s, %v) = %s, want %s", c.in, c.drop, got, c.want)
		}
	}
}

// Edits change the edited value only: every other byte of a real line
// stays, whatever its escapes and key order.
func TestEditsKeepOtherBytes(t *testing.T) {
	n := 0
	for _, fl := range fixtureLines(t) {
		if kind, _ := ClassifyLine(fl.line); kind != "" {
			continue // the torn line
		}
		m, ok := LastMember(fl.line, 0, "parentUuid")
		if !ok {
			continue
		}
		out := setParent(fl.line, "new-parent")
		if !bytes.Equal(out[:m.Val.Start], fl.line[:m.Val.Start]) || !bytes.Equal(out[len(out)-(len(fl.line)-m.Val.End):], fl.line[m.Val.End:]) {
			t.Fatalf("%s: setParent changed more than the value", fl.file)
		}
		if got, _ := TopLevelString(out, "parentUuid"); got != "new-parent" {
			t.Fatalf("%s: parentUuid is %q after setParent", fl.file, got)
		}
		r := readRecord(fl.line)
		if len(r.results) > 0 {
			out := removeContent(fl.line, []int{int(r.results[0].elem)})
			var before, after map[string]any
			if json.Unmarshal(fl.line, &before) != nil || json.Unmarshal(out, &after) != nil {
				t.Fatalf("%s: removeContent made invalid JSON", fl.file)
			}
			bc := before["message"].(map[string]any)["content"].([]any)
			ac := after["message"].(map[string]any)["content"].([]any)
			if len(ac) != len(bc)-1 {
				t.Fatalf("%s: content has %d elements after removing one of %d", fl.file, len(ac), len(bc))
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
	if _, err := Normalize(fx.out, 0); err != nil {
		t.Fatal(err)
	}
}
