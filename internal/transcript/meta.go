package transcript

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sessiond/sessiond/internal/errdefs"
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
	t := JSTrim(title)
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
	s = JSTrim(s)
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
	b = AppendJSMember(b, key, val)
	b = AppendJSMember(b, "sessionId", sessionID)
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

// isJSSpace reports whether r is whitespace for JavaScript's trim() and \s:
// WhiteSpace and LineTerminator. Unlike unicode.IsSpace it includes U+FEFF
// and excludes U+0085.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// JSTrim is String.prototype.trim.
func JSTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// AppendJSMember appends ,"key":<s encoded by AppendJSString>: a member
// after the first of an object being written. key is written as is.
func AppendJSMember(b []byte, key, s string) []byte {
	b = append(append(append(b, `,"`...), key...), `":`...)
	return AppendJSString(b, s)
}

// AppendJSString appends s as JSON.stringify encodes a string: '"' and '\\'
// escaped, \b \f \n \r \t by name, other control characters as \u00xx
// (lowercase hex), everything else as is (U+2028, U+2029, '<', '>', '&' and
// DEL included). Invalid UTF-8, which a JavaScript string cannot hold,
// becomes U+FFFD as a UTF-8 decoder makes it.
func AppendJSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, "\uFFFD"...)
				i += nodeInvalidLen(s[i:])
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// nodeInvalidLen returns how many bytes at the start of s (which does not
// start with valid UTF-8) a WHATWG UTF-8 decoder, as in Node.js's
// Buffer.toString, replaces with one U+FFFD: the maximal prefix of a valid
// sequence, or one byte.
func nodeInvalidLen(s string) int {
	c := s[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c >= 0xE0 && c <= 0xEF:
		n = 3
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		n = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	i := 1
	for i < n && i < len(s) && s[i] >= lo && s[i] <= hi {
		lo, hi = 0x80, 0xBF
		i++
	}
	return i
}

// NodeUTF8 returns data decoded as Node.js decodes a Buffer: every
// ill-formed subsequence replaced by U+FFFD. Valid data is returned as is.
func NodeUTF8(data []byte) []byte {
	if utf8.Valid(data) {
		return data
	}
	out := make([]byte, 0, len(data)+16)
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			out = append(out, data[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, "\uFFFD"...)
			i += nodeInvalidLen(string(data[i:min(len(data), i+4)]))
			continue
		}
		out = append(out, data[i:i+size]...)
		i += size
	}
	return out
}

// JSLength is the length of s in UTF-16 code units, JavaScript's
// String.prototype.length.
func JSLength(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// sdkUUID reports whether s is a UUID as the SDK's session id check
// accepts it: 8-4-4-4-12 hex digits, either case.
func sdkUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// checkSDKSessionID refuses a session id the SDK would refuse.
func checkSDKSessionID(what, id string) error {
	if !sdkUUID(id) {
		return fmt.Errorf("%s %q is not a UUID (8-4-4-4-12 hex digits): %w", what, id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// AgentMetaSidecar returns the content of a subagent's .meta.json sidecar
// for line when line is an "agent_metadata" entry, the form in which the
// SDK mirrors the sidecar to a SessionStore: the entry without its "type"
// member, the other members' bytes and order kept. ok is false for any
// other line.
func AgentMetaSidecar(line []byte) (sidecar []byte, ok bool) {
	if t, found := TopLevelString(line, "type"); !found || t != "agent_metadata" {
		return nil, false
	}
	start, _ := TrimWS(line)
	out := []byte{'{'}
	EachMember(line, start, func(m Member) bool {
		if KeyIs(line, m.Key, "type") {
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
