package damage

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// ClassifyLine says what is wrong with one transcript line (without its
// '\n'): kind is "" for a valid entry (exactly what Normalize accepts) and
// otherwise one of the Kind constants; detail says where and what, for
// people.
//
// Only what the line alone shows is judged: KindTorn here means the line is
// a JSON object cut short; that a whole last line lacks its '\n' is for
// Check to say. When a line has several kinds of damage, the one repair
// deals with first wins: NUL bytes, then the line's structure (torn,
// spliced, malformed), then its encoding (invalid UTF-8, lone surrogates,
// raw control characters).
func ClassifyLine(line []byte) (kind, detail string) {
	v := classifyLine(line)
	return v.kind, v.detail
}

// fixKind says what repair does with a line of some verdict.
type fixKind uint8

const (
	fixNone     fixKind = iota
	fixDrop             // nothing to recover
	fixStripNUL         // remove the NUL bytes, then look again
	fixBOM              // remove a leading byte order mark
	fixSplit            // keep each whole record, drop the rest
	fixReplace          // replace invalid UTF-8 and lone surrogates with U+FFFD
	fixEscape           // escape raw control characters
)

// lineVerdict is ClassifyLine's answer with what repair will do about it.
type lineVerdict struct {
	kind, detail string
	fix          fixKind
}

// classifyLine is ClassifyLine with what repair will do.
func classifyLine(line []byte) lineVerdict {
	if bytes.IndexByte(line, 0) >= 0 {
		return lineVerdict{KindNUL, nulDetail(line), fixStripNUL}
	}
	s, e := rawjson.TrimWS(line)
	switch {
	case s == e:
		if len(line) == 0 {
			return lineVerdict{KindMalformed, "the line is empty", fixDrop}
		}
		return lineVerdict{KindMalformed, fmt.Sprintf("the line is only whitespace (%d bytes)", len(line)), fixDrop}
	case bytes.HasPrefix(line[s:e], rawjson.BOM):
		return lineVerdict{KindMalformed, fmt.Sprintf("the line starts with a UTF-8 byte order mark (EF BB BF at byte %d), which JSON readers refuse", s), fixBOM}
	}
	if line[s] == '{' {
		if end, _, err := rawjson.ParseValue(line[:e], s, true); err == nil && end == e {
			return classifyObject(line, s)
		}
	} else if end, _, err := rawjson.ParseValue(line[:e], s, true); err == nil && end == e {
		return lineVerdict{KindMalformed, fmt.Sprintf("the line is %s, not a JSON object", rawjson.KindName(line[s])), fixDrop}
	}
	return classifySegments(line, splitRecords(line[:e], s))
}

// classifyObject judges a line that is one JSON object as far as its
// grammar goes: what remains is its encoding and its "uuid".
func classifyObject(line []byte, start int) lineVerdict {
	if st := fixEncoding(line, false).stats; st.any() {
		switch {
		case st.badUTF8 > 0:
			return lineVerdict{KindInvalidUTF8, fmt.Sprintf("%d byte(s) of invalid UTF-8, the first at byte %d (0x%02x)%s", st.badUTF8, st.firstUTF8, line[st.firstUTF8], st.also(KindInvalidUTF8)), fixReplace}
		case st.lone > 0:
			return lineVerdict{KindLoneSurrogate, fmt.Sprintf("%d lone UTF-16 surrogate escape(s), the first %s at byte %d%s", st.lone, line[st.firstLone:st.firstLone+6], st.firstLone, st.also(KindLoneSurrogate)), fixReplace}
		default:
			return lineVerdict{KindMalformed, fmt.Sprintf("%d raw control character(s) inside strings, the first 0x%02x at byte %d; JSON requires them escaped", st.ctrl, line[st.firstCtrl], st.firstCtrl), fixEscape}
		}
	}
	if bad := uuidProblem(line, start); bad != "" {
		return lineVerdict{KindMalformed, bad, fixDrop}
	}
	return lineVerdict{}
}

// uuidProblem explains why the object at line[start] has an unacceptable
// top-level "uuid" (each one must be a string or null, as Normalize
// demands), or returns "".
func uuidProblem(line []byte, start int) string {
	bad := ""
	rawjson.EachMember(line, start, func(m rawjson.Member) bool {
		if c := line[m.Val.Start]; c != '"' && c != 'n' && rawjson.KeyIs(line, m.Key, "uuid") {
			bad = fmt.Sprintf(`the top-level "uuid" at byte %d is %s; it must be a string`, m.Val.Start, rawjson.KindName(c))
			return false
		}
		return true
	})
	return bad
}

