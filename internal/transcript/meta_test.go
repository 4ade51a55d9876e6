package transcript

import (
	"errors"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
)

type metaGolden struct {
	Input *string `json:"input"`
	Line  string  `json:"line"`
	Error string  `json:"error"`
}

// TestMetaGoldens compares CustomTitleLine and TagLine with the lines
// renameSession and tagSession append, and NormalizeTitle / NormalizeTag
// with what they refuse.
func TestMetaGoldens(t *testing.T) {
	goldens(t)
	g := readSummaryGolden(t)
	sid := g.SessionID
	for _, c := range g.Meta.Titles {
		title := *c.Input
		norm, err := NormalizeTitle(title)
		if c.Error != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("NormalizeTitle(%q) = %q, %v; the SDK refuses it: %s", title, norm, err, c.Error)
			}
			continue
		}
		// The encoding matches for every title the SDK takes...
		if got := string(CustomTitleLine(sid, JSTrim(title))); got != c.Line {
			t.Errorf("CustomTitleLine(%q):\n got %s\nwant %s", title, got, c.Line)
		}
		// ...and sessiond refuses only control characters on top.
		if hasControl(title) != (err != nil) {
			t.Errorf("NormalizeTitle(%q) = %q, %v", title, norm, err)
		}
		if err == nil && norm != JSTrim(title) {
			t.Errorf("NormalizeTitle(%q) = %q", title, norm)
		}
	}
	for _, c := range g.Meta.Tags {
		if c.Input == nil { // tagSession(id, null): clear
			if got := string(TagLine(sid, "")); got != c.Line {
				t.Errorf("TagLine(clear):\n got %s\nwant %s", got, c.Line)
			}
			continue
		}
		tag := *c.Input
		norm, err := NormalizeTag(tag)
		if c.Error != "" || tag == "" {
			if tag == "" {
				if err != nil || norm != "" {
					t.Errorf("NormalizeTag(\"\") = %q, %v; want the clearing tag", norm, err)
				}
				continue
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("NormalizeTag(%q) = %q, %v; the SDK refuses it: %s", tag, norm, err, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("NormalizeTag(%q): %v", tag, err)
			continue
		}
		if got := string(TagLine(sid, norm)); got != c.Line {
			t.Errorf("TagLine(%q):\n got %s\nwant %s", tag, got, c.Line)
		}
	}
}

// hasControl reports whether s, trimmed, has a character sessiond refuses
// in titles and tags.
func hasControl(s string) bool {
	for _, r := range JSTrim(s) {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
			return true
		}
	}
	return false
}

func TestNormalizeTitleAndTag(t *testing.T) {
	for _, bad := range []string{"", "  ", "a\nb", "a\rb", "a\u2028b", "x\x00", strings.Repeat("a", MaxTitleLength+1), "\xff"} {
		if _, err := NormalizeTitle(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NormalizeTitle(%q): %v", bad, err)
		}
	}
	if got, err := NormalizeTitle(strings.Repeat("é", MaxTitleLength)); err != nil || got == "" {
		t.Errorf("NormalizeTitle(200 runes): %v", err)
	}
	for _, bad := range []string{" ", "\u200b", "a\nb", strings.Repeat("b", MaxTitleLength+1), "\xff"} {
		if _, err := NormalizeTag(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NormalizeTag(%q): %v", bad, err)
		}
	}
	for in, want := range map[string]string{"\ufb01nal": "final", "a\u200bb": "ab", "caf\u0065\u0301": "caf\u00e9", "\uff21": "A", "plain ascii\u007f": ""} {
		got, err := NormalizeTag(in)
		if want == "" {
			if err == nil {
				t.Errorf("NormalizeTag(%q) = %q, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("NormalizeTag(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got := string(TagLine("s", "x")); !strings.HasPrefix(got, `{"type":"tag"`) {
		t.Errorf("TagLine does not start with {\"type\":\"tag\": %s", got)
	}
}

func TestAppendJSString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              `"plain"`,
		"q\"b\\":             `"q\"b\\"`,
		"\b\f\n\r\t\x01\x1f": `"\b\f\n\r\t\u0001\u001f"`,
		"\x7f\u2028<&>é🎉":    "\"\x7f\u2028<&>é🎉\"",
		"bad\xff\xe2\x82x":   "\"bad\uFFFD\uFFFDx\"",
	} {
		if got := string(AppendJSString(nil, in)); got != want {
			t.Errorf("appendJSString(%q) = %s, want %s", in, got, want)
		}
	}
}
