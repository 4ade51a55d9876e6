package layout

import (
	"path/filepath"
	"testing"
)

const (
	testSID  = "01234567-89ab-cdef-0123-456789abcdef"
	testSID2 = "fedcba98-7654-3210-FEDC-BA9876543210"
)

var testLayout = Layout{Root: "/home/me/.claude", StateDir: "/home/me/.local/state/sessiond"}

func TestPaths(t *testing.T) {
	l := testLayout
	main := Key{ProjectKey: "-home-me-proj", SessionID: testSID}
	sub := Key{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "subagents/workflows/run-1/agent-abc"}
	checks := []struct{ got, want string }{
		{l.ProjectsDir(), "/home/me/.claude/projects"},
		{l.ProjectDir("-home-me-proj"), "/home/me/.claude/projects/-home-me-proj"},
		{l.SessionDir(main), "/home/me/.claude/projects/-home-me-proj/" + testSID},
		{l.SessionDir(sub), "/home/me/.claude/projects/-home-me-proj/" + testSID},
		{l.TranscriptPath(main), "/home/me/.claude/projects/-home-me-proj/" + testSID + ".jsonl"},
		{l.TranscriptPath(sub), "/home/me/.claude/projects/-home-me-proj/" + testSID + "/subagents/workflows/run-1/agent-abc.jsonl"},
		{l.JournalDir(), "/home/me/.local/state/sessiond/journal"},
		{l.AckedPath(main), "/home/me/.local/state/sessiond/acked/-home-me-proj/" + testSID + ".acked"},
		{l.AckedPath(sub), "/home/me/.local/state/sessiond/acked/-home-me-proj/" + testSID + "/subagents/workflows/run-1/agent-abc.acked"},
		{l.MissingPath(sub), "/home/me/.local/state/sessiond/missing/-home-me-proj/" + testSID + "/subagents/workflows/run-1/agent-abc.missing.json"},
		// Unclean roots still give clean paths.
		{Layout{Root: "/r/", StateDir: "/s//x/"}.TranscriptPath(main), "/r/projects/-home-me-proj/" + testSID + ".jsonl"},
		{Layout{Root: "/"}.ProjectsDir(), "/projects"},
	}
	for i, c := range checks {
		if filepath.FromSlash(c.want) != c.got {
			t.Errorf("check %d: got %q, want %q", i, c.got, c.want)
		}
	}
}

func TestPathsRefuseInvalidKeys(t *testing.T) {
	l := testLayout
	bad := []Key{
		{ProjectKey: "..", SessionID: testSID},
		{ProjectKey: "", SessionID: testSID},
		{ProjectKey: "-p", SessionID: "../../etc/passwd"},
		{ProjectKey: "-p", SessionID: testSID, Subpath: "../../../x"},
		{ProjectKey: "-p", SessionID: testSID, Subpath: "/etc/x"},
	}
	for _, k := range bad {
		if p := l.TranscriptPath(k); p != "" {
			t.Errorf("TranscriptPath(%#v) = %q, want \"\"", k, p)
		}
	}
	if p := l.ProjectDir("../x"); p != "" {
		t.Errorf("ProjectDir(../x) = %q, want \"\"", p)
	}
	if p := l.SessionDir(Key{ProjectKey: "-p", SessionID: "x.jsonl"}); p != "" {
		t.Errorf("SessionDir(bad sid) = %q, want \"\"", p)
	}
}

var roundTripKeys = []Key{
	{ProjectKey: "-home-me-proj", SessionID: testSID},
	{ProjectKey: "-home-me-proj", SessionID: testSID2}, // upper case, as the SDK allows
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "a"},
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "subagents/agent-abc"},
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "subagents/workflows/run-1/agent-abc"},
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: testSID},     // a subpath named like a session
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "x.wal"},     // the reserved extension, last
	{ProjectKey: "-home-me-proj", SessionID: testSID, Subpath: "日本/語 x"},    // UTF-8, spaces
	{ProjectKey: "proj_1 \u00e9", SessionID: testSID, Subpath: ".hidden/y"}, // key given directly
}

func TestTranscriptPathRoundTrip(t *testing.T) {
	for _, l := range []Layout{testLayout, {Root: "/", StateDir: "/"}, {Root: "rel/root", StateDir: "rel/state"}} {
		for _, k := range roundTripKeys {
			p := l.TranscriptPath(k)
			if got, ok := l.ParseTranscriptPath(p); !ok || got != k {
				t.Errorf("%+v: ParseTranscriptPath(%q) = %#v, %v; want %#v", l, p, got, ok, k)
			}
		}
	}
}

func TestParseRejectsNonTranscripts(t *testing.T) {
	l := testLayout
	proj := l.ProjectDir("-p")
	sess := filepath.Join(proj, testSID)
	notTranscripts := []string{
		"",
		proj,
		l.ProjectsDir(),
		filepath.Join(l.ProjectsDir(), testSID+".jsonl"),                  // no project folder
		filepath.Join(proj, testSID+".jsonl.tmp"),                         // temp files
		filepath.Join(proj, "."+testSID+".jsonl.tmp-123"),                 // idem
		filepath.Join(proj, "Notes.jsonl"),                                // upper case outside a UUID
		filepath.Join(proj, "-notes.jsonl"),                               // not a session id
		filepath.Join(proj, "x.wal.jsonl"),                                // idem: would collide
		filepath.Join(proj, testSID+".JSONL"),                             // extension case
		filepath.Join(proj, testSID+".wal"),                               // a reserved name
		filepath.Join(proj, testSID+".meta.json"),                         // other files
		filepath.Join(proj, testSID),                                      // the session folder
		filepath.Join(sess, "archived.json"),                              // archive marker
		filepath.Join(sess, "subagents", "agent-a.meta.json"),             // sidecar
		filepath.Join(sess, ".jsonl"),                                     // empty name
		filepath.Join(sess, "subagents", ".jsonl"),                        // idem, deeper
		filepath.Join(sess, "x.jsonl", "y.jsonl"),                         // folder that would collide
		filepath.Join(l.ProjectsDir(), ".hidden", testSID+".jsonl"),       // bad project key
		filepath.Join(l.ProjectsDir(), "-p", "x.acked", "y.jsonl"),        // bad session id
		proj + "/./" + testSID + ".jsonl",                                 // not clean
		proj + "//" + testSID + ".jsonl",                                  // not clean
		proj + "/../-p/" + testSID + ".jsonl",                             // not clean
		"/elsewhere/projects/-p/" + testSID + ".jsonl",                    // outside Root
		"/home/me/.claude/projectsX/-p/" + testSID + ".jsonl",             // prefix without separator
		"home/me/.claude/projects/-p/" + testSID + ".jsonl",               // relative
		filepath.Join(l.JournalDir(), "-p", testSID+".jsonl"),             // under the state folder
		filepath.Join(sess, "a\\b.jsonl"),                                 // backslash in a name
		filepath.Join(sess, "a\nb.jsonl"),                                 // control character
		filepath.Join(proj, "01234567-89ab-cdef-0123-456789abcdeG.jsonl"), // upper case, not a UUID
	}
	for _, p := range notTranscripts {
		if k, ok := l.ParseTranscriptPath(p); ok {
			t.Errorf("ParseTranscriptPath(%q) = %#v, true; want false", p, k)
		}
	}
}
