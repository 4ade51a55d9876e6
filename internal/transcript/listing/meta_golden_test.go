package listing

import (
	"errors"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// The lines renameSession and tagSession append are recorded with the
// listings, in testdata/goldens.json, so their test reads them here.

type metaGolden struct {
	Input *string `json:"input"`
	Line  string  `json:"line"`
	Error string  `json:"error"`
}

// TestMetaGoldens compares CustomTitleLine and TagLine with the lines
// renameSession and tagSession append, and NormalizeTitle / NormalizeTag
// with what they refuse.
func TestMetaGoldens(t *testing.T) {
	transcripttest.Goldens(t)
	g := readSummaryGolden(t)
	sid := g.SessionID
	for _, c := range g.Meta.Titles {
		title := *c.Input
		norm, err := transcript.NormalizeTitle(title)
		if c.Error != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("NormalizeTitle(%q) = %q, %v; the SDK refuses it: %s", title, norm, err, c.Error)
			}
			continue
		}
		// The encoding matches for every title the SDK takes...
		if got := string(transcript.CustomTitleLine(sid, rawjson.JSTrim(title))); got != c.Line {
			t.Errorf("CustomTitleLine(%q):\n got %s\nwant %s", title, got, c.Line)
		}
		// ...and sessiond refuses only control characters on top.
		if hasControl(title) != (err != nil) {
			t.Errorf("NormalizeTitle(%q) = %q, %v", title, norm, err)
		}
		if err == nil && norm != rawjson.JSTrim(title) {
			t.Errorf("NormalizeTitle(%q) = %q", title, norm)
		}
	}
	for _, c := range g.Meta.Tags {
		if c.Input == nil { // tagSession(id, null): clear
			if got := string(transcript.TagLine(sid, "")); got != c.Line {
				t.Errorf("TagLine(clear):\n got %s\nwant %s", got, c.Line)
			}
			continue
		}
		tag := *c.Input
		norm, err := transcript.NormalizeTag(tag)
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
		if got := string(transcript.TagLine(sid, norm)); got != c.Line {
			t.Errorf("TagLine(%q):\n got %s\nwant %s", tag, got, c.Line)
		}
	}
}

// hasControl reports whether s, trimmed, has a character sessiond refuses
// in titles and tags.
func hasControl(s string) bool {
	for _, r := range rawjson.JSTrim(s) {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
			return true
		}
	}
	return false
}
