package torture

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// corpus is a long run of JSON string content (without quotes) made of
// words separated by single spaces. A space is never part of an escape or
// of a multi-byte character, so any slice cut at spaces is valid string
// content; entries take their text from it instead of drawing every byte.
type corpus struct{ text string }

// words are the atoms of the corpus: plain words, JSON escapes (quotes,
// backslashes, newlines, tabs, \u escapes) and multi-byte UTF-8, as real
// tool outputs and code carry them.
var words = []string{
	"the", "file", "func", "return", "err", "nil", "if", "for", "range", "import",
	"package", "main", "go", "test", "build", "PASS", "FAIL", "ok", "error:", "warning:",
	"/usr/local/bin", "src/main.go:42:7", "{", "}", "[]byte", "map[string]int", "x := 1;", "==", "&&",
	`\"quoted\"`, `\\path\\to`, `\n`, `\n\n`, `\t`, `\r\n`, `\u00e9t\u00e9`, `\/`, `\u2603`,
	"é", "ñandú", "日本語のテキスト", "→", "🙂", "Ωmega", "naïve", "straße", "—", "«»",
	"0", "12345", "3.14159", "-1e9", "true", "false", "null", "<tag>", "</tag>", "&amp;",
}

func newCorpus(rng *rand.Rand, size int) *corpus {
	var b strings.Builder
	b.Grow(size + 64)
	b.WriteByte(' ')
	for b.Len() < size {
		// Zipf-like: the first words are the most common.
		i := rng.IntN(len(words))
		if rng.IntN(3) > 0 {
			i = rng.IntN(1 + len(words)/4)
		}
		b.WriteString(words[i])
		b.WriteByte(' ')
	}
	return &corpus{text: b.String()}
}

// slice returns about n bytes of content starting near off (both cut at
// spaces, so the result is valid JSON string content).
func (c *corpus) slice(off, n int) string {
	if n <= 0 {
		return ""
	}
	t := c.text
	if off+n >= len(t) {
		off = len(t) - n - 1
		if off < 0 {
			off = 0
		}
	}
	start := off + strings.IndexByte(t[off:], ' ') + 1
	end := start + n
	if end >= len(t) {
		end = len(t) - 1
	}
	if i := strings.IndexByte(t[end:], ' '); i >= 0 {
		end += i
	} else {
		end = len(t)
	}
	if end < start {
		return ""
	}
	return t[start:end]
}

// entrySize draws an entry's target size: mostly small, with a long tail
// up to max, as real transcripts are (prompts and short replies, then
// tool results of a few KiB, sometimes a file or a log of hundreds of
// KiB).
func entrySize(rng *rand.Rand, max int) int {
	logUniform := func(lo, hi int) int {
		if hi > max {
			hi = max
		}
		if lo >= hi {
			return hi
		}
		f := float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64())
		return int(f)
	}
	switch p := rng.IntN(1000); {
	case p < 550:
		return logUniform(1, 300)
	case p < 800:
		return logUniform(300, 4<<10)
	case p < 930:
		return logUniform(4<<10, 32<<10)
	case p < 980:
		return logUniform(32<<10, 256<<10)
	default:
		return logUniform(256<<10, max+1)
	}
}

// batchSize draws how many entries one Append carries (1-5).
func batchSize(rng *rand.Rand) int {
	switch p := rng.IntN(100); {
	case p < 45:
		return 1
	case p < 65:
		return 2
	case p < 80:
		return 3
	case p < 90:
		return 4
	default:
		return 5
	}
}

// minEntry is about the smallest line entryGen produces.
const minEntry = 160

// entryGen builds one client's entries.
type entryGen struct {
	rng    *rand.Rand
	corpus *corpus
	max    int
	parent string // the previous uuid this client wrote, for parentUuid
}

