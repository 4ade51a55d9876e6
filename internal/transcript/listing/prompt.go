package listing

import (
	"bytes"
	"regexp"
	"strings"
	"unicode/utf16"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// The first prompt a listing shows (the SDK's ps over the head window, ch)
// and the media fallback ("Image", "Document": mF), with the JavaScript
// string semantics they depend on.

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
func promptOf(e rawjson.Object, fallback *string, shown bool) (string, bool) {
	if t, ok := e.Str("type"); !ok || t != "user" {
		return "", false
	}
	if e.IsTrue("isMeta") || e.IsTrue("isCompactSummary") {
		return "", false
	}
	msg, ok := e.Get("message")
	if !ok || !rawjson.Truthy(msg) {
		return "", false
	}
	var content []byte
	if msg[0] == '{' {
		if m, isObj, _ := rawjson.ParseObject(msg); isObj {
			content, _ = m.Get("content")
		}
	}
	var texts []string
	transformed := false
	switch {
	case len(content) > 0 && content[0] == '"':
		s, _ := rawjson.StringValue(content)
		if shown {
			if p, ok := pluginPromptShown(s, e); ok {
				s, transformed = p, true
			}
		}
		texts = append(texts, s)
	case len(content) > 0 && content[0] == '[':
		toolResult := false
		rawjson.EachValue(content, func(el []byte) bool {
			if el[0] != '{' {
				return true // not an object (arrays have no type), or falsy
			}
			b, _, _ := rawjson.ParseObject(el)
			switch t, _ := b.Str("type"); t {
			case "tool_result":
				toolResult = true
				return false
			case "text":
				if s, ok := b.Str("text"); ok {
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
		c := rawjson.JSTrim(strings.ReplaceAll(expandPasted(l), "\n", " "))
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
				return "! " + rawjson.JSTrim(m[1]), true
			}
		}
		if notPromptRe.MatchString(c) {
			continue
		}
		if rawjson.JSLength(c) > 200 {
			c = rawjson.JSTrim(jsCut(c, 200)) + "\u2026"
		}
		return c, true
	}
	return "", false
}

// pluginPromptShown is Y0: a prompt a plugin submitted, "The X plugin sent a
// message:\n" + pluginPrompt.text + pluginPromptTail, shown as "Prompt from
// the X plugin: " + pluginPrompt.text.
func pluginPromptShown(s string, e rawjson.Object) (string, bool) {
	pp, ok := e.Get("pluginPrompt")
	if !ok || pp[0] != '{' {
		return "", false
	}
	o, _, _ := rawjson.ParseObject(pp)
	text, ok := o.Str("text")
	if !ok || text == "" {
		return "", false
	}
	nl := strings.IndexByte(s, '\n')
	head := s[:nl+1]
	const suffix = " plugin sent a message:\n"
	if rawjson.JSLength(head) <= 28 || !strings.HasPrefix(head, "The ") || !strings.HasSuffix(head, suffix) {
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
	e, isObj, ok := rawjson.ParseObject(line)
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
