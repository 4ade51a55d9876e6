package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

func TestNormalize(t *testing.T) {
	const limit = 1 << 20
	nested := func(depth int) string {
		return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
	}
	// bigString is an entry of exactly n bytes.
	bigString := func(n int) string { return `{"s":"` + strings.Repeat("x", n-8) + `"}` }

	type tc struct {
		name   string
		in     string
		max    int    // 0: limit
		want   string // expected Line when accepted
		uuid   string
		kind   error    // expected error kind; nil: accepted
		msg    []string // substrings of the error message
		asJSON bool     // also assert encoding/json's verdict agrees
	}
	ok := func(name, in, want, uuid string) tc { return tc{name: name, in: in, want: want, uuid: uuid} }
	bad := func(name, in string, msg ...string) tc {
		return tc{name: name, in: in, kind: errdefs.ErrInvalidArgument, msg: msg}
	}
	cases := []tc{
		// Accepted, bytes kept.
		ok("empty object", `{}`, `{}`, ""),
		ok("surrounding whitespace", " \t{ }\r\n ", `{}`, ""),
		ok("final newline", "{\"a\":1}\n", `{"a":1}`, ""),
		ok("final CRLF", "{\"a\":1}\r\n", `{"a":1}`, ""),
		ok("pretty printed", "{\n  \"type\": \"user\",\n  \"message\": {\n    \"content\": [ 1 , 2.5e-3,\ttrue, false, null, { }, [ ] ]\n  }\n}",
			`{"type":"user","message":{"content":[1,2.5e-3,true,false,null,{},[]]}}`, ""),
		ok("key order kept", `{"z":1,"a":2,"m":3,"a":4}`, `{"z":1,"a":2,"m":3,"a":4}`, ""),
		ok("raw unicode", `{"text":"héllo 日本語 😀"}`, `{"text":"héllo 日本語 😀"}`, ""),
		ok("escapes kept as written", `{"s":"a\"b\\c\/d\b\f\n\r\t\u00e9\u00E9\uD83D\uDE00\ud83d\ude00"}`,
			`{"s":"a\"b\\c\/d\b\f\n\r\t\u00e9\u00E9\uD83D\uDE00\ud83d\ude00"}`, ""),
		ok("html characters and U+2028 stay raw", "{\"h\":\"<b>&amp;</b>\u2028\u2029\"}", "{\"h\":\"<b>&amp;</b>\u2028\u2029\"}", ""),
		ok("whitespace inside strings kept", `{ "s" : "  a   b  " , " k " : 1 }`, `{"s":"  a   b  "," k ":1}`, ""),
		ok("numbers", `{"n":[0,-0,1.5,-1e10,2E+3,1e-7,123456789012345678901234567890]}`, `{"n":[0,-0,1.5,-1e10,2E+3,1e-7,123456789012345678901234567890]}`, ""),
		ok("uuid", `{"type":"user","uuid":"4b1c2d3e-0000-4000-8000-000000000001"}`, `{"type":"user","uuid":"4b1c2d3e-0000-4000-8000-000000000001"}`, "4b1c2d3e-0000-4000-8000-000000000001"),
		ok("uuid null", `{"uuid":null,"parentUuid":"p"}`, `{"uuid":null,"parentUuid":"p"}`, ""),
		ok("uuid with escapes decoded", `{"uuid":"ab\u0063\n"}`, `{"uuid":"ab\u0063\n"}`, "abc\n"),
		ok("nested uuid ignored", `{"message":{"uuid":"inner"},"x":[{"uuid":"arr"}],"y":{"uuid":5}}`, `{"message":{"uuid":"inner"},"x":[{"uuid":"arr"}],"y":{"uuid":5}}`, ""),
		ok("uuid inside a string ignored", `{"text":"{\"uuid\":\"fake\"}","uuid":"real"}`, `{"text":"{\"uuid\":\"fake\"}","uuid":"real"}`, "real"),
		ok("escaped key is uuid", `{"\u0075uid":"q"}`, `{"\u0075uid":"q"}`, "q"),
		ok("UUID is another key", `{"UUID":"x","Uuid":"y"}`, `{"UUID":"x","Uuid":"y"}`, ""),
		ok("duplicate uuid: last wins as in JSON.parse", `{"uuid":"a","x":0,"uuid":"b"}`, `{"uuid":"a","x":0,"uuid":"b"}`, "b"),
		ok("escaped backslash then ud800 is text", `{"s":"\\ud800","t":"\\\\\\uD83D\\uDE00"}`, `{"s":"\\ud800","t":"\\\\\\uD83D\\uDE00"}`, ""),
		ok("escaped NUL", `{"s":"\u0000"}`, `{"s":"\u0000"}`, ""),
		ok("U+FFFD and noncharacters", "{\"s\":\"\uFFFD\uFFFF\U0010FFFF\"}", "{\"s\":\"\uFFFD\uFFFF\U0010FFFF\"}", ""),
		{name: "nesting at the limit", in: nested(rawjson.MaxDepth), want: nested(rawjson.MaxDepth), asJSON: true},
		{name: "entry exactly at the size limit", in: bigString(limit), want: bigString(limit)},

		// Refused.
		{name: "over the size limit", in: strings.Repeat("\x00", 40<<20), max: 32 << 20, kind: errdefs.ErrTooLarge,
			msg: []string{"entry is 40.0 MiB, over the 32.0 MiB limit (sessiond --max-entry-bytes)"}},
		{name: "one byte over the size limit", in: bigString(limit + 1), kind: errdefs.ErrTooLarge,
			msg: []string{"entry is 1048577 bytes, over the 1048576-byte limit"}},
		bad("empty", "", "entry is empty", "one JSON object"),
		bad("only whitespace", " \r\n\t", "only whitespace", "one JSON object"),
		bad("byte order mark", "\xEF\xBB\xBF{}", "byte order mark", "offset 0", "remove it"),
		bad("NUL in a string", "{\"a\":\"b\x00\"}", "NUL byte", "byte offset 7", `\u0000`),
		bad("NUL block after the object", "{\"a\":1}\x00\x00\x00", "NUL byte", "byte offset 7"),
		bad("NUL block before the object", "\x00\x00{}", "NUL byte", "byte offset 0"),
		bad("NUL between tokens", "{\"a\":\x001}", "NUL byte", "byte offset 5"),
		bad("invalid UTF-8 in a string", "{\"a\":\"ok\xff\"}", "invalid UTF-8", "byte offset 8", "0xff"),
		bad("truncated UTF-8 sequence", "{\"a\":\"\xe6\x97\"}", "invalid UTF-8", "byte offset 6"),
		bad("UTF-8 encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8", "byte offset 6"),
		bad("overlong UTF-8", "{\"a\":\"\xc0\xaf\"}", "invalid UTF-8", "byte offset 6"),
		bad("invalid UTF-8 in a key", "{\"\x80\":1}", "invalid UTF-8", "byte offset 2"),
		bad("invalid UTF-8 outside strings", "{\"a\":1,\xfe}", "invalid UTF-8", "byte offset 7"),
		bad("missing value", `{"a":}`, "not valid JSON", "byte offset 5", "expected a value", "found '}'"),
		bad("torn line", `{"type":"user","message":{"content":"abc`, "not valid JSON", "string starting at byte offset 36", "cut short"),
		bad("torn after a value", `{"type":"user",`, "not valid JSON", "ends at byte offset 15", "cut short"),
		bad("missing colon", `{"a" 1}`, "byte offset 5", "expected ':'"),
		bad("trailing comma", `{"a":1,}`, "byte offset 7", "trailing comma"),
		bad("single quotes", `{'a':1}`, "byte offset 1", `found "'"`),
		bad("unquoted key", `{a:1}`, "byte offset 1", "found 'a'"),
		bad("missing comma", `{"a":1 "b":2}`, "byte offset 7", "expected ',' or '}'"),
		bad("unclosed array", `{"a":[1 2]}`, "byte offset 8", "expected ',' or ']'"),
		bad("raw newline in a string", "{\"a\":\"x\ny\"}", "control character 0x0a", "byte offset 7", `\n`),
		bad("raw control byte in a string", "{\"a\":\"\x1b[0m\"}", "control character 0x1b", `\u001b`),
		bad("invalid escape", `{"a":"\x"}`, "invalid escape", "byte offset 6"),
		bad("short unicode escape", `{"a":"\u12G4"}`, `\u followed by 4 hex digits`, "byte offset 6"),
		bad("leading zero", `{"n":01}`, "byte offset 6", "leading zeros"),
		bad("bad literal", `{"a":tru}`, "byte offset 8", "literal true"),
		bad("bare number fraction", `{"a":1.}`, "byte offset 7", "digit after the decimal point"),
		bad("array", `[1,2]`, "JSON array, not an object"),
		bad("string", ` "str" `, "JSON string, not an object"),
		bad("number", `42`, "JSON number, not an object"),
		bad("null", "null\n", "JSON null, not an object"),
		bad("boolean", `true`, "JSON boolean, not an object"),
		bad("invalid non-object is reported as invalid JSON", `[1,2`, "not valid JSON", "cut short"),
		// Lone surrogate escapes are valid JSON text (the CLI writes them):
		// stored as sent.
		ok("lone high surrogate", `{"a":"x\ud800y"}`, `{"a":"x\ud800y"}`, ""),
		ok("lone low surrogate", `{"a":"\uDC00"}`, `{"a":"\uDC00"}`, ""),
		ok("high surrogate then a pair", `{"a":"\ud800\ud800\udc00"}`, `{"a":"\ud800\ud800\udc00"}`, ""),
		ok("reversed pair", `{"a":"\udc00\ud800"}`, `{"a":"\udc00\ud800"}`, ""),
		ok("high surrogate at the end of a string, as JSON.stringify writes a cut emoji", `{"a":"x\uD83D"}`, `{"a":"x\uD83D"}`, ""),
		ok("lone surrogate in a key", `{"\udfff":1}`, `{"\udfff":1}`, ""),
		ok("lone surrogate in the uuid", `{"uuid":"a\ud800"}`, `{"uuid":"a\ud800"}`, "a\ufffd"),
		bad("uuid number", `{"uuid":123}`, `top-level "uuid"`, "byte offset 8", "JSON number", "must be a string (or null"),
		bad("uuid object", `{"type":"user","uuid":{"v":"x"}}`, `top-level "uuid"`, "byte offset 22", "JSON object"),
		bad("uuid array", `{"uuid":["x"]}`, "JSON array"),
		bad("uuid boolean", `{"uuid":false}`, "JSON boolean"),
		bad("any uuid that is not a string counts", `{"uuid":1,"uuid":"x"}`, `top-level "uuid"`, "byte offset 8"),
		bad("escaped uuid key checked too", `{"\u0075uid":1}`, `top-level "uuid"`),
		bad("two objects on one line", `{"a":1}{"b":2}`, "more data after its JSON value", "bytes 0-6", "found '{' at byte offset 7", "one JSON object per entry"),
		bad("two objects on two lines", "{\"a\":1}\n{\"b\":2}\n", "more data", "byte offset 8"),
		bad("garbage after the object", `{} x`, "more data", "found 'x' at byte offset 3"),
		bad("invalid UTF-8 after the object", "{}\xff", "invalid UTF-8", "byte offset 2"),
		{name: "nesting over the limit", in: nested(rawjson.MaxDepth + 1), kind: errdefs.ErrInvalidArgument,
			msg: []string{"more than 10000 levels deep", "byte offset 10004"}, asJSON: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			max := c.max
			if max == 0 {
				max = limit
			}
			raw := []byte(c.in)
			e, err := Normalize(raw, max)
			if c.kind == nil {
				if err != nil {
					t.Fatalf("Normalize(%s) failed: %v", transcripttest.Shorten(raw), err)
				}
				if string(e.Line) != c.want || e.UUID != c.uuid {
					t.Fatalf("Normalize(%s) = %s, uuid %q; want %s, uuid %q", transcripttest.Shorten(raw), transcripttest.Shorten(e.Line), e.UUID, transcripttest.Shorten([]byte(c.want)), c.uuid)
				}
			} else {
				if err == nil {
					t.Fatalf("Normalize(%s) = %s, want an error", transcripttest.Shorten(raw), transcripttest.Shorten(e.Line))
				}
				if !errors.Is(err, c.kind) {
					t.Errorf("error %q does not wrap %v", err, c.kind)
				}
				for _, m := range c.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not say %q", err, m)
					}
				}
				if e.Line != nil || e.UUID != "" {
					t.Errorf("rejected entry came with a result: %+v", e)
				}
			}
			if c.asJSON && json.Valid(raw) != (c.kind == nil) {
				t.Errorf("encoding/json disagrees: json.Valid = %v", json.Valid(raw))
			}
			if c.kind != errdefs.ErrTooLarge {
				// Besides the specific expectations, agree with
				// encoding/json and the independent checks.
				want, uuid, ok := transcripttest.Oracle(raw)
				if ok != (err == nil) || ok && (!bytes.Equal(want, e.Line) || uuid != e.UUID) {
					t.Errorf("oracle says ok=%v %s uuid %q", ok, transcripttest.Shorten(want), uuid)
				}
			}
		})
	}
}

