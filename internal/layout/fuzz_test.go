package layout

import (
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzValidateSubpath: whatever ValidateSubpath accepts names one file
// strictly inside the session folder, is already clean, and survives the
// path round trip.
func FuzzValidateSubpath(f *testing.F) {
	for _, c := range subpathCases {
		f.Add(c.in)
	}
	for _, s := range []string{"a/b/../../..", "..\\..", "a/./../b", "/..", "a/b/", "C:\\x", "\\\\?\\C:\\x", "x.jsonl/", "a/b.wal/c"} {
		f.Add(s)
	}
	l := testLayout
	sessionDir := filepath.Join(l.ProjectsDir(), "-p", testSID)
	f.Fuzz(func(t *testing.T, sub string) {
		if ValidateSubpath(sub) != nil {
			return
		}
		if filepath.Clean(sub) != sub || path.Clean(sub) != sub {
			t.Fatalf("accepted %q, which is not clean", sub)
		}
		p := filepath.Join(sessionDir, sub+".jsonl")
		if !strings.HasPrefix(p, sessionDir+string(filepath.Separator)) {
			t.Fatalf("accepted %q, which escapes: %q", sub, p)
		}
		if rel, err := filepath.Rel(sessionDir, p); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			t.Fatalf("accepted %q: relative path %q, %v", sub, rel, err)
		}
		k := Key{ProjectKey: "-p", SessionID: testSID, Subpath: sub}
		tp := l.TranscriptPath(k)
		if tp != p {
			t.Fatalf("TranscriptPath = %q, want %q", tp, p)
		}
		if got, ok := l.ParseTranscriptPath(tp); !ok || got != k {
			t.Fatalf("ParseTranscriptPath(%q) = %#v, %v", tp, got, ok)
		}
		if got, ok := l.ParseMissingPath(l.MissingPath(k)); !ok || got != k {
			t.Fatalf("ParseMissingPath(MissingPath(%#v)) = %#v, %v", k, got, ok)
		}
	})
}

// FuzzProjectKey: the key is made of [A-Za-z0-9-] only, at most 200+1+7
// bytes, deterministic, a valid project key, and of the length the SDK's
// algorithm gives.
func FuzzProjectKey(f *testing.F) {
	for _, s := range []string{"", "/", "/home/me/p", "/\U0001F389", strings.Repeat("a", 199), strings.Repeat("\U0001F389", 101), "/x\xffy", "/cafe\u0301"} {
		f.Add(s)
	}
	check := func(t *testing.T, in, key string) {
		t.Helper()
		for i := 0; i < len(key); i++ {
			c := key[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				t.Fatalf("key of %q has byte %q: %q", in, c, key)
			}
		}
		if len(key) > maxProjectKeyPrefix+1+7 {
			t.Fatalf("key of %q is %d bytes", in, len(key))
		}
		if key != "" {
			if err := ValidateProjectKey(key); err != nil {
				t.Fatalf("key of %q does not validate: %v", in, err)
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		key := projectKeyOf(s)
		check(t, s, key)
		if again := projectKeyOf(s); again != key {
			t.Fatalf("not deterministic: %q then %q", key, again)
		}
		if utf8.ValidString(s) {
			units := len(utf16.Encode([]rune(s)))
			switch {
			case units <= maxProjectKeyPrefix && len(key) != units:
				t.Fatalf("key of %q (%d code units) is %d bytes", s, units, len(key))
			case units > maxProjectKeyPrefix && (len(key) < maxProjectKeyPrefix+2 || key[maxProjectKeyPrefix] != '-'):
				t.Fatalf("long key of %q lacks its hash: %q", s, key)
			}
		}
		cwd := "/" + s
		k1, err := ProjectKeyFromCwd(cwd)
		if err != nil {
			return
		}
		check(t, cwd, k1)
		if k1 == "" {
			t.Fatalf("empty key for %q", cwd)
		}
		if k2, _ := ProjectKeyFromCwd(cwd); k2 != k1 {
			t.Fatalf("ProjectKeyFromCwd not deterministic: %q then %q", k1, k2)
		}
	})
}

// sdkSessionID is the SDK's session id regexp, verbatim but for Go's
// syntax of the i flag.
var sdkSessionID = regexp.MustCompile(`(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// FuzzValidateSessionID: accepts every UUID the SDK's regexp accepts and,
// of the rest, exactly the safe names (a regexp of the rule, written apart
// from the code it checks).
func FuzzValidateSessionID(f *testing.F) {
	for _, c := range sessionIDCases {
		f.Add(c.in)
	}
	name := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	f.Fuzz(func(t *testing.T, id string) {
		ok := ValidateSessionID(id) == nil
		want := sdkSessionID.MatchString(id) || name.MatchString(id) &&
			!strings.HasSuffix(id, ".jsonl") && !strings.HasSuffix(id, ".wal") &&
			!strings.HasSuffix(id, ".acked") && !strings.HasSuffix(id, ".json")
		if ok != want {
			t.Fatalf("ValidateSessionID(%q) accepts=%v, want %v", id, ok, want)
		}
		if ok && (strings.ContainsAny(id, "/\\\x00") || id == "." || id == "..") {
			t.Fatalf("ValidateSessionID(%q) accepts a name that is not one path component", id)
		}
	})
}
