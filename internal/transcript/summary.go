package transcript

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"time"
	"unicode/utf16"
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

// liteWindow is the size of the lite reader's head and tail windows (zn),
// 64 KiB. It is a variable only so that tests can move the windows' edges
// over small inputs.
var liteWindow = 64 << 10

// drField is one DR lookup: the line must contain `"key":`, and, when typ is
// set, `"type":"typ"` (or `"type": "typ"` in the older mode).
type drField struct {
	key, typ string
	older    bool
	keyPat   []byte
	typPats  [][]byte
	splice   []byte
}

func newDRField(key, typ string, older bool) *drField {
	f := &drField{key: key, typ: typ, older: older, keyPat: []byte(`"` + key + `":`)}
	if typ != "" {
		f.typPats = [][]byte{[]byte(`"type":"` + typ + `"`)}
		if older {
			f.typPats = append(f.typPats, []byte(`"type": "`+typ+`"`))
		}
		f.splice = []byte(`{"type":"` + typ + `"`)
	}
	return f
}

var (
	drCustomTitle = newDRField("customTitle", "custom-title", true)
	drAITitle     = newDRField("aiTitle", "ai-title", true)
	drTag         = newDRField("tag", "tag", true)
	drLastPrompt  = newDRField("lastPrompt", "", false)
	drSummary     = newDRField("summary", "", false)
	drRelocated   = newDRField("relocatedCwd", "relocated", false)
)

// line returns the value DR finds on one line. at is where, in line, the
// record holding it starts: after the JSON whitespace leading the line, or
// the start of a record appended to a torn line that the older mode
// recovered. For a JSON line, a window starting at or before at sees the
// same value and one starting after it sees none; a damaged line's part
// can read otherwise (see summaryStream.fragment).
func (f *drField) line(line []byte) (val string, at int, ok bool) {
	val, at, ok, _ = f.lineDamaged(line)
	return val, at, ok
}

// lineDamaged is line, and also reports whether the line has the patterns
// DR looks for but is not JSON. Only such a line can read differently when
// a window starts inside it: a proper suffix of a JSON line never parses
// as an object (its brackets no longer balance), but a suffix of a damaged
// one can, and DR then takes that instead of the record the whole line
// yields.
func (f *drField) lineDamaged(line []byte) (val string, at int, ok, damaged bool) {
	if !bytes.Contains(line, f.keyPat) {
		return "", 0, false, false
	}
	if f.typPats != nil {
		found := false
		for _, p := range f.typPats {
			if bytes.Contains(line, p) {
				found = true
				break
			}
		}
		if !found {
			return "", 0, false, false
		}
	}
	val, ok, parsed := f.eval(line)
	if parsed {
		s := scanner{data: line}
		s.ws()
		return val, s.pos, ok, false
	}
	if f.older {
		d := bytes.LastIndex(line, f.splice)
		if d > 0 && !strings.ContainsRune(":,[", rune(line[d-1])) {
			val, ok, _ = f.eval(line[d:])
			at = d
		}
	}
	return val, at, ok, true
}

// eval is eF: JSON.parse(text), then the string member key of an object of
// type typ. parsed is false when text is not JSON.
func (f *drField) eval(text []byte) (val string, ok, parsed bool) {
	obj, isObj, parsed := jsParseObject(text)
	if !parsed || !isObj {
		return "", false, parsed
	}
	if f.typ != "" {
		if t, ok := obj.str("type"); !ok || t != f.typ {
			return "", false, true
		}
	}
	val, ok = obj.str(f.key)
	return val, ok, true
}

// last is DR over a whole window: the value on the last line that has one.
func (f *drField) last(text []byte) (string, bool) {
	for i := len(text); i > 0; {
		a := bytes.LastIndexByte(text[:i], '\n')
		line := text[a+1 : i]
		i = a
		if v, _, ok := f.line(line); ok {
			return v, true
		}
		if a < 0 {
			break
		}
	}
	return "", false
}

// textField is sc / kR: a `"key":"` (or `"key": "`) anywhere in the text.
type textField struct{ pats [2][]byte }

func newTextField(key string) *textField {
	return &textField{pats: [2][]byte{[]byte(`"` + key + `":"`), []byte(`"` + key + `": "`)}}
}

var (
	scTimestamp   = newTextField("timestamp")
	scGitBranch   = newTextField("gitBranch")
	scCwd         = newTextField("cwd")
	scEntrypoint  = newTextField("entrypoint")
	scSessionKind = newTextField("sessionKind")
)

// patParentKey marks the line pF reads sessionKind from.
var patParentKey = []byte(`"parentUuid":`)

