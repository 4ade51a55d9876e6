package trash

import (
	"testing"
	"time"
)

// TestParseTrashNameTakesIDsWithDashes: an entry's name is taken apart
// whatever dashes the session id and the subpath hold.
func TestParseTrashNameTakesIDsWithDashes(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
	stamp := at.Format(stampLayout)
	const uuid = "01234567-89ab-cdef-0123-456789abcdef"
	cases := []struct {
		name, sid, lone string
	}{
		{uuid + "-" + stamp, uuid, ""},
		{uuid + "-" + stamp + "-subagents_agent-1", uuid, "subagents_agent-1"},
		{"sess-" + stamp, "sess", ""},
		{"summ-sess-" + stamp, "summ-sess", ""},
		{"a-b-c-" + stamp + "-subagents_agent-x-" + stamp, "a-b-c", "subagents_agent-x-" + stamp},
		{"s1-" + stamp + "-subagents_agent-1", "s1", "subagents_agent-1"},
	}
	for _, c := range cases {
		n, ok := parseName(c.name)
		if !ok || n.sessionID != c.sid || n.lone != c.lone || !n.deleted.Equal(at) {
			t.Errorf("parseName(%q) = %+v, %v; want id %q, lone %q, at %v", c.name, n, ok, c.sid, c.lone, at)
		}
	}
	for _, bad := range []string{"", "sess", "sess-", "-" + stamp, ".x-" + stamp, "X-" + stamp, "sess-" + stamp + "x", "sess-20250304T050607Z"} {
		if n, ok := parseName(bad); ok {
			t.Errorf("parseName(%q) = %+v, true; want false", bad, n)
		}
	}
}