// classifySegments judges a line that is not one JSON value from the
// pieces splitRecords cut it into.
func classifySegments(line []byte, segs []lineSegment) lineVerdict {
	whole, records := 0, 0
	for _, sg := range segs {
		if sg.whole {
			whole++
		}
		if sg.whole || sg.torn {
			records++
		}
	}
	switch {
	case whole > 0 && records > 1:
		return lineVerdict{KindSpliced, "the line holds " + describeSegments(segs), fixSplit}
	case whole > 0:
		return lineVerdict{KindMalformed, "the line holds " + describeSegments(segs), fixSplit}
	case len(segs) == 1 && segs[0].torn:
		return lineVerdict{KindTorn, fmt.Sprintf("a JSON object cut short after %d bytes", segs[0].End-segs[0].Start), fixDrop}
	}
	s, e := rawjson.TrimWS(line)
	_, _, err := rawjson.ParseValue(line[:e], s, true)
	switch {
	case err == nil: // a value followed by something else
		return lineVerdict{KindMalformed, "the line holds " + describeSegments(segs), fixDrop}
	case err.EOF:
		return lineVerdict{KindMalformed, fmt.Sprintf("the line is not a JSON object: it ends where more was expected, after %d bytes", e), fixDrop}
	}
	return lineVerdict{KindMalformed, fmt.Sprintf("the line is not JSON: unexpected %s at byte %d", rawjson.DescribeAt(line, err.Off), err.Off), fixDrop}
}

func describeSegments(segs []lineSegment) string {
	parts := make([]string, len(segs))
	for i, sg := range segs {
		what := "garbage"
		switch {
		case sg.whole:
			what = "a whole record"
		case sg.torn:
			what = "a record cut short"
		}
		parts[i] = fmt.Sprintf("%s (bytes %d-%d)", what, sg.Start, sg.End-1)
	}
	return strings.Join(parts, ", then ")
}

func nulDetail(line []byte) string {
	n, runs, first := 0, 0, -1
	for i, c := range line {
		if c == 0 {
			n++
			if i == 0 || line[i-1] != 0 {
				runs++
			}
			if first < 0 {
				first = i
			}
		}
	}
	if n == len(line) {
		return fmt.Sprintf("the line is %d NUL bytes (a block of zeros, as a crash leaves)", n)
	}
	return fmt.Sprintf("%d NUL byte(s) in %d run(s), the first at byte %d", n, runs, first)
}

// lineSegment is one piece of a damaged line: a whole JSON object, a JSON
// object cut short (torn), or neither (garbage).
type lineSegment struct {
	rawjson.Span
	whole bool
	torn  bool
}

// splitRecords cuts data, which is not one JSON object, into the records it
// holds, starting at pos (not whitespace). Two writers that do not take
// turns leave lines such as {A}{B} (A lacked its newline) or {A-cut{B}
// (A's writer was interrupted and B's record landed in the middle; A's rest
// follows on the next line).
//
// After a whole object, the next record starts right away. After damage,
// the next record is the next `{"` at which a whole object that looks like
// a transcript record (see looksLikeEntry) begins: an inner object of the
// damaged record (a content block, say) must not be taken for one. A
// search that fails costs at most the length of the objects it tries, and
// the total is capped, so a hostile line stays linear.
func splitRecords(data []byte, pos int) []lineSegment {
	var segs []lineSegment
	// Real lines nest about ten deep, so the objects a search tries add
	// up to a few times the line; a hostile one stops at the budget.
	budget := 16*len(data) + 1<<20
	for pos < len(data) {
		if data[pos] == '{' {
			if end, _, err := rawjson.ParseValue(data, pos, true); err == nil {
				segs = append(segs, lineSegment{Span: rawjson.Span{Start: pos, End: end}, whole: true})
				pos = rawjson.SkipWS(data, end)
				continue
			}
		}
		next := nextRecord(data, pos+1, &budget)
		sg := lineSegment{Span: rawjson.Span{Start: pos, End: next}}
		if data[pos] == '{' {
			_, _, err := rawjson.ParseValue(data[:next], pos, true)
			sg.torn = err != nil && err.EOF
		}
		// Whitespace before the next record stays in the segment: in a
		// record cut inside a string it is content the join needs.
		segs = append(segs, sg)
		pos = next
	}
	return segs
}

var recordStart = []byte(`{"`)

// nextRecord returns the offset of the first `{"` at or after from where a
// whole transcript record starts, or len(data). The record must be followed
// by the end of the line or another record: an object nested in the
// damaged record is followed by more of it.
func nextRecord(data []byte, from int, budget *int) int {
	for from < len(data) && *budget > 0 {
		k := bytes.Index(data[from:], recordStart)
		if k < 0 {
			break
		}
		q := from + k
		end, _, err := rawjson.ParseValue(data, q, true)
		if err != nil {
			*budget -= err.Off - q + 1
		} else {
			*budget -= end - q
			if next := rawjson.SkipWS(data, end); (next == len(data) || data[next] == '{') && looksLikeEntry(data[q:end]) {
				return q
			}
		}
		from = q + 1
	}
	return len(data)
}

// metaTypes are the "type"s of the metadata records the CLI and the SDKs
// write (doc: "Lines"); they have no chain links.
var metaTypes = map[string]bool{
	"summary": true, "custom-title": true, "ai-title": true, "last-prompt": true, "tag": true,
	"content-replacement": true, "relocated": true, "file-history-snapshot": true,
	"queue-operation": true, "permission-mode": true, "agent-name": true,
}

