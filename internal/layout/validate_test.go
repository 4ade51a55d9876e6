package layout

import (
	"errors"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// validatorCase is one input and, for a bad one, a fragment the message must
// contain so the user learns what is wrong.
type validatorCase struct {
	in      string
	wantErr string // "" = must be accepted
}

func runValidatorCases(t *testing.T, name string, validate func(string) error, cases []validatorCase) {
	t.Helper()
	for _, c := range cases {
		err := validate(c.in)
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%s(%q) = %v, want nil", name, c.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s(%q) = nil, want an error about %q", name, c.in, c.wantErr)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s(%q) = %v, not of kind ErrInvalidArgument", name, c.in, err)
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s(%q) = %q, want it to mention %q", name, c.in, err, c.wantErr)
		}
	}
}

func count(cases []validatorCase) (good, bad int) {
	for _, c := range cases {
		if c.wantErr == "" {
			good++
		} else {
			bad++
		}
	}
	return good, bad
}

var subpathCases = []validatorCase{
	// Accepted.
	{in: "subagents/agent-abc"},
	{in: "subagents/agent-a0123456789abcdef"},
	{in: "subagents/workflows/run-1/agent-abc"},
	{in: "a"},
	{in: "journal"},
	{in: "agent-x.meta"},           // sidecars are .meta.json, no clash
	{in: "a.wal"},                  // last name: a.wal.jsonl / a.wal.wal
	{in: "a.jsonl.bak"},            // does not end in .jsonl
	{in: ".hidden/x"},              // hidden, but neither "." nor ".."
	{in: "..."},                    // a legal name
	{in: "x/..a/b.."},              // dots inside names are fine
	{in: "1:b"},                    // not a drive letter
	{in: "ab:c"},                   // colon after the first two bytes
	{in: "日本/語 space"},             // UTF-8 and spaces
	{in: "emoji-\U0001F389"},       // astral
	{in: strings.Repeat("x", 249)}, // 249 + ".jsonl" = 255
	{in: strings.Repeat("d", 255) + "/a"},
	{in: strings.Repeat("abcd/", 204) + "abcd"}, // 1024 bytes exactly

	// Refused.
	{in: "", wantErr: "subpath is empty"},
	{in: "/abs", wantErr: "absolute path"},
	{in: "/", wantErr: "absolute path"},
	{in: "/etc/passwd", wantErr: "absolute path"},
	{in: `\\server\share\x`, wantErr: "starts with a backslash"},
	{in: `\x`, wantErr: "starts with a backslash"},
	{in: "C:foo", wantErr: `drive prefix "C:"`},
	{in: "C:", wantErr: `drive prefix "C:"`},
	{in: `c:\x`, wantErr: `drive prefix "c:"`},
	{in: "z:/x", wantErr: `drive prefix "z:"`},
	{in: `a\b`, wantErr: "contains a backslash"},
	{in: `subagents\..\..\x`, wantErr: "contains a backslash"},
	{in: "a//b", wantErr: "empty component"},
	{in: "a/", wantErr: "ends with '/'"},
	{in: ".", wantErr: `"." component`},
	{in: "..", wantErr: `".." component`},
	{in: "./a", wantErr: `"." component`},
	{in: "a/./b", wantErr: `"." component`},
	{in: "a/../b", wantErr: `".." component`},
	{in: "a/..", wantErr: `".." component`},
	{in: "../../etc/passwd", wantErr: `".." component`},
	{in: "a\x00b", wantErr: "control character U+0000"},
	{in: "a\nb", wantErr: "control character U+000A"},
	{in: "a\x7f", wantErr: "control character U+007F"},
	{in: "a\u0085b", wantErr: "control character U+0085"},
	{in: "\xff", wantErr: "not valid UTF-8"},
	{in: "agent.jsonl", wantErr: `ends in ".jsonl"`},
	{in: "subagents/agent-x.jsonl", wantErr: `ends in ".jsonl"`},
	{in: "a.jsonl/b", wantErr: `collide with the file of subpath "a"`},
	{in: "x/a.wal/b", wantErr: `collide with the file of subpath "x/a"`},
	{in: "a.acked/b", wantErr: `folder "a.acked" ending in ".acked"`},
	{in: "subagents/agent-x.meta.json/b", wantErr: `ending in ".json", which would collide`},
	{in: "sessiond-store.json/x", wantErr: `ending in ".json", which would collide`},
	{in: strings.Repeat("x", 250), wantErr: "at most 249 bytes"},
	{in: strings.Repeat("d", 256) + "/a", wantErr: "component of 256 bytes"},
	{in: strings.Repeat("abcd/", 204) + "abcde", wantErr: "1025 bytes long"},
}