// TestNormalizeCopiesOnlyToCompact checks that an entry already compact
// comes back as the input's own bytes (no copy per append), with no room
// for an append to write into the input, and that one with whitespace comes
// back as a new slice that the input's later changes do not reach.
func TestNormalizeCopiesOnlyToCompact(t *testing.T) {
	raw := []byte(` {"a":"b"}` + "\n")
	e, err := Normalize(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Line) != `{"a":"b"}` || &e.Line[0] != &raw[1] {
		t.Fatalf("compact entry %q: not raw's own bytes", e.Line)
	}
	if cap(e.Line) != len(e.Line) {
		t.Fatalf("compact entry has capacity %d past its %d bytes: an append would write into raw", cap(e.Line), len(e.Line))
	}
	raw = []byte(` { "a" : "b" } `)
	if e, err = Normalize(raw, 0); err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 'X'
	}
	if string(e.Line) != `{"a":"b"}` {
		t.Fatalf("Line changed with the input: %q", e.Line)
	}
}

// TestNormalizeFixtures runs every line of the real transcripts through
// Normalize: lines written by Claude Code are compact already, so each must
// come back byte for byte, with the uuid encoding/json finds. The torn last
// line of the TRUNCATED fixture must be refused as cut short.
func TestNormalizeFixtures(t *testing.T) {
	lines := transcripttest.FixtureLines(t)
	torn, files := 0, map[string]int{}
	for _, l := range lines {
		files[l.File]++
		e, err := Normalize(l.Line, 32<<20)
		where := fmt.Sprintf("%s at offset %d", l.File, l.Off)
		if !l.Newline {
			torn++
			if !strings.Contains(l.File, "TRUNCATED") {
				t.Errorf("%s: unexpected line without newline", where)
			}
			if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "cut short") {
				t.Errorf("%s: torn line: got error %v, want an invalid-argument error saying it was cut short", where, err)
			}
			if _, ok := rawjson.TopLevelString(l.Line, "type"); ok {
				t.Errorf("%s: TopLevelString found a type in a torn line", where)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if !bytes.Equal(e.Line, l.Line) {
			t.Errorf("%s: Normalize changed the line:\n got %s\nwant %s", where, transcripttest.Shorten(e.Line), transcripttest.Shorten(l.Line))
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(l.Line, &m); err != nil {
			t.Fatalf("%s: encoding/json: %v", where, err)
		}
		var wantUUID string
		if v, ok := m["uuid"]; ok {
			_ = json.Unmarshal(v, &wantUUID)
		}
		if e.UUID != wantUUID {
			t.Errorf("%s: uuid %q, encoding/json says %q", where, e.UUID, wantUUID)
		}
		for _, key := range []string{"type", "uuid", "parentUuid", "sessionId", "timestamp", "cwd", "content"} {
			got, gotOK := rawjson.TopLevelString(l.Line, key)
			var want string
			wantOK := m[key] != nil && m[key][0] == '"' && json.Unmarshal(m[key], &want) == nil
			if got != want || gotOK != wantOK {
				t.Errorf("%s: TopLevelString(%q) = %q, %v; encoding/json: %q, %v", where, key, got, gotOK, want, wantOK)
			}
		}
		// Pretty-printed, the same entry must come back to the same line.
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, l.Line, "", "  "); err != nil {
			t.Fatal(err)
		}
		if e2, err := Normalize(pretty.Bytes(), 0); err != nil || !bytes.Equal(e2.Line, l.Line) || e2.UUID != e.UUID {
			t.Errorf("%s: indented line did not normalize back (err %v)", where, err)
		}
	}
	if torn != 1 {
		t.Errorf("found %d torn lines in the fixtures, want exactly 1 (the TRUNCATED file's last)", torn)
	}
	for f, n := range files {
		if strings.Contains(f, "TRUNCATED") && n != 885 {
			t.Errorf("%s: %d lines, SOURCES.md says 885 (884 whole + 1 torn)", f, n)
		}
	}
	t.Logf("%d lines in %d files", len(lines), len(files))
}

// TestNormalizeMatchesEncodingJSON generates JSON-like entries, many of them
// subtly broken, and checks Normalize against the oracle: accepted exactly
// when encoding/json finds valid JSON that is an object with no NUL, no bad
// UTF-8, no lone surrogate and a string or null uuid; and then the output is
// json.Compact's.
func TestNormalizeMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	accepted := 0
	for i := 0; i < n; i++ {
		raw := transcripttest.GenEntry(r)
		e, err := Normalize(raw, 0)
		want, uuid, ok := transcripttest.Oracle(raw)
		if ok != (err == nil) {
			t.Fatalf("Normalize(%s): err %v, but encoding/json oracle says ok=%v", transcripttest.Shorten(raw), err, ok)
		}
		if !ok {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Normalize(%s): error %v is not an invalid argument", transcripttest.Shorten(raw), err)
			}
			if msg := err.Error(); !strings.Contains(msg, "byte offset") && !strings.Contains(msg, "not an object") &&
				!strings.Contains(msg, "empty") && !strings.Contains(msg, "only whitespace") {
				t.Fatalf("Normalize(%s): error %q does not say where", transcripttest.Shorten(raw), msg)
			}
			continue
		}
		accepted++
		if !bytes.Equal(e.Line, want) || e.UUID != uuid {
			t.Fatalf("Normalize(%s) = %s uuid %q; json.Compact gives %s, uuid %q", transcripttest.Shorten(raw), transcripttest.Shorten(e.Line), e.UUID, transcripttest.Shorten(want), uuid)
		}
	}
	t.Logf("%d of %d generated entries accepted", accepted, n)
	if accepted < n/4 || accepted > n*3/4 {
		t.Errorf("generator is lopsided: %d of %d accepted", accepted, n)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, l := range transcripttest.FixtureLines(f) {
		if len(l.Line) <= 4<<10 {
			f.Add(l.Line)
		}
	}
	for _, s := range []string{``, `{}`, ` {"uuid" : "x"} `, `{"a":"\ud800"}`, `{"a":"\\ud800"}`, "{\"a\":\"\x00\"}",
		`{"uuid":1}`, `{}{}`, `[{}]`, `{"a":[1,{"b":null}]}`, "\xEF\xBB\xBF{}", `{"\u0075uid":"\ud83d\ude00"}`} {
		f.Add([]byte(s))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		f.Add(transcripttest.GenEntry(r))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := Normalize(raw, 0)
		want, uuid, ok := transcripttest.Oracle(raw)
		if ok != (err == nil) {
			t.Fatalf("Normalize(%q): err %v, oracle ok=%v", raw, err, ok)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not an invalid argument", err)
			}
			return
		}
		if !bytes.Equal(e.Line, want) || e.UUID != uuid {
			t.Fatalf("Normalize(%q) = %q uuid %q; oracle %q uuid %q", raw, e.Line, e.UUID, want, uuid)
		}
		if !json.Valid(e.Line) || e.Line[0] != '{' {
			t.Fatalf("output %q is not a JSON object", e.Line)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, e.Line)
		if !bytes.Equal(compact.Bytes(), e.Line) {
			t.Fatalf("output %q is not compact", e.Line)
		}
		e2, err := Normalize(e.Line, len(e.Line))
		if err != nil || !bytes.Equal(e2.Line, e.Line) || e2.UUID != e.UUID {
			t.Fatalf("not idempotent: %q -> %q, %v", e.Line, e2.Line, err)
		}
		if got, ok := rawjson.TopLevelString(e.Line, "uuid"); got != e.UUID {
			t.Fatalf("TopLevelString(uuid) = %q, %v; Normalize found %q", got, ok, e.UUID)
		}
	})
}