// textValueEnd returns the index of the quote that ends the value starting at
// i, skipping the byte after each backslash, or -1.
func textValueEnd(text []byte, i int) int {
	for i < len(text) {
		switch text[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i
		}
		i++
	}
	return -1
}

// first is sc: the value of the first occurrence of the unspaced pattern,
// if that value ends in text; else the same for the spaced pattern.
func (f *textField) first(text []byte) (string, bool) {
	for _, p := range f.pats {
		o := bytes.Index(text, p)
		if o < 0 {
			continue
		}
		s := o + len(p)
		if e := textValueEnd(text, s); e >= 0 {
			return textValue(text[s:e]), true
		}
	}
	return "", false
}

// lastOf is kR: of all occurrences of either pattern whose value ends in
// text (each pattern's search resuming after the value it last read), the
// value of the one that starts last.
func (f *textField) lastOf(text []byte) (string, bool) {
	best, val := -1, ""
	for _, p := range f.pats {
		for i := 0; i <= len(text); {
			a := bytes.Index(text[i:], p)
			if a < 0 {
				break
			}
			a += i
			l := a + len(p)
			c := textValueEnd(text, l)
			if c < 0 {
				break
			}
			if a > best {
				best, val = a, textValue(text[l:c])
			}
			i = c + 1
		}
	}
	return val, best >= 0
}

// textValue is fF: the text between the quotes, decoded as JSON when it
// has a backslash and decodes (JSON.parse('"'+raw+'"')), else as is.
func textValue(raw []byte) string {
	raw = nodeUTF8(raw)
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	s := scanner{data: q}
	if _, err := s.str(); err == nil && s.pos == len(q) {
		return unquote(raw)
	}
	return string(raw)
}

// Patterns of the SDK's first-prompt extractor (ps).
var (
	// pDe, /<command-name>(.*?)<\/command-name>/: '.' is any character but
	// a JavaScript line terminator.
	commandNameRe = regexp.MustCompile(`<command-name>([^\n\r\x{2028}\x{2029}]*?)</command-name>`)
	bashInputRe   = regexp.MustCompile(`(?s)<bash-input>(.*?)</bash-input>`)
	// dDe, /^(?:\s*<[a-z][\w-]*[\s>]|\[Request interrupted by user[^\]]*\])/,
	// with JavaScript's \s spelled out.
	notPromptRe = regexp.MustCompile(`^(?:` + jsSpaceClass + `*<[a-z][0-9A-Za-z_-]*[` + jsSpaceChars + `>]|\[Request interrupted by user[^\]]*\])`)
)