func TestValidateSubpath(t *testing.T) {
	if good, bad := count(subpathCases); good < 5 || bad < 15 {
		t.Fatalf("table has %d good and %d bad cases; want at least 5 and 15", good, bad)
	}
	runValidatorCases(t, "ValidateSubpath", ValidateSubpath, subpathCases)
}

var sessionIDCases = []validatorCase{
	{in: "01234567-89ab-cdef-0123-456789abcdef"},
	{in: "01234567-89AB-CDEF-0123-456789ABCDEF"}, // the SDK's regexp has the i flag
	{in: "01234567-89aB-CdEf-0123-456789abcdef"},
	{in: "00000000-0000-0000-0000-000000000000"},
	{in: "018f4b2e-7c1a-7d3e-9f00-123456789abc"}, // v7: any version is accepted
	// The ids of the SDKs' conformance kits.
	{in: "sess"},
	{in: "s1"},
	{in: "main"},
	{in: "s"},
	{in: "a"},
	{in: "summ-sess"},
	{in: "never-appended"},
	{in: "0123456789abcdef0123456789abcdef"}, // 32 hex digits: a name like any other
	{in: "not-a-uuid"},
	{in: "a.b_c-d"},
	{in: "x.."},
	{in: "9"},
	{in: "agent-x.meta"},
	{in: "x.jsonl.bak"},
	{in: strings.Repeat("a", 128)},

	{in: "", wantErr: "session id is empty"},
	// Traversal and separators.
	{in: ".", wantErr: "starts with '.'"},
	{in: "..", wantErr: "starts with '.'"},
	{in: ".hidden", wantErr: "starts with '.'"},
	{in: "../../../../../../../../etc/passwd..", wantErr: "starts with '.'"},
	{in: "a/b", wantErr: "'/' at position 2"},
	{in: "a/../../x", wantErr: "'/' at position 2"},
	{in: "/etc/passwd", wantErr: "starts with '/'"},
	{in: `a\b`, wantErr: `'\\' at position 2`},
	{in: "c:x", wantErr: "':' at position 2"},
	// Control bytes, NUL, non-ASCII, whitespace.
	{in: "a\x00b", wantErr: "the byte 0x00 at position 2"},
	{in: "sess\n", wantErr: "the byte 0x0a at position 5"},
	{in: "caf\u00e9", wantErr: "the byte 0xc3 at position 4"},
	{in: "\xff", wantErr: "starts with the byte 0xff"},
	{in: " sess", wantErr: "starts with ' '"},
	{in: "se ss", wantErr: "' ' at position 3"},
	// Case: only a UUID may have upper case, where it names one session.
	{in: "Sess", wantErr: "starts with 'S'"},
	{in: "sEss", wantErr: "'E' at position 2, upper case, accepted only in a UUID"},
	{in: "{01234567-89ab-cdef-0123-456789abcdef}", wantErr: "starts with '{'"},
	{in: "urn:uuid:01234567-89ab-cdef-0123-456789abcdef", wantErr: "':' at position 4"},
	{in: "01234567-89ab-cdef-0123-456789ABCDEF0", wantErr: "'A' at position 31, upper case"},
	// Flags and sessiond's own files.
	{in: "-rf", wantErr: "starts with '-'"},
	{in: "_x", wantErr: "starts with '_'"},
	{in: "x.jsonl", wantErr: `ends in ".jsonl"`},
	{in: "x.wal", wantErr: `ends in ".wal"`},
	{in: "x.acked", wantErr: `ends in ".acked"`},
	{in: "x.missing.json", wantErr: `ends in ".json"`},
	{in: "sessiond-store.json", wantErr: `ends in ".json"`},
	// Overlong.
	{in: strings.Repeat("a", 129), wantErr: "129 bytes long, over 128"},
	{in: strings.Repeat("a", 10000), wantErr: "10000 bytes long"},
}

func TestValidateSessionID(t *testing.T) {
	if good, bad := count(sessionIDCases); good < 10 || bad < 20 {
		t.Fatalf("table has %d good and %d bad cases; want at least 10 and 20", good, bad)
	}
	runValidatorCases(t, "ValidateSessionID", ValidateSessionID, sessionIDCases)
}

func TestValidateSessionIDMessageIsShort(t *testing.T) {
	err := ValidateSessionID(strings.Repeat("a", 1<<20))
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("message for a 1 MiB id is %d bytes; the input must be cut", len(err.Error()))
	}
}

