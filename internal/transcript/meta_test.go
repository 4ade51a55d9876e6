package transcript

import (
	"errors"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
)

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
		if got := string(rawjson.AppendJSString(nil, in)); got != want {
			t.Errorf("appendJSString(%q) = %s, want %s", in, got, want)
		}
	}
}