// entry builds one transcript-like entry carrying key in its "tk" field,
// about size bytes long (never over g.max). withUUID says whether it has
// a uuid (returned, or ""). A few entries are sent pretty-printed, with
// newlines between tokens: sessiond must store them as one line.
func (g *entryGen) entry(key, sid, cwd string, size int, withUUID bool) ([]byte, string) {
	pretty := g.rng.IntN(50) == 0
	var b jsonBuilder
	b.pretty = pretty
	b.open()
	id := ""
	kind := g.rng.IntN(4)
	if !withUUID {
		kind = 4 + g.rng.IntN(2)
	}
	g.head(&b, kind, key, sid, cwd)
	if withUUID {
		u, _ := uuid.NewRandomFromReader(rngReader{g.rng})
		id = u.String()
	}
	// What the text may take so that the whole line is about size bytes.
	room := size - (b.len() + 200)
	if len(id) > 0 {
		room -= 50
	}
	if room+b.len()+250 > g.max {
		room = g.max - b.len() - 250
	}
	text := g.corpus.slice(g.rng.IntN(len(g.corpus.text)), room)
	g.body(&b, kind, text)
	if id != "" {
		b.str("uuid", id)
		g.parent = id
	}
	b.str("timestamp", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	b.close()
	return b.buf, id
}

// Kinds of entry: 0 a user prompt, 1 an assistant reply, 2 a tool result
// (these three chain by uuid), 4 a progress line; any other a file
// history snapshot. 4 and above have no uuid.

// head writes the fields an entry of kind has before its text.
func (g *entryGen) head(b *jsonBuilder, kind int, key, sid, cwd string) {
	switch kind {
	case 0, 1, 2: // user prompt, assistant reply, tool result
		if g.parent == "" {
			b.raw("parentUuid", "null")
		} else {
			b.str("parentUuid", g.parent)
		}
		b.raw("isSidechain", "false")
		b.str("userType", "external")
		b.str("cwd", cwd)
		b.str("sessionId", sid)
		b.str("version", "2.1.0")
		typ := "user"
		if kind == 1 {
			typ = "assistant"
		}
		b.str("type", typ)
		b.str("tk", key)
	case 4: // progress line without uuid
		b.str("type", "progress")
		b.str("tk", key)
		b.str("sessionId", sid)
	default: // system/file-history line without uuid
		b.str("type", "file-history-snapshot")
		b.str("tk", key)
		b.str("messageId", "msg_"+strconv.FormatUint(g.rng.Uint64(), 36))
	}
}

// body writes the object of an entry of kind that carries its text.
func (g *entryGen) body(b *jsonBuilder, kind int, text string) {
	switch kind {
	case 0:
		b.object("message")
		b.str("role", "user")
		b.str("content", text)
		b.close()
	case 1:
		b.object("message")
		b.str("id", "msg_"+strconv.FormatUint(g.rng.Uint64(), 36))
		b.str("role", "assistant")
		b.str("model", "claude-torture")
		b.array("content")
		b.elemObject()
		b.str("type", "text")
		b.str("text", text)
		b.close()
		b.closeArray()
		b.object("usage")
		b.raw("input_tokens", strconv.Itoa(g.rng.IntN(100000)))
		b.raw("output_tokens", strconv.Itoa(g.rng.IntN(4000)))
		b.close()
		b.close()
	case 2:
		b.object("message")
		b.str("role", "user")
		b.array("content")
		b.elemObject()
		b.str("tool_use_id", "toolu_"+strconv.FormatUint(g.rng.Uint64(), 36))
		b.str("type", "tool_result")
		b.str("content", text)
		b.raw("is_error", "false")
		b.close()
		b.closeArray()
		b.close()
	case 4:
		b.object("data")
		b.str("type", "bash_progress")
		b.str("output", text)
		b.close()
	default:
		b.object("snapshot")
		b.str("note", text)
		b.raw("trackedFileBackups", "{}")
		b.close()
	}
}

// jsonBuilder writes a JSON object field by field, compact or (pretty)
// with newlines and spaces between tokens. Values given to str must be
// valid string content already (the corpus, ids, keys).
type jsonBuilder struct {
	buf    []byte
	pretty bool
	first  []bool // per open container: nothing written in it yet
}

func (b *jsonBuilder) len() int { return len(b.buf) }

func (b *jsonBuilder) sep() {
	n := len(b.first) - 1
	if !b.first[n] {
		b.buf = append(b.buf, ',')
	}
	b.first[n] = false
	if b.pretty {
		b.buf = append(b.buf, "\n"...)
		for i := 0; i < len(b.first); i++ {
			b.buf = append(b.buf, "  "...)
		}
	}
}

func (b *jsonBuilder) key(k string) {
	b.sep()
	b.buf = append(b.buf, '"')
	b.buf = append(b.buf, k...)
	b.buf = append(b.buf, '"', ':')
	if b.pretty {
		b.buf = append(b.buf, ' ')
	}
}

func (b *jsonBuilder) open() {
	b.buf = append(b.buf, '{')
	b.first = append(b.first, true)
}

func (b *jsonBuilder) str(k, v string) {
	b.key(k)
	b.buf = append(b.buf, '"')
	b.buf = append(b.buf, v...)
	b.buf = append(b.buf, '"')
}

func (b *jsonBuilder) raw(k, v string) {
	b.key(k)
	b.buf = append(b.buf, v...)
}

func (b *jsonBuilder) object(k string) {
	b.key(k)
	b.open()
}

func (b *jsonBuilder) array(k string) {
	b.key(k)
	b.buf = append(b.buf, '[')
	b.first = append(b.first, true)
}

func (b *jsonBuilder) elemObject() {
	b.sep()
	b.open()
}

func (b *jsonBuilder) end(c byte) {
	b.first = b.first[:len(b.first)-1]
	if b.pretty {
		b.buf = append(b.buf, '\n', ' ')
	}
	b.buf = append(b.buf, c)
}

func (b *jsonBuilder) close()      { b.end('}') }
func (b *jsonBuilder) closeArray() { b.end(']') }