const (
	jsSpaceChars = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`
	jsSpaceClass = `[` + jsSpaceChars + `]`
)

// pluginPromptTail ends the text of a prompt a plugin submitted (sDe).
const pluginPromptTail = "\n\nThis is how Claude Code surfaces a prompt a plugin submits between turns \u2014 it starts this turn in the user's place. Address the message above."

// promptOf is ps: the prompt a listing shows for entry e, with ok false when
// e shows none. A <command-name> met on the way is remembered in
// *fallback (the first one wins). shown selects the "shown" form, which
// renders a plugin's prompt as "Prompt from the X plugin: ..."; the fork
// title uses it, listings use the stored form.
func promptOf(e jsObject, fallback *string, shown bool) (string, bool) {
	if t, ok := e.str("type"); !ok || t != "user" {
		return "", false
	}
	if e.isTrue("isMeta") || e.isTrue("isCompactSummary") {
		return "", false
	}
	msg, ok := e.get("message")
	if !ok || !jsTruthy(msg) {
		return "", false
	}
	var content []byte
	if msg[0] == '{' {
		if m, isObj, _ := jsParseObject(msg); isObj {
			content, _ = m.get("content")
		}
	}
	var texts []string
	transformed := false
	switch {
	case len(content) > 0 && content[0] == '"':
		s, _ := jsStringValue(content)
		if shown {
			if p, ok := pluginPromptShown(s, e); ok {
				s, transformed = p, true
			}
		}
		texts = append(texts, s)
	case len(content) > 0 && content[0] == '[':
		toolResult := false
		jsEachElement(content, func(el []byte) bool {
			if el[0] != '{' {
				return true // not an object (arrays have no type), or falsy
			}
			b, _, _ := jsParseObject(el)
			switch t, _ := b.str("type"); t {
			case "tool_result":
				toolResult = true
				return false
			case "text":
				if s, ok := b.str("text"); ok {
					texts = append(texts, s)
				}
			}
			return true
		})
		if toolResult {
			return "", false
		}
	}
	for _, l := range texts {
		c := jsTrim(strings.ReplaceAll(expandPasted(l), "\n", " "))
		if c == "" {
			continue
		}
		if !transformed {
			if m := commandNameRe.FindStringSubmatch(c); m != nil {
				if *fallback == "" {
					*fallback = m[1]
				}
				continue
			}
			if m := bashInputRe.FindStringSubmatch(c); m != nil {
				return "! " + jsTrim(m[1]), true
			}
		}
		if notPromptRe.MatchString(c) {
			continue
		}
		if jsLength(c) > 200 {
			c = jsTrim(jsCut(c, 200)) + "\u2026"
		}
		return c, true
	}
	return "", false
}

// pluginPromptShown is Y0: a prompt a plugin submitted, "The X plugin sent a
// message:\n" + pluginPrompt.text + pluginPromptTail, shown as "Prompt from
// the X plugin: " + pluginPrompt.text.
func pluginPromptShown(s string, e jsObject) (string, bool) {
	pp, ok := e.get("pluginPrompt")
	if !ok || pp[0] != '{' {
		return "", false
	}
	o, _, _ := jsParseObject(pp)
	text, ok := o.str("text")
	if !ok || text == "" {
		return "", false
	}
	nl := strings.IndexByte(s, '\n')
	head := s[:nl+1]
	const suffix = " plugin sent a message:\n"
	if jsLength(head) <= 28 || !strings.HasPrefix(head, "The ") || !strings.HasSuffix(head, suffix) {
		return "", false
	}
	if s != head+text+pluginPromptTail {
		return "", false
	}
	return "Prompt from the " + head[4:len(head)-len(suffix)] + " plugin: " + text, true
}

// expandPasted is mR: it replaces each well-formed
// <pasted_content id="xxxx">\n...\n</pasted_content id="xxxx"> block
// (and up to two newlines either side of it) by its body.
func expandPasted(e string) string {
	const open = `<pasted_content id="`
	if !strings.Contains(e, open) {
		return e
	}
	type chunk struct {
		s     string
		block bool
	}
	var t []chunk
	n, r := 0, 0
	for {
		o := jsIndexOf(e, open, r)
		if o < 0 {
			break
		}
		s := o + len(open)
		id := e[s:min(s+4, len(e))]
		if !isPasteID(id) || !strings.HasPrefix(e[min(s+4, len(e)):], "\">\n") {
			r = s
			continue
		}
		a := s + 4 + 3
		c := `</pasted_content id="` + id + `">`
		d := jsIndexOf(e, "\n"+c, a-1) + 1
		if d == 0 {
			break
		}
		p := o
		for f := 0; f < 2 && p > n && e[p-1] == '\n'; f++ {
			p--
		}
		if p > n {
			t = append(t, chunk{e[n:p], false})
		}
		n = d + len(c)
		for f := 0; f < 2 && n < len(e) && e[n] == '\n'; f++ {
			n++
		}
		body := ""
		if d-1 > a {
			body = e[a : d-1]
		}
		t = append(t, chunk{body, true})
		r = n
	}
	if n < len(e) {
		t = append(t, chunk{e[n:], false})
	}
	if len(t) == 1 && !t[0].block {
		return e
	}
	var b strings.Builder
	for _, c := range t {
		b.WriteString(c.s)
	}
	return b.String()
}

