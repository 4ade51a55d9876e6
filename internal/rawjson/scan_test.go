package rawjson

import (
	"testing"

	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

func TestTopLevelString(t *testing.T) {
	cases := []struct {
		name, line, key string
		want            string
		ok              bool
	}{
		{"simple", `{"type":"user","uuid":"u1"}`, "type", "user", true},
		{"whitespace", " { \"type\" :\t\"a\" } \r\n", "type", "a", true},
		{"nested same key before", `{"message":{"type":"inner","content":[{"type":"tool_use"}]},"type":"outer"}`, "type", "outer", true},
		{"only nested", `{"message":{"type":"inner"},"x":[{"type":"arr"}]}`, "type", "", false},
		{"key inside a string", `{"text":"{\"type\":\"fake\"}"}`, "type", "", false},
		{"key text as a value", `{"a":"type","b":"x"}`, "type", "", false},
		{"prefix is not the key", `{"types":"x","typ":"y"}`, "type", "", false},
		{"escapes decoded", `{"type":"a\nb\u00e9\ud83d\ude00\"\\\/"}`, "type", "a\nbé😀\"\\/", true},
		{"escaped key", `{"\u0074ype":"x"}`, "type", "x", true},
		{"non-ASCII key", `{"clé":"v","cl\u00e9":"w"}`, "clé", "w", true},
		{"empty key", `{"":"v"}`, "", "v", true},
		{"number", `{"type":1}`, "type", "", false},
		{"null", `{"type":null}`, "type", "", false},
		{"object", `{"type":{"a":"b"}}`, "type", "", false},
		{"duplicate: last wins", `{"type":"a","x":1,"type":"b"}`, "type", "b", true},
		{"duplicate: last is not a string", `{"type":"a","type":[]}`, "type", "", false},
		{"array", `["type","x"]`, "type", "", false},
		{"string", `"type"`, "type", "", false},
		{"empty", ``, "type", "", false},
		{"torn", `{"type":"user","message":{"content":"abc`, "type", "", false},
		{"torn after the key's value", `{"type":"user",`, "type", "", false},
		{"two objects", `{"type":"a"}{"type":"b"}`, "type", "", false},
		{"garbage after", `{"type":"a"} x`, "type", "", false},
		{"NUL in another string", "{\"type\":\"a\",\"b\":\"\x00\"}", "type", "", false},
		{"NUL block after", "{\"type\":\"a\"}\x00\x00", "type", "", false},
		{"invalid UTF-8 becomes U+FFFD", "{\"type\":\"a\xffb\"}", "type", "a\uFFFDb", true},
		{"lone surrogate becomes U+FFFD", `{"type":"\ud800x\udc00"}`, "type", "\uFFFDx\uFFFD", true},
		{"huge nested value skipped", `{"message":{"content":[` + `{"a":[1,2,{"b":"c"}]},` + `null]},"type":"assistant"}`, "type", "assistant", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := TopLevelString([]byte(c.line), c.key)
			if got != c.want || ok != c.ok {
				t.Errorf("TopLevelString(%q, %q) = %q, %v; want %q, %v", c.line, c.key, got, ok, c.want, c.ok)
			}
			want, wantOK := transcripttest.OracleTopLevelString([]byte(c.line), c.key)
			if got != want || ok != wantOK {
				t.Errorf("encoding/json says %q, %v", want, wantOK)
			}
		})
	}
}

func TestTopLevelStringAllocs(t *testing.T) {
	line := []byte(`{"parentUuid":null,"message":{"content":[{"type":"text","text":"hello"}]},"type":"assistant","uuid":"u"}`)
	n := testing.AllocsPerRun(100, func() {
		if v, ok := TopLevelString(line, "type"); !ok || v != "assistant" {
			t.Fatal(v, ok)
		}
	})
	if n > 1 {
		t.Errorf("TopLevelString allocates %v times; want at most 1 (the result)", n)
	}
}

func FuzzTopLevelString(f *testing.F) {
	for i, l := range transcripttest.FixtureLines(f) {
		if len(l.Line) <= 4<<10 {
			f.Add(l.Line, []string{"type", "uuid", "parentUuid", "message"}[i%4])
		}
	}
	for _, s := range []string{`{"type":"a"}`, `{"a":{"type":"b"},"type":"c"}`, `{"\u0074ype":"x\ud800"}`, "{\"type\":\"\xff\"}", `{"type":"a","type":1}`} {
		f.Add([]byte(s), "type")
	}
	f.Fuzz(func(t *testing.T, line []byte, key string) {
		got, ok := TopLevelString(line, key)
		want, wantOK := transcripttest.OracleTopLevelString(line, key)
		if got != want || ok != wantOK {
			t.Fatalf("TopLevelString(%q, %q) = %q, %v; encoding/json says %q, %v", line, key, got, ok, want, wantOK)
		}
	})
}