// looksLikeEntry tells a transcript record from the objects nested in one:
// content blocks, tool results, and the whole messages that progress
// entries carry in data.message, which have a type and a uuid. A chain
// entry always has a parentUuid (null at a root) where nested messages
// have none; a metadata record has its known type; a record of another
// type must at least name its session or parent.
func looksLikeEntry(obj []byte) bool {
	typ, parent, session := "", false, false
	rawjson.EachMember(obj, 0, func(m rawjson.Member) bool {
		switch {
		case rawjson.KeyIs(obj, m.Key, "type"):
			typ, _ = rawjson.StringAt(obj, m.Val)
		case rawjson.KeyIs(obj, m.Key, "parentUuid"):
			parent = true
		case rawjson.KeyIs(obj, m.Key, "sessionId"):
			session = true
		}
		return true
	})
	switch {
	case typ == "":
		return false
	case transcript.ChainTypeOf(typ) != transcript.TypeOther:
		return parent
	case metaTypes[typ]:
		return true
	}
	return parent || session
}

// encodingStats counts the encoding damage fixEncoding finds in a line
// whose grammar is otherwise valid, with the offset of the first of each.
type encodingStats struct {
	badUTF8, lone, ctrl             int
	firstUTF8, firstLone, firstCtrl int
}

func (st encodingStats) any() bool { return st.badUTF8+st.lone+st.ctrl > 0 }

// also lists the kinds of damage other than the one named, for a detail.
func (st encodingStats) also(primary string) string {
	var more []string
	if st.lone > 0 && primary != KindLoneSurrogate {
		more = append(more, fmt.Sprintf("%d lone surrogate escape(s)", st.lone))
	}
	if st.ctrl > 0 {
		more = append(more, fmt.Sprintf("%d raw control character(s)", st.ctrl))
	}
	if len(more) == 0 {
		return ""
	}
	return "; also " + strings.Join(more, " and ")
}

type encodingFix struct {
	out   []byte // the fixed line, nil when nothing needed fixing or !apply
	stats encodingStats
}

// escapeControl returns the JSON escape of a control character, short
// where JSON has one, as JSON.stringify writes it.
func escapeControl(c byte) []byte {
	switch c {
	case '\b':
		return []byte(`\b`)
	case '\t':
		return []byte(`\t`)
	case '\n':
		return []byte(`\n`)
	case '\f':
		return []byte(`\f`)
	case '\r':
		return []byte(`\r`)
	}
	return []byte{'\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF]}
}

var (
	replacementUTF8   = []byte("\uFFFD")
	replacementEscape = []byte(`\ufffd`)
)

// fixEncoding finds, and with apply replaces, what makes a grammatical
// line unacceptable to the API: invalid UTF-8 bytes become U+FFFD (one per
// byte, as Go's decoders count them), lone surrogate escapes become
// \ufffd, and raw control characters inside strings are escaped. line must
// be valid JSON text as ParseValue(allowCtrl) accepts, so strings are found
// by their quotes.
func fixEncoding(line []byte, apply bool) encodingFix {
	var f encodingFix
	st := &f.stats
	copied := 0 // line[:copied] is in f.out, when fixing
	fix := func(i, n int, repl []byte) {
		if !apply {
			return
		}
		if f.out == nil {
			f.out = make([]byte, 0, len(line)+16)
		}
		f.out = append(f.out, line[copied:i]...)
		f.out = append(f.out, repl...)
		copied = i + n
	}
	inString := false
	for i := 0; i < len(line); {
		if !inString {
			k := bytes.IndexByte(line[i:], '"')
			if k < 0 {
				break
			}
			i += k + 1
			inString = true
			continue
		}
		if i = rawjson.SkipPlain(line, i); i >= len(line) {
			break
		}
		switch c := line[i]; {
		case c == '"':
			inString = false
			i++
		case c == '\\':
			if line[i+1] != 'u' {
				i += 2
				continue
			}
			r, _ := rawjson.Hex4(line, i+2)
			if !utf16.IsSurrogate(r) {
				i += 6
				continue
			}
			if r < 0xDC00 && i+11 < len(line) && line[i+6] == '\\' && line[i+7] == 'u' {
				if r2, ok := rawjson.Hex4(line, i+8); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
					i += 12
					continue
				}
			}
			if st.lone == 0 {
				st.firstLone = i
			}
			st.lone++
			fix(i, 6, replacementEscape)
			i += 6
		case c < 0x20:
			if st.ctrl == 0 {
				st.firstCtrl = i
			}
			st.ctrl++
			fix(i, 1, escapeControl(c))
			i++
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(line[i:])
			if r == utf8.RuneError && n == 1 {
				if st.badUTF8 == 0 {
					st.firstUTF8 = i
				}
				st.badUTF8++
				fix(i, 1, replacementUTF8)
			}
			i += n
		}
	}
	if f.out != nil {
		f.out = append(f.out, line[copied:]...)
	}
	return f
}

const hexDigits = "0123456789abcdef"
