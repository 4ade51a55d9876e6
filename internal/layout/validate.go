package layout

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// Limits on the parts of a Key.
const (
	// MaxProjectKeyBytes is NAME_MAX: a project key is one folder name.
	// Keys derived from a working directory are at most 207 bytes.
	MaxProjectKeyBytes = 255
	// MaxSubpathBytes bounds a whole subpath.
	MaxSubpathBytes = 1024
	// maxNameBytes is NAME_MAX on Linux and macOS; the last component of a
	// subpath must leave room for the ".jsonl" the daemon appends.
	maxNameBytes = 255
)

// exampleSessionID and exampleSubpath show the accepted forms in messages.
const (
	exampleSessionID = "01234567-89ab-cdef-0123-456789abcdef"
	exampleSubpath   = "subagents/agent-abc"
)

// ValidateProjectKey accepts a project key given directly: one safe folder
// name. It must be non-empty, at most 255 bytes of valid UTF-8, contain no
// '/', '\\', NUL or other control character, and be neither "." nor ".."
// nor start with '.', nor begin or end with whitespace (so "", "   " and
// " -home-me-p" are all refused). Keys derived by ProjectKeyFromCwd always pass.
func ValidateProjectKey(key string) error {
	const want = "want one folder name such as \"-home-me-project\" (the working directory with every character outside [A-Za-z0-9] replaced by '-')"
	switch {
	case key == "":
		return invalidf("project key is empty; %s", want)
	case len(key) > MaxProjectKeyBytes:
		return invalidf("project key %s is %d bytes long; at most %d bytes are accepted", quote(key), len(key), MaxProjectKeyBytes)
	case !utf8.ValidString(key):
		return invalidf("project key %s is not valid UTF-8", quote(key))
	case key == "." || key == "..":
		return invalidf("project key %q refers to a folder relative to the projects folder; %s", key, want)
	case key[0] == '.':
		return invalidf("project key %s starts with '.'; names starting with '.' are not accepted as project keys", quote(key))
	}
	if i := strings.IndexAny(key, `/\`); i >= 0 {
		return invalidf("project key %s contains a path separator %q; a project key is a single folder name, %s", quote(key), key[i], want)
	}
	if r, i := firstControl(key); i >= 0 {
		return invalidf("project key %s contains the control character %U at byte %d; NUL and other control characters are not accepted", quote(key), r, i)
	}
	if t := strings.TrimFunc(key, unicode.IsSpace); t != key {
		if t == "" {
			return invalidf("project key %s is only whitespace; %s", quote(key), want)
		}
		return invalidf("project key %s begins or ends with whitespace, which no working directory produces and file managers hide; %s", quote(key), want)
	}
	return nil
}

// MaxSessionIDBytes bounds a session id: with the longest name sessiond
// derives from it ("<id>.missing.json") it stays far inside NAME_MAX.
const MaxSessionIDBytes = 128

// SessionIDRule states which session ids are accepted; every refusal names it.
const SessionIDRule = "want a UUID such as " + exampleSessionID +
	" (either case) or up to 128 bytes of [a-z0-9._-] starting with a letter or digit and not ending in .jsonl, .wal, .acked or .json, such as \"sess\""

// folderExts are the extensions of the files sessiond keeps beside a
// folder it names after a caller's string: a session id or a subpath's
// folder ending in one would be the folder of one key and the file of
// another (".json" covers .missing.json, .meta.json and the store sidecars).
var folderExts = []string{TranscriptExt, reservedExt, AckedExt, ".json"}

// reservedExt is kept from session ids and folders for a file sessiond
// may keep beside a transcript, so that adding one never makes an
// accepted name collide.
const reservedExt = ".wal"

// ValidateSessionID accepts a session id that is safe as one file name on
// every file system sessiond runs on, which the SessionStore contract lets
// a store be given: a UUID as the Agent SDKs and Claude Code make them
// (8-4-4-4-12 hex digits, either case: one session whatever its case, see
// CanonicalSessionID), or a name of lower-case ASCII letters, digits, '.',
// '_' and '-'. Lower case only, so that two ids never name one file on a
// case-insensitive file system; a letter or digit first, so that an id is
// never hidden, "." or "..", a temp file of sessiond's (they start with
// '.') nor taken for a command-line flag; and no ending that is one of
// sessiond's own extensions (see folderExts). Only UUID-named transcripts
// are listed by the official readers (see IsUUID).
func ValidateSessionID(id string) error {
	switch {
	case id == "":
		return invalidf("session id is empty; %s", SessionIDRule)
	case IsUUID(id):
		return nil
	case len(id) > MaxSessionIDBytes:
		return invalidf("session id %s is %d bytes long, over %d; %s", quote(id), len(id), MaxSessionIDBytes, SessionIDRule)
	case !isIDStart(id[0]):
		return invalidf("session id %s starts with %s; %s", quote(id), describeByte(id[0]), SessionIDRule)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isIDByte(c) {
			what := "not accepted"
			if 'A' <= c && c <= 'Z' {
				what = "upper case, accepted only in a UUID"
			}
			return invalidf("session id %s has %s at position %d, %s; %s", quote(id), describeByte(c), i+1, what, SessionIDRule)
		}
	}
	if ext := folderExt(id); ext != "" {
		return invalidf("session id %s ends in %q, the extension of one of sessiond's own files; %s", quote(id), ext, SessionIDRule)
	}
	return nil
}

// IsUUID reports whether id is a UUID in the canonical 8-4-4-4-12 form of
// hex digits, either case, any version: the SDK's
// /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, which
// Claude Code and the official readers name every session by.
func IsUUID(id string) bool {
	if len(id) != len(exampleSessionID) {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch i {
		case 8, 13, 18, 23:
			if id[i] != '-' {
				return false
			}
		default:
			if !isHex(id[i]) {
				return false
			}
		}
	}
	return true
}

func folderExt(name string) string {
	for _, ext := range folderExts {
		if strings.HasSuffix(name, ext) {
			return ext
		}
	}
	return ""
}

func isIDStart(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func isIDByte(c byte) bool { return isIDStart(c) || c == '.' || c == '_' || c == '-' }

// CanonicalSessionID is the form sessiond stores a session under: its id
// in lower case, as every Claude Code writer names its files (the SDK's
// randomUUID is lower case). A UUID in upper case names the same session,
// so it must not name a second file; any other accepted id is lower case
// already. id must have passed ValidateSessionID (ASCII only).
func CanonicalSessionID(id string) string { return strings.ToLower(id) }

// SessionIDForms lists the names under which the session id names may be
// stored, in the order to look for it: the lower-case form sessiond
// stores every session under, then id as given when it differs (a session
// an earlier release stored under an upper-case id, which must still be
// found and written to, not doubled by a lower-case file).
func SessionIDForms(id string) []string {
	if lower := CanonicalSessionID(id); lower != id {
		return []string{lower, id}
	}
	return []string{id}
}

// ValidateSubpath accepts a non-empty subpath: a '/'-separated path relative
// to the session folder, without the ".jsonl" the daemon appends, such as
// "subagents/agent-abc". It refuses what the SDKs refuse when they
// materialise a session (empty, absolute, drive- or UNC-prefixed, "." or
// ".." components, NUL) and, so that the accepted set stays small and every
// accepted subpath names exactly one file inside the session folder: any
// backslash, empty components ("a//b", a trailing '/'), control characters,
// invalid UTF-8, a ".jsonl" suffix, folder components ending in ".jsonl",
// ".wal", ".acked" or ".json" (they would collide with a file sessiond
// keeps for a shorter subpath: see folderExts), components
// too long for the filesystem, and more than 1024 bytes in all.
func ValidateSubpath(sub string) error {
	const want = "want a relative path such as \"" + exampleSubpath + "\""
	switch {
	case sub == "":
		return invalidf("subpath is empty; leave it unset to address the main transcript, or %s", want)
	case len(sub) > MaxSubpathBytes:
		return invalidf("subpath %s is %d bytes long; at most %d bytes are accepted", quote(sub), len(sub), MaxSubpathBytes)
	case !utf8.ValidString(sub):
		return invalidf("subpath %s is not valid UTF-8", quote(sub))
	}
	if r, i := firstControl(sub); i >= 0 {
		return invalidf("subpath %s contains the control character %U at byte %d; NUL and other control characters are not accepted", quote(sub), r, i)
	}
	switch {
	case sub[0] == '/':
		return invalidf("subpath %s is an absolute path; %s inside the session folder", quote(sub), want)
	case sub[0] == '\\':
		return invalidf("subpath %s starts with a backslash (an absolute or UNC path on Windows); %s", quote(sub), want)
	case len(sub) >= 2 && isASCIILetter(sub[0]) && sub[1] == ':':
		return invalidf("subpath %s starts with the drive prefix %q; %s", quote(sub), sub[:2], want)
	case strings.Contains(sub, `\`):
		return invalidf("subpath %s contains a backslash; separate folders with '/', %s", quote(sub), want)
	case strings.HasSuffix(sub, TranscriptExt):
		return invalidf("subpath %s ends in %q; give it without the extension, which sessiond adds", quote(sub), TranscriptExt)
	}
	parts := strings.Split(sub, "/")
	last := len(parts) - 1
	for i, p := range parts {
		switch {
		case p == "" && i == last:
			return invalidf("subpath %s ends with '/'; it must name a file, %s", quote(sub), want)
		case p == "":
			return invalidf("subpath %s has an empty component (\"//\"); %s", quote(sub), want)
		case p == "." || p == "..":
			return invalidf("subpath %s has a %q component; '.' and '..' are not accepted, %s", quote(sub), p, want)
		case i == last && len(p)+len(TranscriptExt) > maxNameBytes:
			return invalidf("subpath %s ends in a name of %d bytes; at most %d bytes are accepted so that the file name with %q fits in %d bytes", quote(sub), len(p), maxNameBytes-len(TranscriptExt), TranscriptExt, maxNameBytes)
		case len(p) > maxNameBytes:
			return invalidf("subpath %s has a component of %d bytes; at most %d bytes are accepted per component", quote(sub), len(p), maxNameBytes)
		case i < last && folderExt(p) != "":
			ext := folderExt(p)
			if ext == TranscriptExt || ext == reservedExt {
				clash := strings.Join(append(parts[:i:i], strings.TrimSuffix(p, ext)), "/")
				return invalidf("subpath %s has a folder %q ending in %q, which would collide with the file of subpath %q; rename the folder", quote(sub), p, ext, clash)
			}
			return invalidf("subpath %s has a folder %q ending in %q, which would collide with a file sessiond keeps beside a transcript (a ledger or sidecar of that name); rename the folder", quote(sub), p, ext)
		}
	}
	return nil
}

// invalidf builds an ErrInvalidArgument error; the message should say what
// is wrong and what is accepted.
func invalidf(format string, args ...any) error {
	// The kind goes last, as in every other package: the edge and sessionctl
	// name it once, in front.
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// quote renders a caller-supplied string for a message, cut to a readable
// length.
func quote(s string) string {
	const max = 80
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// firstControl returns the first control character of a valid UTF-8 string
// and its byte offset, or -1.
func firstControl(s string) (rune, int) {
	for i, r := range s {
		if unicode.IsControl(r) {
			return r, i
		}
	}
	return 0, -1
}

func describeByte(c byte) string {
	if c < utf8.RuneSelf && !unicode.IsControl(rune(c)) {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("the byte 0x%02x", c)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
