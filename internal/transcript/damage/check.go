package damage

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Problem kinds. The strings are stable: they go over the wire and into
// `sessionctl check --json`.
const (
	KindMalformed       = "malformed"           // not a JSON object, and no other kind fits
	KindTorn            = "torn"                // a record cut short, or a last line without its newline
	KindNUL             = "nul_bytes"           // raw NUL bytes: runs inside a line, or a whole block of them after a crash
	KindSpliced         = "spliced"             // two or more records on one line, e.g. {...}{...}, or a torn record followed by a whole one
	KindInvalidUTF8     = "invalid_utf8"        // bytes that are not UTF-8
	KindLoneSurrogate   = "lone_surrogate"      // an escaped \udXXX that is not half of a pair
	KindDuplicateUUID   = "duplicate_uuid"      // a uuid already used by an earlier line
	KindSessionMismatch = "session_id_mismatch" // sessionId differs from the file's session id
	KindDanglingParent  = "dangling_parent"     // parentUuid names no entry in the file
	KindCycle           = "cycle"               // parentUuid links that come round
	KindMultipleRoots   = "multiple_roots"      // a root (parentUuid null) that nothing explains, after the first
	KindOrphanToolUse   = "orphan_tool_use"     // a tool_use with no tool_result in the next user turn
	KindStrayToolResult = "stray_tool_result"   // a tool_result whose tool_use is not in the assistant turn before it
	// KindAcknowledgedMissing is not found by Check, which sees the file
	// alone: sessiond reports it when the file lacks entries it had
	// acknowledged and compacted there (another program rewrote it
	// without them); repair puts back those its log still holds.
	KindAcknowledgedMissing = "acknowledged_missing"
)

// Repairable reports whether Repair fixes problems of the kind. Two kinds
// are not damage to the file but questions only a person can answer, so
// Repair leaves them:
//   - KindMultipleRoots: the writer wrote parentUuid null on purpose;
//     linking the root to the entry before it would splice two
//     conversations into one, changing what readers show.
//   - KindSessionMismatch: the entry belongs to another session (or was
//     copied from one); rewriting its sessionId would hide where it came
//     from. Move it to its own session, or fork.
func Repairable(kind string) bool {
	return kind != KindMultipleRoots && kind != KindSessionMismatch
}

// Problem is one thing wrong with a transcript.
type Problem struct {
	Line    int64    `json:"line"`          // 1-based line number
	Offset  int64    `json:"offset"`        // byte offset of the line
	Kind    string   `json:"kind"`          // one of the Kind constants
	Message string   `json:"message"`       // a sentence a user can act on
	IDs     []string `json:"ids,omitempty"` // uuids and tool ids involved
}

// Report is what Check found.
type Report struct {
	Lines     int64     `json:"lines"`     // lines seen
	Entries   int64     `json:"entries"`   // lines that are valid entries
	Malformed int64     `json:"malformed"` // lines that are not
	Problems  []Problem `json:"problems"`  // in line order
}

// Clean reports whether the transcript has no damage: no problem Repair
// fixes. Warnings (Problem.Warning) may remain.
func (r *Report) Clean() bool {
	for _, p := range r.Problems {
		if !p.Warning() {
			return false
		}
	}
	return true
}

// Warning reports whether p is not damage: readers and the API take the
// transcript as it is, and Repair leaves it (see Repairable). check
// reports it with why, and does not call the transcript damaged.
func (p Problem) Warning() bool { return !Repairable(p.Kind) }

// CheckOptions tune Check.
type CheckOptions struct {
	SessionID string // the file's session id; "" = do not compare sessionId fields
}

