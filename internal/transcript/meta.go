package transcript

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/rawjson"

	"golang.org/x/text/unicode/norm"
)

// Session metadata lines: what the official TypeScript SDK (0.3.329)
// appends for renameSession and tagSession, byte for byte:
//
//	renameSession: le({type:"custom-title",customTitle:t.trim(),sessionId:e})+"\n"
//	tagSession:    le({type:"tag",tag:t??"",sessionId:e})+"\n"
//
// (le is JSON.stringify; the line is appended with O_WRONLY|O_APPEND to a
// file that must exist and be non-empty.) The last line of each type wins
// when the session is listed. The Python SDK finds tags only on lines that
// start with {"type":"tag", which TagLine guarantees.

// MaxTitleLength is the most characters (Unicode code points) sessiond
// accepts in a session title or tag. The SDK sets no limit for titles it
// appends, but it cuts the titles it reads from a custom-title.json sidecar
// to this many code points, and listings show no more.
const MaxTitleLength = 200

// NormalizeTitle returns title as renameSession stores it: trimmed as
// JavaScript's String.prototype.trim trims. Like the SDK it refuses a title
// that is empty after trimming ("title must be non-empty"). sessiond also
// refuses, where the SDK would store them: invalid UTF-8, line breaks and
// other control characters (a title is one line of a listing), and titles
// over MaxTitleLength characters. Errors wrap errdefs.ErrInvalidArgument.
func NormalizeTitle(title string) (string, error) {
	if err := checkMetaText("title", title); err != nil {
		return "", err
	}
	t := rawjson.JSTrim(title)
	if t == "" {
		return "", invalidf("title must be non-empty (it is empty or only whitespace)")
	}
	return t, checkMetaChars("title", t)
}

// NormalizeTag returns tag as tagSession stores it. The empty string clears
// the tag (the SDK's tagSession(id, null) writes tag ""), and stays "".
// Any other tag goes through the SDK's Unicode sanitizer when it is not
// plain ASCII (repeated NFKC normalization and removal of format (Cf),
// private-use (Co) and unassigned (Cn) code points, until nothing changes)
// and is then trimmed; like the SDK it is refused when nothing is left
// ("tag must be non-empty (use null to clear)"), or when the sanitizer
// does not settle within 10 rounds. sessiond also refuses invalid UTF-8,
// line breaks and other control characters, and tags over MaxTitleLength
// characters. Errors wrap errdefs.ErrInvalidArgument.
//
// The set of unassigned code points is Go's Unicode version, which may
// differ from the ICU data of the Node.js that runs the SDK for code points
// assigned in between.
func NormalizeTag(tag string) (string, error) {
	if tag == "" {
		return "", nil
	}
	if err := checkMetaText("tag", tag); err != nil {
		return "", err
	}
	s, err := sanitizeUnicode(tag)
	if err != nil {
		return "", err
	}
	s = rawjson.JSTrim(s)
	if s == "" {
		return "", invalidf("tag %q must be non-empty after Unicode sanitization and trimming (an empty tag clears the tag)", tag)
	}
	return s, checkMetaChars("tag", s)
}

// CustomTitleLine returns the custom-title line renameSession appends, without
// its trailing newline: {"type":"custom-title","customTitle":...,"sessionId":...}.
// The title is encoded as given; pass it through NormalizeTitle first.
func CustomTitleLine(sessionID, title string) []byte {
	return metaLine("custom-title", "customTitle", title, sessionID)
}

// TagLine returns the tag line tagSession appends, without its trailing
// newline: {"type":"tag","tag":...,"sessionId":...}. An empty tag is the
// line that clears the tag. The tag is encoded as given; pass it through
// NormalizeTag first.
func TagLine(sessionID, tag string) []byte {
	return metaLine("tag", "tag", tag, sessionID)
}

// metaLine is {"type":typ,key:val,"sessionId":sessionID}.
func metaLine(typ, key, val, sessionID string) []byte {
	b := make([]byte, 0, 64+len(typ)+len(key)+len(val)+len(sessionID))
	b = append(append(append(b, `{"type":"`...), typ...), '"')
	b = rawjson.AppendJSMember(b, key, val)
	b = rawjson.AppendJSMember(b, "sessionId", sessionID)
	return append(b, '}')
}

// checkMetaText refuses what JavaScript strings cannot hold.
func checkMetaText(what, s string) error {
	if !utf8.ValidString(s) {
		return invalidf("%s is not valid UTF-8", what)
	}
	return nil
}

// checkMetaChars applies sessiond's own limits to a trimmed title or tag.
func checkMetaChars(what, s string) error {
	for i, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return invalidf("%s %q has a line break or control character (U+%04X at byte offset %d); a %s must be a single line of text", what, s, r, i, what)
		}
	}
	if n := utf8.RuneCountInString(s); n > MaxTitleLength {
		return invalidf("%s is %d characters long, over the limit of %d", what, n, MaxTitleLength)
	}
	return nil
}

// sanitizeUnicode is the SDK's Unicode sanitizer for tags (nre): ASCII is
// left alone; anything else goes through rounds of NFKC normalization
// followed by removal of Cf, Co and Cn code points (lone surrogates, which
// it also removes, cannot occur in valid UTF-8), until a round changes
// nothing. The SDK gives up, throwing, once it has run 10 rounds.
func sanitizeUnicode(s string) (string, error) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return s, nil
	}
	t, prev := s, ""
	rounds := 0
	for t != prev && rounds < 10 {
		prev = t
		t = norm.NFKC.String(t)
		for j := 0; j < 10; j++ { // ere: strip until stable, at most 10 times
			u := strings.Map(func(r rune) rune {
				if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Co, r) || isUnassigned(r) {
					return -1
				}
				return r
			}, t)
			if u == t {
				break
			}
			t = u
		}
		rounds++
	}
	if rounds >= 10 {
		return "", invalidf("Unicode sanitization of %q did not settle within 10 rounds", s)
	}
	return t, nil
}

// isUnassigned reports whether r is in no general category (Cn).
func isUnassigned(r rune) bool {
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

// AgentMetaSidecar returns the content of a subagent's .meta.json sidecar
// for line when line is an "agent_metadata" entry, the form in which the
// SDK mirrors the sidecar to a SessionStore: the entry without its "type"
// member, the other members' bytes and order kept. ok is false for any
// other line.
func AgentMetaSidecar(line []byte) (sidecar []byte, ok bool) {
	if t, found := rawjson.TopLevelString(line, "type"); !found || t != "agent_metadata" {
		return nil, false
	}
	start, _ := rawjson.TrimWS(line)
	out := []byte{'{'}
	rawjson.EachMember(line, start, func(m rawjson.Member) bool {
		if rawjson.KeyIs(line, m.Key, "type") {
			return true
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, line[m.Key.Start:m.Key.End]...)
		out = append(out, ':')
		out = append(out, line[m.Val.Start:m.Val.End]...)
		return true
	})
	return append(out, '}'), true
}