func isPasteID(id string) bool {
	if len(id) != 4 {
		return false
	}
	for i := 0; i < 4; i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// jsIndexOf is JavaScript's s.indexOf(sub, from).
func jsIndexOf(s, sub string, from int) int {
	if from < 0 {
		from = 0
	}
	if from > len(s) {
		return -1
	}
	i := strings.Index(s[from:], sub)
	if i < 0 {
		return -1
	}
	return from + i
}

// jsCut is ii: the longest prefix of s of at most n UTF-16 code units that
// does not split a surrogate pair.
func jsCut(s string, n int) string {
	units := 0
	for i, r := range s {
		u := utf16.RuneLen(r)
		if u < 0 {
			u = 1
		}
		if units+u > n {
			return s[:i]
		}
		units += u
	}
	return s
}

// Line filters of ch and mF, which look at a line's text before parsing it.
var (
	patUser        = [][]byte{[]byte(`"type":"user"`), []byte(`"type": "user"`)}
	patToolResult  = []byte(`"tool_result"`)
	patMetaTrue    = [][]byte{[]byte(`"isMeta":true`), []byte(`"isMeta": true`)}
	patCompactTrue = [][]byte{[]byte(`"isCompactSummary":true`), []byte(`"isCompactSummary": true`)}
	patImage       = [][]byte{[]byte(`"type":"image"`), []byte(`"type": "image"`)}
	patDocument    = [][]byte{[]byte(`"type":"document"`), []byte(`"type": "document"`)}
	patSidechain   = [][]byte{[]byte(`"isSidechain":true`), []byte(`"isSidechain": true`)}
)

func containsAnyOf(b []byte, pats [][]byte) bool {
	for _, p := range pats {
		if bytes.Contains(b, p) {
			return true
		}
	}
	return false
}

// promptScan is ch over a sequence of lines: the first prompt, else the
// first command name.
type promptScan struct {
	shown    bool
	fallback string
	prompt   string
	found    bool
}

func (p *promptScan) line(line []byte) {
	if p.found || !containsAnyOf(line, patUser) || bytes.Contains(line, patToolResult) ||
		containsAnyOf(line, patMetaTrue) || containsAnyOf(line, patCompactTrue) {
		return
	}
	e, isObj, ok := jsParseObject(line)
	if !ok || !isObj {
		return
	}
	if s, ok := promptOf(e, &p.fallback, p.shown); ok {
		p.prompt, p.found = s, true
	}
}

func (p *promptScan) result() string {
	if p.found {
		return p.prompt
	}
	return p.fallback
}

// mediaOf is one line of mF: "Image" or "Document" for a user line with an
// image or document block, without parsing it.
func mediaOf(line []byte) string {
	if !containsAnyOf(line, patUser) || bytes.Contains(line, patToolResult) || containsAnyOf(line, patMetaTrue) {
		return ""
	}
	if containsAnyOf(line, patImage) {
		return "Image"
	}
	if containsAnyOf(line, patDocument) {
		return "Document"
	}
	return ""
}

// eachTextLine calls fn with each '\n'-separated segment of text, as the
// SDK's forward loops split it (no empty segment after a final newline).
func eachTextLine(text []byte, fn func(line []byte) bool) {
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			fn(text)
			return
		}
		if !fn(text[:i]) {
			return
		}
		text = text[i+1:]
	}
}

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

// ParseTitleSidecar reads a custom-title.json sidecar as the SDK does
// ({"customTitle": string}, trimmed, control and format characters turned
// into spaces, cut to 200 code points, trimmed again); "" when it has none.
func ParseTitleSidecar(data []byte) string {
	var v map[string]json.RawMessage
	var title string
	if json.Unmarshal(data, &v) != nil || json.Unmarshal(v["customTitle"], &title) != nil || v["customTitle"][0] != '"' {
		return ""
	}
	t := controlRunRe.ReplaceAllString(jsTrim(title), " ")
	if r := []rune(t); len(r) > 200 {
		t = string(r[:200])
	}
	return jsTrim(t)
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

// forkTitle is the title forkSession derives for a fork when none is given
// (before " (fork)" is added): the tail's custom title if there is a
// custom-title line there (even an empty one), else the sidecar's, else the
// head's; then the AI title (tail, head), then the first prompt in its
// shown form.
func (s *Summary) forkTitle() string {
	p := &s.parts
	c := p.tailCT
	if !p.tailCTSet {
		c = orString(p.sidecar, p.headCT)
	}
	return orString(c, p.tailAI, p.headAI, p.shownPrompt)
}

// SummaryFromHeadTail is the SDK's lite reader itself: the Summary of a
// file whose first 64 KiB are head and last 64 KiB are tail. For a file of
// at most 64 KiB, pass the whole file as head and nil (or the same bytes) as
// tail, as the SDK does.
func SummaryFromHeadTail(head, tail []byte) Summary {
	if tail == nil {
		tail = head
	}
	var s Summary
	first := head
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		first = head[:i]
	}
	s.IsSidechain = containsAnyOf(first, patSidechain)
	p := &s.parts
	p.tailCT, p.tailCTSet = drCustomTitle.last(tail)
	p.headCT, _ = drCustomTitle.last(head)
	p.tailAI, _ = drAITitle.last(tail)
	p.headAI, _ = drAITitle.last(head)
	p.lastPrompt, _ = drLastPrompt.last(tail)
	p.summaryHint, _ = drSummary.last(tail)
	p.relocatedCwd, _ = drRelocated.last(tail)
	p.tag, _ = drTag.last(tail)
	stored, shown := promptScan{}, promptScan{shown: true}
	eachTextLine(head, func(line []byte) bool {
		stored.line(line)
		shown.line(line)
		if p.media == "" {
			p.media = mediaOf(line)
		}
		return true
	})
	p.firstPrompt, p.shownPrompt = stored.result(), shown.result()
	p.timestamp, p.timestampSet = scTimestamp.first(head)
	p.gitTail, _ = scGitBranch.lastOf(tail)
	p.gitHead, _ = scGitBranch.first(head)
	p.cwdHead, _ = scCwd.first(head)
	p.entryHead, p.entryHeadSet = scEntrypoint.first(head)
	p.entryTail, p.entryTailSet = scEntrypoint.lastOf(tail)
	kindText := head
	eachTextLine(head, func(line []byte) bool {
		if bytes.Contains(line, patParentKey) {
			kindText = line
			return false
		}
		return true
	})
	p.kind, _ = scSessionKind.first(kindText)
	s.resolve()
	return s
}