// Check reads a transcript once and reports what is wrong with it: lines
// readers skip (see ClassifyLine), then what is wrong between the entries
// they keep (duplicate uuids, broken parentUuid chains, unexplained roots,
// unpaired tool calls), in line order.
//
// The chain is judged as the official readers see it: a line they skip is
// not in it, so one lost line can also show as a dangling parent, and as
// tool results that answer nothing. Lines whose only damage is invalid
// UTF-8 or lone surrogates stay in the chain: readers decode those (the
// API is what refuses them).
//
// Memory stays bounded by about twice the longest line (the LineScanner's
// buffer) plus a small record per entry: uuid, parent, line, tool ids.
// Nothing of an entry's content is kept.
//
// A tool_use in the very last assistant entry of a live session has no
// result yet; Check still reports it, because the API would refuse to
// resume the session as it stands. Callers that know the session is live
// should not repair it.
func Check(r io.Reader, opt CheckOptions) (*Report, error) {
	c := &checker{opt: opt, g: newChainGraph()}
	sc := transcript.NewLineScanner(r)
	for sc.Scan() {
		c.line(sc.Line(), sc.Offset(), sc.HasNewline())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	c.finish()
	return &c.rep, nil
}

type checker struct {
	opt CheckOptions
	rep Report
	g   *chainGraph

	// torn is the record cut short at the start of the previous line
	// (a copy), in case this line holds its rest; tornProblem is the
	// previous line's problem.
	torn        []byte
	tornLine    int64
	tornProblem int

	foreign map[string]*foreignRun // session_id_mismatch, by foreign id
}

// mismatch records a line of another session: one finding per foreign
// session id, however many lines carry it (a copied transcript has
// thousands), with their count and first and last line.
func (c *checker) mismatch(sid string, n, off int64) {
	if c.foreign == nil {
		c.foreign = map[string]*foreignRun{}
	}
	f := c.foreign[sid]
	if f == nil {
		f = &foreignRun{problem: c.add(Problem{Line: n, Offset: off, Kind: KindSessionMismatch, IDs: []string{sid}}), first: n}
		c.foreign[sid] = f
	}
	f.count++
	f.last = n
	where := fmt.Sprintf("line %d has", n)
	if f.count > 1 {
		where = fmt.Sprintf("%d lines (the first %d, the last %d) have", f.count, f.first, f.last)
	}
	c.rep.Problems[f.problem].Message = fmt.Sprintf("%s sessionId %q but the file is session %q: written to the wrong file, or copied from another session. "+
		"A warning, not damage: readers and the API take the session as it is, and repair leaves it (rewriting the id would hide where the lines came from); move them to their own session if they do not belong here",
		where, sid, c.opt.SessionID)
}

// foreignRun is the lines of one foreign session id, for mismatch.
type foreignRun struct {
	problem     int
	count       int
	first, last int64
}

func (c *checker) add(p Problem) int {
	c.rep.Problems = append(c.rep.Problems, p)
	return len(c.rep.Problems) - 1
}

func (c *checker) line(line []byte, off int64, newline bool) {
	c.rep.Lines++
	n := c.rep.Lines
	torn := c.torn
	c.torn = nil
	v := classifyLine(line)
	if v.kind == "" {
		c.rep.Entries++
		if !newline {
			c.add(Problem{Line: n, Offset: off, Kind: KindTorn,
				Message: fmt.Sprintf("line %d is the last line and has no newline: the next append would be spliced onto it; repair adds the newline", n)})
		}
		c.entry(readRecord(line), n, off)
		return
	}
	c.rep.Malformed++
	i := c.add(Problem{Line: n, Offset: off, Kind: v.kind, Message: lineMessage(v, n, newline)})
	if v.fix == fixReplace {
		// Readers still see the entry: Node decodes invalid UTF-8 to
		// U+FFFD and JSON.parse takes lone surrogates. Only the API
		// (and sessiond) refuse it, so it stays in the chain.
		c.entry(readRecord(line), n, off)
		return
	}
	if torn != nil {
		work := line
		if v.kind == KindNUL {
			work = stripNULs(line)
		}
		if completesTorn(torn, work) {
			c.rep.Problems[c.tornProblem].Message += fmt.Sprintf("; the record cut short at its start continues on line %d, and repair joins the two", n)
			c.rep.Problems[i].Message = fmt.Sprintf("line %d is the rest of the record cut short on line %d (another writer's record landed in between); readers skip both parts; repair joins them into one line", n, c.tornLine)
			return
		}
	}
	if lead := leadingTorn(line, v); lead != nil {
		c.torn, c.tornLine, c.tornProblem = bytes.Clone(lead), n, i
	}
}

// entry records a valid entry line and reports what it alone shows.
func (c *checker) entry(r entryRecord, n, off int64) {
	if c.opt.SessionID != "" && r.hasSession && r.sessionID != c.opt.SessionID {
		c.mismatch(r.sessionID, n, off)
	}
	if first, dup := c.g.add(r, n, off, -1); dup {
		c.add(Problem{Line: n, Offset: off, Kind: KindDuplicateUUID, IDs: []string{r.uuid},
			Message: fmt.Sprintf("line %d repeats uuid %s of line %d: readers keep one copy, so the chain can fork or loop; repair keeps the first copy and drops this line", n, r.uuid, first)})
	}
}

// finish reports what is wrong between the entries.
func (c *checker) finish() {
	g := c.g
	g.resolve()
	for i := range g.nodes {
		if g.dangling(i) {
			n := &g.nodes[i]
			parent := n.parentID
			if n.badParent {
				parent = "(not a string)"
			}
			c.add(Problem{Line: n.line, Offset: n.off, Kind: KindDanglingParent, IDs: []string{n.uuid, n.parentID},
				Message: fmt.Sprintf("line %d (%s) names parent %s, which is not in the file: readers stop the conversation there and lose everything before it; repair links it to the entry written before it", n.line, n.uuid, parent)})
		}
	}
	for _, cyc := range parentCycles(g.parents()) {
		lines := make([]string, len(cyc))
		ids := make([]string, len(cyc))
		for k, x := range cyc {
			lines[k] = fmt.Sprint(g.nodes[x].line)
			ids[k] = g.nodes[x].uuid
		}
		n := &g.nodes[cyc[0]]
		c.add(Problem{Line: n.line, Offset: n.off, Kind: KindCycle, IDs: ids,
			Message: fmt.Sprintf("the parentUuid links of lines %s form a cycle: readers stop where it comes round; repair links line %d to the entry written before it", strings.Join(lines, " -> "), n.line)})
	}
	roots, first := g.extraRoots()
	for _, x := range roots {
		n, f := &g.nodes[x], &g.nodes[first]
		c.add(Problem{Line: n.line, Offset: n.off, Kind: KindMultipleRoots, IDs: []string{n.uuid, f.uuid},
			Message: fmt.Sprintf("line %d starts another conversation (parentUuid null) after the one starting on line %d: readers show only the newest leaf's chain, so one side is hidden. A warning, not damage: the API resumes the session, and repair leaves it (linking the two would splice conversations); decide whether it belongs to another session", n.line, f.line)})
	}
	p := pairTools(g, g.parents())
	for _, s := range p.strays {
		n := &g.nodes[s.node]
		for _, b := range s.blocks {
			id := n.results[b].id
			c.add(Problem{Line: n.line, Offset: n.off, Kind: KindStrayToolResult, IDs: []string{n.uuid, id},
				Message: fmt.Sprintf("line %d has a tool_result for %s, but the assistant turn before it has no such tool_use: the API refuses the conversation (unexpected tool_use_id in tool_result blocks); repair removes the block, or the line if that was all it held", n.line, id)})
		}
	}
	last := int32(len(g.nodes) - 1)
	p.orphans(func(t *toolTurn, u *toolUse) {
		n := &g.nodes[u.node]
		live := ""
		if t.last == last && u.node == last {
			live = " (it is the last entry: if the session is still running, the tool may simply not have finished)"
		}
		c.add(Problem{Line: n.line, Offset: n.off, Kind: KindOrphanToolUse, IDs: []string{n.uuid, u.id},
			Message: fmt.Sprintf("line %d has tool_use %s with no tool_result in the next user turn%s: the API refuses to resume (tool_use ids were found without tool_result blocks); repair adds an error tool_result saying the result was lost", n.line, u.id, live)})
	})
	sort.SliceStable(c.rep.Problems, func(i, j int) bool { return c.rep.Problems[i].Line < c.rep.Problems[j].Line })
}

// lineMessage says what is wrong with a line readers skip (or that the
// API refuses) and what repair does about it.
func lineMessage(v lineVerdict, n int64, newline bool) string {
	what := map[string]string{
		KindNUL:           "readers skip it; repair removes the NUL bytes and keeps what is left if it is an entry",
		KindTorn:          "a record cut short, as a writer killed mid-append leaves it; readers skip it; repair drops it",
		KindSpliced:       "as writers that do not take turns leave it; readers skip the whole line; repair puts each whole record on a line of its own and drops pieces cut short",
		KindInvalidUTF8:   "sessiond and the API refuse it; repair replaces each invalid byte with U+FFFD",
		KindLoneSurrogate: "JSON parsers accept it but the API rejects the request; repair replaces it with \\ufffd",
	}[v.kind]
	switch {
	case v.kind != KindMalformed:
	case v.fix == fixEscape:
		what = "sessiond and readers refuse it; repair escapes them"
	case v.fix == fixBOM:
		what = "readers skip it; repair removes the mark"
	case v.fix == fixSplit:
		what = "readers skip the whole line; repair keeps the whole record and drops the rest"
	default:
		what = "readers skip it; repair drops it"
	}
	last := ""
	if !newline {
		last = " (the last line, with no newline)"
	}
	return fmt.Sprintf("line %d%s: %s: %s", n, last, v.detail, what)
}

// leadingTorn returns the record cut short that line starts with, if it is
// a torn or spliced line: the next line may hold its rest.
func leadingTorn(line []byte, v lineVerdict) []byte {
	if v.kind != KindTorn && v.kind != KindSpliced {
		return nil
	}
	s, e := rawjson.TrimWS(line)
	segs := splitRecords(line[:e], s)
	if len(segs) > 0 && segs[0].torn {
		return line[segs[0].Start:segs[0].End]
	}
	return nil
}

// completesTorn reports whether next, a line with no whole record of its own,
// is the rest of the record torn was cut from: together they make one
// transcript record. Writers that append a line in several writes leave
// that when another writer's line lands between two of their writes.
func completesTorn(torn, next []byte) bool {
	s, e := rawjson.TrimWS(next)
	if s == e {
		return false
	}
	for _, sg := range splitRecords(next[:e], s) {
		if sg.whole {
			return false
		}
	}
	joined := make([]byte, 0, len(torn)+e)
	joined = append(append(joined, torn...), next[:e]...)
	end, _, err := rawjson.ParseValue(joined, 0, true)
	return err == nil && end == len(joined) && looksLikeEntry(joined)
}

func stripNULs(line []byte) []byte {
	return bytes.ReplaceAll(line, []byte{0}, nil)
}
