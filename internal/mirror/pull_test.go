package mirror

import "testing"

// TestTypeFirst: a jsonb entry's text (keys by length, spaces after ':'
// and ',') becomes a compact line with "type" first, the other members in
// their order, strings and nested values kept.
func TestTypeFirst(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"n": 1, "aa": [1, 2], "type": "user", "uuid": "u"}`, `{"type":"user","n":1,"aa":[1,2],"uuid":"u"}`},
		{`{"type": "x"}`, `{"type":"x"}`},
		{`{"a": {"b": "c d", "type": 1}, "type": "assistant"}`, `{"type":"assistant","a":{"b":"c d","type":1}}`},
		{`{"k<>&": "<a> \u2603", "no_type": true}`, `{"k<>&":"<a> \u2603","no_type":true}`},
		{`{}`, `{}`},
	} {
		got, err := TypeFirst([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("TypeFirst(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`[1]`, `{"a":1} {}`, `"s"`} {
		if got, err := TypeFirst([]byte(bad)); err == nil {
			t.Errorf("TypeFirst(%s) = %s, want an error", bad, got)
		}
	}
}