// summaryStream is what Add keeps between lines.
type summaryStream struct {
	size  int64 // bytes so far
	lines int

	// The head window's lookups.
	stored, shown                     promptScan
	ts, gitHd, cwdHd, entryHd, kindHd headText
	kindLine                          bool // the head's first line with a parentUuid has been seen

	// The tail lookups: for each, the last value seen and where the
	// record holding it starts; it is in the tail window when that is at
	// or after the window's start.
	tailCT, tailAI, tag, lastPrompt, summary, relocated tailValue
	git, entry                                          [2]lastTextScan
	gitBest, entryBest                                  tailValue

	// floor is the size the caller promised the transcript will reach
	// (ExpectAtLeast); skipped counts the lines it saved a search of.
	floor   int64
	skipped int

	// damaged are the lines, in the tail window or crossing its start,
	// that have a tail pattern but are not JSON (drField.lineDamaged): the
	// SDK reads the one the window starts in from the window's start.
	damaged []damagedLine
}

// tailKeys are the keys the tail window's lookups search for, as `"key":`
// (a DR field's pattern, the start of a kR one); tailKeyBit numbers them.
var tailKeys = [...]string{"customTitle", "aiTitle", "tag", "lastPrompt", "summary", "relocatedCwd", "gitBranch", "entrypoint"}

func tailKeyBit(key string) uint16 {
	for i, k := range tailKeys {
		if k == key {
			return 1 << i
		}
	}
	panic("transcript: " + key + " is not a tail key")
}

// tailKeysIn returns the tailKeyBits of the keys that occur in line as
// `"key":`: exactly the lines on which bytes.Contains would find the
// pattern, for the price of one pass over the line's colons instead of a
// search per key.
func tailKeysIn(line []byte) (keys uint16) {
	for i := 0; ; {
		j := bytes.IndexByte(line[i:], ':')
		if j < 0 {
			return keys
		}
		j += i
		i = j + 1
		if j == 0 || line[j-1] != '"' {
			continue
		}
		before := line[:j-1]
		for b, k := range tailKeys {
			n := len(k)
			if len(before) > n && before[len(before)-n-1] == '"' && string(before[len(before)-n:]) == k {
				keys |= 1 << b
				// For the kR keys, which of textField's two patterns.
				if k == "gitBranch" || k == "entrypoint" {
					after := line[j+1:]
					switch {
					case len(after) > 0 && after[0] == '"':
						keys |= textPatBit(k, 0)
					case len(after) > 1 && after[0] == ' ' && after[1] == '"':
						keys |= textPatBit(k, 1)
					}
				}
			}
		}
	}
}

// textPatBit is the bit tailKeysIn sets when a line has the kR key's i-th
// pattern (textField.pats: `"key":"`, `"key": "`); these bits follow the
// keys' own.
func textPatBit(key string, i int) uint16 {
	switch key {
	case "gitBranch":
		return 1 << (len(tailKeys) + i)
	case "entrypoint":
		return 1 << (len(tailKeys) + 2 + i)
	}
	panic("transcript: " + key + " is not a kR key")
}

// tailFields are the DR lookups of the tail window, in the order of
// tailValues.
var tailFields = [...]*drField{drCustomTitle, drAITitle, drTag, drLastPrompt, drSummary, drRelocated}

// tailValues returns the values of tailFields, in their order.
func (st *summaryStream) tailValues() [len(tailFields)]*tailValue {
	return [...]*tailValue{&st.tailCT, &st.tailAI, &st.tag, &st.lastPrompt, &st.summary, &st.relocated}
}

// damagedLine is a line that may read differently from inside: it spans
// [start, end) of the file, and tail is its last bytes (at most a window).
type damagedLine struct {
	start, end int64
	keys       uint16 // tailKeysIn of the whole line
	tail       []byte
}

type tailValue struct {
	val string
	at  int64
	ok  bool
}

// Add feeds the next line of the transcript, without its '\n', counting a
// '\n' after it.
func (s *Summary) Add(line []byte) { s.AddLine(line, true) }

