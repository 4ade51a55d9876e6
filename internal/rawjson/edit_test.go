package rawjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
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
		e := transcripttest.GenEntry(r)
		if len(e) > 0 && i%2 == 0 {
			e = transcripttest.Mutate(r, e)
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
			t.Fatalf("parseValue says %v, encoding/json %v, for %s", ok, want, transcripttest.Shorten(data))
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