// benchEntry is a user entry carrying a tool result of about size bytes,
// like the ones that dominate real transcripts.
func benchEntry(size int) []byte {
	head := `{"parentUuid":"2f0c1a9e-5b7d-4c3e-9a1f-0d8e6b4c2a10","isSidechain":false,"userType":"external","cwd":"/home/user/projects/spotter","sessionId":"8463c716-a2ea-4c14-9efa-87158ebd9f20","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01XyZ9AbCdEfGhIjKlMnOpQr","type":"tool_result","content":"`
	tail := `","is_error":false}]},"uuid":"7d9e2b41-3c5a-4f6e-8b1d-2a0c9e7f5b3d","timestamp":"2026-02-11T09:14:03.512Z","toolUseResult":{"stdout":"","stderr":"","interrupted":false}}`
	text := `   42→func (s *Server) Append(ctx context.Context, req *pb.AppendRequest) error {\n   43→\tif len(req.Entries) == 0 \u0026\u0026 x < y {\n   44→\t\treturn fmt.Errorf(\"no entries: %w\", errInvalid) // café — naïve\n`
	var b bytes.Buffer
	b.WriteString(head)
	for b.Len()+len(text)+len(tail) <= size {
		b.WriteString(text)
	}
	b.WriteString(strings.Repeat("x", max(0, size-b.Len()-len(tail))))
	b.WriteString(tail)
	return b.Bytes()
}