// AddLine feeds the next line of the transcript, without its '\n'; newline
// says whether one follows it (false only for a torn last line, see
// LineScanner.HasNewline). The file's size, which decides where the tail
// window starts, is the bytes fed so far.
func (s *Summary) AddLine(line []byte, newline bool) {
	st := s.stream()
	start := st.size
	end := start + int64(len(line))
	window := int64(liteWindow)
	if start >= window && end+1 <= st.floor-window && !st.tailPending() {
		// Wholly between the head window and where the tail window will
		// start: nothing in it can be found by the lite reader.
		st.skipped++
		st.size = end
		if newline {
			st.size++
		}
		st.lines++
		s.settle()
		return
	}

	// The head window: whole lines, and the part of the one that crosses
	// its end.
	if start < window {
		vis := line
		if end > window {
			vis = line[:window-start]
		}
		if st.lines == 0 {
			s.IsSidechain = containsAnyOf(vis, patSidechain)
		}
		p := &s.parts
		if v, _, ok := drCustomTitle.line(vis); ok {
			p.headCT = v
		}
		if v, _, ok := drAITitle.line(vis); ok {
			p.headAI = v
		}
		st.stored.line(vis)
		st.shown.line(vis)
		p.firstPrompt, p.shownPrompt = st.stored.result(), st.shown.result()
		if p.media == "" {
			p.media = mediaOf(vis)
		}
		for _, h := range []*headText{&st.ts, &st.gitHd, &st.cwdHd, &st.entryHd, &st.kindHd} {
			h.feed(vis)
			if newline && end < window {
				h.feed(summaryNewline)
			}
		}
		p.timestamp, p.timestampSet = st.ts.result()
		p.gitHead, _ = st.gitHd.result()
		p.cwdHead, _ = st.cwdHd.result()
		p.entryHead, p.entryHeadSet = st.entryHd.result()
		switch {
		case st.kindLine:
		case bytes.Contains(vis, patParentKey):
			st.kindLine = true
			p.kind, _ = scSessionKind.first(vis)
		default:
			p.kind, _ = st.kindHd.result()
		}
	}

	// The tail window's lookups, for any line. One pass finds which of
	// their keys the line has at all; most lines have none.
	keys := tailKeysIn(line)
	damaged := false
	for i, f := range tailFields {
		if keys&tailKeyBit(f.key) == 0 {
			continue
		}
		v, at, ok, dmg := f.lineDamaged(line)
		if ok {
			*st.tailValues()[i] = tailValue{v, start + int64(at), true}
		}
		damaged = damaged || dmg
	}
	if damaged {
		// Kept while it can still be the line the tail window starts in:
		// its last window's worth of bytes is all the window can hold.
		keep := line[max(0, len(line)-liteWindow):]
		st.damaged = append(st.damaged, damagedLine{start: start, end: end, keys: keys, tail: bytes.Clone(keep)})
	}
	for _, t := range []struct {
		scans *[2]lastTextScan
		best  *tailValue
		key   string
	}{{&st.git, &st.gitBest, "gitBranch"}, {&st.entry, &st.entryBest, "entrypoint"}} {
		for i := range t.scans {
			k := &t.scans[i]
			// Without an occurrence on the line, only a value left open by
			// an earlier line can change anything.
			if k.pending || keys&textPatBit(t.key, i) != 0 {
				k.scan(line, start, t.best)
			}
			if newline && k.pending {
				k.scan(summaryNewline, end, t.best)
			}
		}
	}

	st.size = end
	if newline {
		st.size++
	}
	st.lines++
	s.settle()
}

// stream returns the state kept between lines, creating it on first use.
func (s *Summary) stream() *summaryStream {
	st := s.st
	if st == nil {
		st = &summaryStream{shown: promptScan{shown: true}}
		st.ts.field, st.gitHd.field, st.cwdHd.field = scTimestamp, scGitBranch, scCwd
		st.entryHd.field, st.kindHd.field = scEntrypoint, scSessionKind
		for i := range st.git {
			st.git[i].pat = scGitBranch.pats[i]
			st.entry[i].pat = scEntrypoint.pats[i]
		}
		s.st = st
	}
	return st
}

// ExpectAtLeast promises that the lines fed from now on will bring the
// transcript to at least n bytes (counted as AddLine counts them) before
// the summary is next relied on. A line that will then lie wholly before
// the tail window and after the head window is only counted, not searched:
// a reader that knows the file's size up front (a scan, a journal replay)
// pays for the two windows, not for the whole file.
//
// Skipping cannot change the result for lines that are JSON: a tail
// pattern's value then always ends on its own line. A malformed line can
// leave one open, which in a full scan swallows the text after it; no line
// is skipped while a value is open, but a skipped malformed line is not
// searched, so the value it would open is missed. The lite reader, which
// starts its search at the tail window, never sees that value either.
func (s *Summary) ExpectAtLeast(n int64) {
	st := s.stream()
	st.floor = max(st.floor, n)
}

