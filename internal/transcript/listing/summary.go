package listing

import (
	"encoding/json"
	"regexp"
	"time"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// The official listing metadata.
//
// listSessions and getSessionInfo in the TypeScript SDK (0.3.329) do not
// parse whole transcripts: their "lite" reader (xa, then Na) reads the first
// and the last 64 KiB of the file (one window when the file is not larger)
// and searches them as text:
//
//	if first line of head includes "isSidechain":true        -> not listed
//	customTitle = Qn(tail,"custom-title") || <session>/custom-title.json
//	              || Qn(head,"custom-title") || Qn(tail,"ai-title") || Qn(head,"ai-title")
//	firstPrompt = ch(head)                    // first real user prompt, 200-char cut
//	createdAt   = Date.parse(sc(head,"timestamp"))
//	summary     = customTitle || IR(tail,"lastPrompt") || IR(tail,"summary")
//	              || firstPrompt || mF(head)  // "Image" / "Document"; "" -> not listed
//	gitBranch   = kR(tail,"gitBranch") || sc(head,"gitBranch")
//	cwd         = DR(tail,"relocatedCwd","relocated") || sc(head,"cwd") || project path
//	tag         = Qn(tail,"tag")              // the last tag line; "" (cleared) -> none
//
// DR (Qn and IR are forms of it) walks the window's lines backwards and
// returns the first line that contains `"<key>":` (and `"type":"<type>"`),
// parses as JSON, has that type and a string <key>. In the "older" mode of Qn
// it also accepts `"type": "<type>"` and, when a line does not parse,
// retries from its last `{"type":"<type>"` (a record appended to a torn line).
// sc takes the first `"<key>":"` anywhere in the text (nested or not, then
// the spaced form), kR the last one; both read the value up to the next
// unescaped quote. Summary reproduces all of this; see Summary for where a
// streaming reader has to be careful to see exactly what the SDK sees.
//
// Summary's jobs, one file each: this file holds the fields and the rules
// that combine the lookups into them (resolve, ForkTitle); lookup.go the
// lite reader's text lookups (DR, sc, kR); prompt.go the first prompt and
// media extractors (ps, ch, mF); stream.go the streaming reader (Add,
// AddLine), which keeps the windows' results as the file grows; jsdate.go
// Date.parse for CreatedAt.

// Summary is the listing metadata of one session, as listSessions and
// getSessionInfo of the official TypeScript SDK report it.
//
// Feed every line of a transcript, in order, to Add (or AddLine); after each
// call the fields describe the file as it is so far, exactly as the SDK's
// lite reader would describe it: the reader only looks at the first and the
// last 64 KiB, and Summary tracks which lines, and which parts of the lines
// straddling a window's edge, fall inside them. So a title set in the middle
// of a huge file (more than 64 KiB before the end and after the start) is
// not the title, as for the SDK, which falls back to the custom-title.json
// sidecar, the head's title, the AI title or the first prompt; the same goes
// for lastPrompt, summary, tag and the relocated cwd. A daemon that wants a
// title never to be lost should append it again (or keep the sidecar), not
// report a title the official tools do not show.
//
// The streaming reader keeps, per field, the value seen last (or first) and
// where: a few hundred bytes whatever the size of the file (up to 64 KiB
// more while a value cut by a torn line waits for its closing quote, and up
// to two windows' worth while lines that are not JSON but have a tail
// field's patterns are near the tail window, since the window may start
// inside one of them and read it from there).
// Remaining differences with the SDK, all in damaged or exotic input:
//   - a kR (gitBranch, entrypoint) value that spans a line break (a torn
//     line followed by a newline) is read through the break as the SDK
//     does, but an occurrence that starts exactly at the quote closing such
//     a value is skipped even when the SDK's tail window starts inside that
//     value;
//   - invalid UTF-8 becomes U+FFFD as Node.js decodes it, but lone UTF-16
//     surrogate escapes (\ud800) become U+FFFD, where JavaScript keeps them;
//   - CreatedAt understands the ISO 8601 forms Date.parse specifies, not the
//     legacy formats V8 also guesses at.
//
// Summary covers what the transcript itself says. A listing also looks
// outside it, which is the caller's to do: the custom-title.json sidecar
// (SetSidecarTitle), <session-id>/archived.json (archived), the file's
// mtime and size, the project path when Cwd is empty, and it hides a
// session whose tail has a continued-in record naming a session that
// exists, and one whose cwd belongs to another project with the same key.
//
// The zero Summary is ready for Add. A copy shares its stream state.
type Summary struct {
	// Title is what listings report as customTitle: the custom title,
	// else the AI-generated title.
	Title string
	// CustomTitle is the customTitle of the last custom-title line the
	// reader sees (in the tail window, else in the head window).
	CustomTitle string
	// AITitle is the aiTitle of the last ai-title line (tail, else head).
	AITitle string
	// LastPrompt is the lastPrompt of the last line in the tail window
	// that has one (a last-prompt line).
	LastPrompt string
	// SummaryHint is the summary of the last line in the tail window with
	// a top-level string "summary" (an old-style summary line).
	SummaryHint string
	// FirstPrompt is the first real user prompt in the head window (not a
	// tool result, meta or compaction summary, not a command or a
	// <tag>-wrapped text), cut to 200 UTF-16 units plus "…"; else the first
	// command name (<command-name>) met there.
	FirstPrompt string
	// GitBranch is the last "gitBranch" in the tail window, else the first
	// in the head window.
	GitBranch string
	// Cwd is the relocatedCwd of the last relocated line in the tail
	// window, else the first "cwd" in the head window. Listings fall back
	// to the project's path when it is empty.
	Cwd string
	// Tag is the tag of the last tag line in the tail window; empty when
	// there is none or the last one cleared the tag.
	Tag string
	// CreatedAt is the first "timestamp" in the head window, in
	// milliseconds since the epoch; 0 when there is none or it does not
	// parse.
	CreatedAt int64
	// IsSidechain says that the first line contains "isSidechain":true:
	// listings skip such files (subagent transcripts).
	IsSidechain bool
	// Programmatic says that the session was started through an SDK (its
	// first "entrypoint" in the head window, else its last in the tail
	// window, is sdk-cli, sdk-ts or sdk-py) or is a daemon's (the
	// sessionKind of the head's first line with a parentUuid is daemon or
	// daemon-worker): listSessions({includeProgrammatic: false}) skips it.
	Programmatic bool

	parts summaryParts
	st    *summaryStream
}

// summaryParts are the lookups the fields are made of.
type summaryParts struct {
	tailCT       string
	tailCTSet    bool
	headCT       string
	tailAI       string
	headAI       string
	sidecar      string
	lastPrompt   string
	summaryHint  string
	firstPrompt  string
	shownPrompt  string
	media        string
	gitTail      string
	gitHead      string
	relocatedCwd string
	cwdHead      string
	tag          string
	timestamp    string
	timestampSet bool
	entryHead    string
	entryHeadSet bool
	entryTail    string
	entryTailSet bool
	kind         string // sessionKind as pF reads it
}

// Display is what listSessions shows as summary: Title, else LastPrompt,
// else SummaryHint, else FirstPrompt, else "Image" or "Document" for a
// first user message made of such blocks. Empty means the SDK does not list
// the session at all.
func (s *Summary) Display() string {
	for _, v := range []string{s.Title, s.LastPrompt, s.SummaryHint, s.FirstPrompt, s.parts.media} {
		if v != "" {
			return v
		}
	}
	return ""
}

// Listed reports whether listSessions and getSessionInfo return the session.
func (s *Summary) Listed() bool { return !s.IsSidechain && s.Display() != "" }

// SetSidecarTitle records the title of the session's custom-title.json
// sidecar (<project>/<session-id>/custom-title.json, see
// ParseTitleSidecar), "" for none. The SDK uses it when the tail window has
// no custom-title line, before the head window's.
func (s *Summary) SetSidecarTitle(title string) {
	s.parts.sidecar = title
	s.resolve()
}

// Archived reads an archived.json sidecar ({"archived": bool, "at":
// ISO-8601}) by the official rule: the session is archived when the mark
// says so, unless a real user prompt came after its "at" (lastPromptMs,
// the prompt's timestamp in Unix ms; 0 for none). A mark that does not
// parse, or is over 4 KiB, archives nothing.
func Archived(mark []byte, lastPromptMs int64) bool {
	if len(mark) > 4096 {
		return false
	}
	var m struct {
		Archived bool   `json:"archived"`
		At       string `json:"at"`
	}
	if json.Unmarshal(mark, &m) != nil || !m.Archived {
		return false
	}
	at, err := time.Parse(time.RFC3339Nano, m.At)
	if err != nil {
		return false
	}
	return lastPromptMs <= at.UnixMilli()
}

// ParseTitleSidecar reads a custom-title.json sidecar as the SDK does
// ({"customTitle": string}, trimmed, control and format characters turned
// into spaces, cut to 200 code points, trimmed again); "" when it has none.
func ParseTitleSidecar(data []byte) string {
	var v map[string]json.RawMessage
	var title string
	if json.Unmarshal(data, &v) != nil || json.Unmarshal(v["customTitle"], &title) != nil || v["customTitle"][0] != '"' {
		return ""
	}
	t := controlRunRe.ReplaceAllString(rawjson.JSTrim(title), " ")
	if r := []rune(t); len(r) > 200 {
		t = string(r[:200])
	}
	return rawjson.JSTrim(t)
}

// controlRunRe is the Hg replacement, /[\p{Cc}\p{Cf}\u2028\u2029]+/gu.
var controlRunRe = regexp.MustCompile(`[\p{Cc}\p{Cf}\x{2028}\x{2029}]+`)

func orString(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// resolve computes the fields from the parts.
func (s *Summary) resolve() {
	p := &s.parts
	s.CustomTitle = orString(p.tailCT, p.headCT)
	s.AITitle = orString(p.tailAI, p.headAI)
	sidecar := ""
	if !p.tailCTSet {
		sidecar = p.sidecar
	}
	s.Title = orString(p.tailCT, sidecar, p.headCT, p.tailAI, p.headAI)
	s.LastPrompt = p.lastPrompt
	s.SummaryHint = p.summaryHint
	s.FirstPrompt = p.firstPrompt
	s.GitBranch = orString(p.gitTail, p.gitHead)
	s.Cwd = orString(p.relocatedCwd, p.cwdHead)
	s.Tag = p.tag
	entry := p.entryTail
	if p.entryHeadSet {
		entry = p.entryHead
	}
	s.Programmatic = entry == "sdk-cli" || entry == "sdk-ts" || entry == "sdk-py" || p.kind == "daemon" || p.kind == "daemon-worker"
	s.CreatedAt = 0
	if p.timestampSet {
		if ms, ok := jsDateParse(p.timestamp); ok {
			s.CreatedAt = ms
		}
	}
}

// ForkTitle is the title forkSession derives for a fork when none is given
// (before " (fork)" is added): the tail's custom title if there is a
// custom-title line there (even an empty one), else the sidecar's, else the
// head's; then the AI title (tail, head), then the first prompt in its
// shown form.
func (s *Summary) ForkTitle() string {
	p := &s.parts
	c := p.tailCT
	if !p.tailCTSet {
		c = orString(p.sidecar, p.headCT)
	}
	return orString(c, p.tailAI, p.headAI, p.shownPrompt)
}