// BenchmarkNormalize compares Normalize with what it replaces: json.Valid,
// json.Compact and json.Unmarshal for the uuid, each a pass over the entry
// (and still without the NUL, UTF-8 and surrogate checks).
// The "fixtures" case runs over every whole line of the real transcripts.
func BenchmarkNormalize(b *testing.B) {
	var fixtures [][]byte
	for _, l := range transcripttest.FixtureLines(b) {
		if l.Newline {
			fixtures = append(fixtures, l.Line)
		}
	}
	for _, c := range []struct {
		name    string
		entries [][]byte
	}{
		{"1KiB", [][]byte{benchEntry(1 << 10)}},
		{"1MiB", [][]byte{benchEntry(1 << 20)}},
		{"fixtures", fixtures},
	} {
		total := 0
		for _, e := range c.entries {
			total += len(e)
		}
		b.Run(c.name+"/Normalize", func(b *testing.B) {
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				for _, e := range c.entries {
					if _, err := Normalize(e, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(c.name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				for _, e := range c.entries {
					baselineNormalize(b, e)
				}
			}
		})
	}
}

func baselineNormalize(b *testing.B, entry []byte) {
	if !json.Valid(entry) {
		b.Fatal("invalid")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, entry); err != nil {
		b.Fatal(err)
	}
	var v struct {
		UUID *string `json:"uuid"`
	}
	if err := json.Unmarshal(entry, &v); err != nil {
		b.Fatal(err)
	}
}

func TestAgentMetaSidecar(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"agent_metadata","agentType":"general-purpose","toolUseId":"toolu_1","description":"d é \ud83d"}`,
			`{"agentType":"general-purpose","toolUseId":"toolu_1","description":"d é \ud83d"}`},
		{`{"agentType":"x","type":"agent_metadata","finished":true}`, `{"agentType":"x","finished":true}`},
		{`{"type":"agent_metadata"}`, `{}`},
		{`{"type":"user","agentType":"x"}`, ""},
		{`{"type":"agent_metadata"`, ""},
		{`{"message":{"type":"agent_metadata"}}`, ""},
	} {
		got, ok := AgentMetaSidecar([]byte(c.in))
		if ok != (c.want != "") || string(got) != c.want {
			t.Errorf("AgentMetaSidecar(%s) = %s, %v; want %q", c.in, got, ok, c.want)
		}
	}
}

// TestCanonicalUUID: only the form that prints back as itself is kept in
// 16 bytes; every other id (upper case, braces, a urn, not a uuid at all)
// stays a string, so two spellings of one uuid never meet as one id.
func TestCanonicalUUID(t *testing.T) {
	const id = "0b7e7c3e-8a4b-4c1e-9f00-000000000001"
	if u, ok := CanonicalUUID(id); !ok || u.String() != id {
		t.Fatalf("CanonicalUUID(%q) = %v, %v", id, u, ok)
	}
	for _, other := range []string{
		"0B7E7C3E-8A4B-4C1E-9F00-000000000001",
		"{0b7e7c3e-8a4b-4c1e-9f00-000000000001}",
		"urn:uuid:0b7e7c3e-8a4b-4c1e-9f00-000000000001",
		"0b7e7c3e8a4b4c1e9f00000000000001",
		"0b7e7c3e-8a4b-4c1e-9f00-00000000000z",
		"",
		"msg_01",
	} {
		if _, ok := CanonicalUUID(other); ok {
			t.Errorf("CanonicalUUID(%q) took it as canonical", other)
		}
	}
}