// tailPending reports whether a tail pattern's value runs past the last
// line fed.
func (st *summaryStream) tailPending() bool {
	for i := range st.git {
		if st.git[i].pending || st.entry[i].pending {
			return true
		}
	}
	return false
}

// settle recomputes the fields after a line: the tail window moved.
func (s *Summary) settle() {
	st := s.st
	tailStart := max(0, st.size-int64(liteWindow))
	in := func(v tailValue) (string, bool) {
		if v.ok && v.at >= tailStart {
			return v.val, true
		}
		return "", false
	}
	var vals [len(tailFields)]struct {
		s  string
		ok bool
	}
	for i, v := range st.tailValues() {
		vals[i].s, vals[i].ok = in(*v)
	}
	if frag, end, keys, ok := st.fragment(tailStart); ok {
		// The window starts inside a damaged line: DR reads what the
		// window holds of it. A value from a later line still wins, and a
		// key the whole line lacks is not in its part either.
		for i, v := range st.tailValues() {
			if keys&tailKeyBit(tailFields[i].key) != 0 && (!v.ok || v.at < end) {
				vals[i].s, _, vals[i].ok = tailFields[i].line(frag)
			}
		}
	}
	p := &s.parts
	p.tailCT, p.tailCTSet = vals[0].s, vals[0].ok
	p.tailAI = vals[1].s
	p.tag = vals[2].s
	p.lastPrompt = vals[3].s
	p.summaryHint = vals[4].s
	p.relocatedCwd = vals[5].s
	p.gitTail, _ = in(st.gitBest)
	p.entryTail, p.entryTailSet = in(st.entryBest)
	s.resolve()
}

// fragment returns, when the tail window starting at tailStart starts
// inside a damaged line, the part of that line the window holds, where the
// line ends and which tail keys the whole line has. It first forgets the
// damaged lines that ended before the window.
//
// DR reads that part as a line of its own: its patterns, its parse, its
// appended record. The part may lack a key the whole line has (so no
// value), or parse as an object the whole line does not hold (another
// value), so settle evaluates it as it is rather than reasoning from the
// whole line's result.
func (st *summaryStream) fragment(tailStart int64) (frag []byte, end int64, keys uint16, ok bool) {
	i := 0
	for i < len(st.damaged) && st.damaged[i].end <= tailStart {
		i++
	}
	if i > 0 {
		st.damaged = append(st.damaged[:0], st.damaged[i:]...)
	}
	if len(st.damaged) == 0 || st.damaged[0].start >= tailStart {
		return nil, 0, 0, false
	}
	d := st.damaged[0]
	return d.tail[tailStart-(d.end-int64(len(d.tail))):], d.end, d.keys, true
}

var summaryNewline = []byte{'\n'}

// headText is sc over the head window as it grows, chunk by chunk (a
// pattern never spans chunks: they are lines and their newlines): per
// pattern, the first occurrence and its value as far as it has been read.
type headText struct {
	field *textField
	pat   [2]struct {
		found bool   // the first occurrence has been seen
		done  bool   // its value ended
		val   []byte // the value so far
		skip  bool   // the value so far ends with a backslash
		long  bool   // the value is longer than the window: it never ends in it
	}
}

func (h *headText) feed(chunk []byte) {
	for i := range h.pat {
		p := &h.pat[i]
		if p.done {
			continue
		}
		j := 0
		if !p.found {
			o := bytes.Index(chunk, h.field.pats[i])
			if o < 0 {
				continue
			}
			p.found = true
			j = o + len(h.field.pats[i])
		}
		from := j
		if p.skip && j < len(chunk) {
			p.skip = false
			j++
		}
		for j < len(chunk) && chunk[j] != '"' {
			if chunk[j] == '\\' {
				if j+1 == len(chunk) {
					p.skip = true
				}
				j += 2
				continue
			}
			j++
		}
		if j >= len(chunk) {
			if !p.long {
				p.val = append(p.val, chunk[from:]...)
				if len(p.val) > liteWindow {
					p.long, p.val = true, nil
				}
			}
			continue
		}
		p.val = append(p.val, chunk[from:j]...)
		p.done = true
	}
}