var projectKeyCases = []validatorCase{
	{in: "-home-me-project"},
	{in: "-"},
	{in: "C--Users-me-project"},
	{in: "myproject"},
	{in: "proj_1.2 with space"},
	{in: "日本語"},
	{in: "a..b"},
	{in: strings.Repeat("-", 200) + "-zik0zk"}, // the longest derived key
	{in: strings.Repeat("k", 255)},

	{in: "", wantErr: "project key is empty"},
	{in: ".", wantErr: "refers to a folder relative"},
	{in: "..", wantErr: "refers to a folder relative"},
	{in: ".hidden", wantErr: "starts with '.'"},
	{in: "a/b", wantErr: `path separator '/'`},
	{in: "/abs", wantErr: `path separator '/'`},
	{in: "../x", wantErr: "starts with '.'"},
	{in: "-x/../../etc", wantErr: `path separator '/'`},
	{in: `a\b`, wantErr: `path separator '\\'`},
	{in: "a\x00b", wantErr: "control character U+0000"},
	{in: "a\nb", wantErr: "control character U+000A"},
	{in: "a\u009bb", wantErr: "control character U+009B"},
	{in: "\xff\xfe", wantErr: "not valid UTF-8"},
	{in: strings.Repeat("k", 256), wantErr: "256 bytes long; at most 255"},
	{in: " ", wantErr: "is only whitespace"},
	{in: "   ", wantErr: "is only whitespace"},
	{in: "\u00a0\u3000", wantErr: "is only whitespace"},
	{in: " -home-me-p", wantErr: "begins or ends with whitespace"},
	{in: "-home-me-p ", wantErr: "begins or ends with whitespace"},
}

func TestValidateProjectKey(t *testing.T) {
	if good, bad := count(projectKeyCases); good < 3 || bad < 8 {
		t.Fatalf("table has %d good and %d bad cases; want at least 3 and 8", good, bad)
	}
	runValidatorCases(t, "ValidateProjectKey", ValidateProjectKey, projectKeyCases)
}

func TestKeyValidate(t *testing.T) {
	const sid = "01234567-89ab-cdef-0123-456789abcdef"
	cases := []struct {
		key     Key
		wantErr string
	}{
		{key: Key{ProjectKey: "-p", SessionID: sid}},
		{key: Key{ProjectKey: "-p", SessionID: sid, Subpath: "subagents/agent-a"}},
		{key: Key{ProjectKey: "", SessionID: sid}, wantErr: "project key is empty"},
		{key: Key{ProjectKey: "..", SessionID: sid}, wantErr: "project key"},
		{key: Key{ProjectKey: "-p", SessionID: "x"}},
		{key: Key{ProjectKey: "proj", SessionID: "sess", Subpath: "subagents/agent-1"}},
		{key: Key{ProjectKey: "-p", SessionID: "X"}, wantErr: "session id"},
		{key: Key{ProjectKey: "-p", SessionID: "x.jsonl"}, wantErr: "session id"},
		{key: Key{ProjectKey: "-p", SessionID: sid, Subpath: "../x"}, wantErr: "subpath"},
		{key: Key{ProjectKey: "-p", SessionID: sid, Subpath: "/x"}, wantErr: "absolute"},
	}
	for _, c := range cases {
		err := c.key.Validate()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%v.Validate() = %v, want nil", c.key, err)
		case c.wantErr != "" && (err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%v.Validate() = %v, want an ErrInvalidArgument mentioning %q", c.key, err, c.wantErr)
		}
	}
}

func TestKeyString(t *testing.T) {
	const sid = "01234567-89ab-cdef-0123-456789abcdef"
	if got := (Key{ProjectKey: "-p", SessionID: sid}).String(); got != "-p/"+sid {
		t.Errorf("main key String() = %q", got)
	}
	if got := (Key{ProjectKey: "-p", SessionID: sid, Subpath: "subagents/agent-a"}).String(); got != "-p/"+sid+"/subagents/agent-a" {
		t.Errorf("subpath key String() = %q", got)
	}
}

// TestSessionIDForms: a session is stored under its lower-case id and
// looked for under that first, then under the id as given.
func TestSessionIDForms(t *testing.T) {
	const lower = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	if got := SessionIDForms(lower); len(got) != 1 || got[0] != lower {
		t.Errorf("SessionIDForms(%s) = %v, want only itself", lower, got)
	}
	mixed := "0A1b2C3d-4E5F-4a6B-8c7D-9E0F1A2B3C4D"
	if got := SessionIDForms(mixed); len(got) != 2 || got[0] != lower || got[1] != mixed {
		t.Errorf("SessionIDForms(%s) = %v, want [%s %s]", mixed, got, lower, mixed)
	}
}
