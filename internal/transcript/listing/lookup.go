package listing

import (
	"bytes"
	"strings"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// The lite reader's text lookups: DR (the last line of a window with a
// record holding a key, drField), sc and kR (the first and the last
// `"key":"` anywhere in a window, textField), which Summary runs over the
// head and tail windows.

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
		return val, rawjson.SkipWS(line, 0), ok, false
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
	obj, isObj, parsed := rawjson.ParseObject(text)
	if !parsed || !isObj {
		return "", false, parsed
	}
	if f.typ != "" {
		if t, ok := obj.Str("type"); !ok || t != f.typ {
			return "", false, true
		}
	}
	val, ok = obj.Str(f.key)
	return val, ok, true
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

// textValue is fF: the text between the quotes, decoded as JSON when it
// has a backslash and decodes (JSON.parse('"'+raw+'"')), else as is.
func textValue(raw []byte) string {
	raw = rawjson.NodeUTF8(raw)
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	if rawjson.IsStringBody(raw) {
		return rawjson.Unquote(raw)
	}
	return string(raw)
}