func (h *headText) result() (string, bool) {
	for _, p := range h.pat {
		if p.done {
			return textValue(p.val), true
		}
	}
	return "", false
}

// lastTextScan is one pattern of kR over the whole stream: it remembers the
// occurrence whose value has not ended yet (a value ends at the next
// unescaped quote, possibly on a later line).
type lastTextScan struct {
	pat     []byte
	pending bool
	occ     int64
	val     []byte
	tooLong bool // the pending value is longer than a window: it cannot matter
	skip    bool // the previous chunk ended with a backslash
}

func (k *lastTextScan) scan(b []byte, off int64, best *tailValue) {
	i := 0
	for i <= len(b) {
		if k.pending {
			j := i
			if k.skip && j < len(b) {
				k.skip = false
				j++
			}
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					if j+1 == len(b) {
						k.skip = true
					}
					j += 2
					continue
				}
				j++
			}
			if j >= len(b) {
				if !k.tooLong {
					k.val = append(k.val, b[i:]...)
					if len(k.val) > liteWindow {
						k.tooLong, k.val = true, nil
					}
				}
				return
			}
			if !k.tooLong && (!best.ok || k.occ > best.at) {
				k.val = append(k.val, b[i:j]...)
				*best = tailValue{textValue(k.val), k.occ, true}
			}
			k.pending, k.tooLong, k.val = false, false, k.val[:0]
			i = j + 1
			continue
		}
		a := bytes.Index(b[i:], k.pat)
		if a < 0 {
			return
		}
		a += i
		k.pending, k.occ, k.skip = true, off+int64(a), false
		i = a + len(k.pat)
	}
}

// jsDateParse is Date.parse for the ECMAScript date time string format:
// YYYY, YYYY-MM, YYYY-MM-DD (UTC), optionally followed by THH:mm,
// THH:mm:ss or THH:mm:ss.s+ and Z or ±HH:mm (local time without an offset);
// extended years (±YYYYYY) too. Milliseconds are truncated, out-of-range
// days roll over as in V8. Other strings give ok false.
func jsDateParse(s string) (ms int64, ok bool) {
	i := 0
	num := func(n int) (int, bool) {
		if i+n > len(s) {
			return 0, false
		}
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		i += n
		return v, true
	}
	var year int
	switch {
	case len(s) > 0 && (s[0] == '+' || s[0] == '-'):
		neg := s[0] == '-'
		i++
		y, ok := num(6)
		if !ok || (neg && y == 0) {
			return 0, false
		}
		year = y
		if neg {
			year = -y
		}
	default:
		y, ok := num(4)
		if !ok {
			return 0, false
		}
		year = y
	}
	month, day := 1, 1
	if i < len(s) && s[i] == '-' {
		i++
		m, ok := num(2)
		if !ok || m < 1 || m > 12 {
			return 0, false
		}
		month = m
		if i < len(s) && s[i] == '-' {
			i++
			d, ok := num(2)
			if !ok || d < 1 || d > 31 {
				return 0, false
			}
			day = d
		}
	}
	if i == len(s) {
		return time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC).UnixMilli(), true
	}
	if s[i] != 'T' && s[i] != 't' {
		return 0, false
	}
	i++
	hour, ok := num(2)
	if !ok || i >= len(s) || s[i] != ':' {
		return 0, false
	}
	i++
	minute, ok := num(2)
	if !ok {
		return 0, false
	}
	sec, milli := 0, 0
	if i < len(s) && s[i] == ':' {
		i++
		if sec, ok = num(2); !ok {
			return 0, false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits := 0
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				if digits < 3 {
					milli = milli*10 + int(s[i]-'0')
				}
				digits++
				i++
			}
			if digits == 0 {
				return 0, false
			}
			for ; digits < 3; digits++ {
				milli *= 10
			}
		}
	}
	if minute > 59 || sec > 59 || hour > 24 || (hour == 24 && (minute != 0 || sec != 0 || milli != 0)) {
		return 0, false
	}
	loc := time.Local
	if i < len(s) {
		switch s[i] {
		case 'Z', 'z':
			i++
			loc = time.UTC
		case '+', '-':
			sign := 1
			if s[i] == '-' {
				sign = -1
			}
			i++
			oh, ok := num(2)
			if !ok {
				return 0, false
			}
			if i < len(s) && s[i] == ':' {
				i++
			}
			om, ok := num(2)
			if !ok || oh > 23 || om > 59 {
				return 0, false
			}
			loc = time.FixedZone("", sign*(oh*3600+om*60))
		default:
			return 0, false
		}
	}
	if i != len(s) {
		return 0, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, milli*int(time.Millisecond), loc)
	return t.UnixMilli(), true
}
