package damage

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Action is one change Repair made.
type Action struct {
	Line   int64  // 1-based line of the input it concerns (for inserted lines: the line it is inserted after)
	Kind   string // one of the Action kinds below
	Detail string // what and why, for people
	Before []byte // the line before (cut to 200 bytes for display)
	After  []byte // the new line(s), '\n'-separated (cut likewise); nil when the line is gone
}

// Action kinds.
const (
	ActionSplit           = "split"                  // a line holding several records became one line per whole record
	ActionJoin            = "join"                   // a record cut short was completed with the next line, which held its rest
	ActionDrop            = "drop"                   // an unrecoverable line (or a line holding only stray tool results) was dropped
	ActionStripNUL        = "strip_nul"              // NUL bytes were removed
	ActionStripBOM        = "strip_bom"              // a byte order mark was removed
	ActionReplaceInvalid  = "replace_invalid"        // invalid UTF-8, lone surrogates or raw control characters were replaced or escaped
	ActionAddNewline      = "add_newline"            // the last line got its missing newline
	ActionInsertResult    = "insert_tool_result"     // a synthetic error tool_result was inserted for an orphaned tool_use
	ActionNeutraliseBlock = "neutralise_tool_result" // stray tool_result blocks were removed from a line
	ActionRepointParent   = "repoint_parent"         // a parentUuid was changed
	ActionDropDuplicate   = "drop_duplicate"         // a later copy of a uuid was dropped
	// ActionRestore is sessiond's, not Repair's: an entry sessiond had
	// acknowledged, missing from the file, was put back from its log.
	ActionRestore = "restore_acknowledged"
)

// LostResultMessage is the content of the tool_result Repair inserts for
// a tool_use whose result is missing.
const LostResultMessage = "[sessiond] The result of this tool call was lost before it was saved to the transcript."

// RepairOptions tune Repair.
type RepairOptions struct {
	SessionID string // the file's session id: compared like CheckOptions.SessionID, and used for synthetic entries when the assistant entry has none
	// Now gives the timestamp of a synthetic entry whose assistant entry
	// has no timestamp to copy; nil means time.Now.
	Now func() time.Time
	// NewUUID gives the uuids of synthetic entries; nil means random v4
	// uuids. Tests fix it.
	NewUUID func() string
}

// RepairResult says what Repair did.
type RepairResult struct {
	Actions []Action // in line order
	Before  *Report  // Check of the input
	After   *Report  // Check of the output
	Changed bool     // the output differs from the input
}

// Repair reads the transcript from src (twice: the first pass learns the
// chain, the second rewrites) and writes the repaired transcript to dst.
// The caller keeps the original: Repair destroys nothing.
//
// Line by line: NUL bytes are removed; the records of a spliced line each
// get a line of their own, and a record cut short is completed from the
// next line when that line holds its rest (else dropped); invalid UTF-8
// becomes U+FFFD, lone surrogate escapes \ufffd, raw control characters in
// strings are escaped; a missing final newline is added; lines that are
// still not entries are dropped. Between entries: later copies of a uuid
// are dropped; a parentUuid naming no entry, or closing a cycle, is
// re-pointed to the entry the writer would have chained it to (the
// assistant entry a tool result answers, else the entry written before it
// on the same side); stray tool_result blocks are removed, and a user line
// holding nothing else is dropped with its children re-pointed to its
// parent; every orphaned tool_use gets a synthetic error tool_result,
// chained after the last entry of its turn, with what followed that entry
// re-pointed to it, so the conversation stays one line.
//
// Lines Repair does not change keep every byte; a changed line keeps its
// key order, and only the edited value or array element differs.
//
// After Repair, Check of the output reports only problems Repairable says
// it leaves, and repairing the output again changes nothing.
func Repair(src io.ReaderAt, size int64, dst io.Writer, opt RepairOptions) (*RepairResult, error) {
	checkOpt := CheckOptions{SessionID: opt.SessionID}
	type checked struct {
		rep *Report
		err error
	}
	before := make(chan checked, 1)
	go func() {
		rep, err := Check(io.NewSectionReader(src, 0, size), checkOpt)
		before <- checked{rep, err}
	}()

	p, err := planRepair(src, size, opt)
	if err != nil {
		<-before
		return nil, err
	}

	// The output is checked as it is written, so it is read only once.
	pr, pw := io.Pipe()
	after := make(chan checked, 1)
	go func() {
		rep, err := Check(pr, checkOpt)
		pr.CloseWithError(err)
		after <- checked{rep, err}
	}()
	w := bufio.NewWriterSize(io.MultiWriter(dst, pw), 64<<10)
	err = p.write(src, size, w)
	if err == nil {
		err = w.Flush()
	}
	pw.CloseWithError(err)
	b, a := <-before, <-after
	switch {
	case err != nil:
		return nil, err
	case b.err != nil:
		return nil, b.err
	case a.err != nil:
		return nil, a.err
	}
	sort.SliceStable(p.actions, func(i, j int) bool { return p.actions[i].Line < p.actions[j].Line })
	return &RepairResult{Actions: p.actions, Before: b.rep, After: a.rep, Changed: len(p.actions) > 0}, nil
}

// outPiece is one line of the output as the line fixer produces it, before the
// chain repairs.
type outPiece struct {
	data      []byte // valid only during the emit call
	line, off int64  // the input line it comes from
}

// fixer turns input lines into valid entry lines. It is deterministic, so
// both passes of Repair see the same pieces.
type fixer struct {
	record  bool // collect actions (first pass only)
	actions []Action
	// torn is a record cut short at the start of the previous line (a
	// copy), which this line may complete.
	torn     []byte
	tornLine int64
	tornLast bool // torn was the whole last line of the file
}

func (f *fixer) act(line int64, kind, detail string, before, after []byte) {
	if f.record {
		f.actions = append(f.actions, Action{Line: line, Kind: kind, Detail: detail, Before: cutForDisplay(before), After: cutForDisplay(after)})
	}
}

// cutForDisplay copies b for display, keeping at most 200 bytes.
func cutForDisplay(b []byte) []byte {
	if b == nil {
		return nil
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return bytes.Clone(b)
}

// line fixes input line n (raw, without its '\n') and emits the entries
// it becomes.
func (f *fixer) line(raw []byte, n, off int64, newline bool, emit func(outPiece)) {
	torn := f.torn
	f.torn = nil
	work := raw
	if bytes.IndexByte(work, 0) >= 0 {
		stripped := stripNULs(work)
		if s, e := rawjson.TrimWS(stripped); s == e {
			f.act(n, ActionStripNUL, nulDetail(raw)+"; nothing else was on the line, so it is gone", raw, nil)
			f.dropTorn(torn)
			return
		}
		f.act(n, ActionStripNUL, nulDetail(raw), raw, stripped)
		work = stripped
	}
	s, e := rawjson.TrimWS(work)
	if s == e {
		f.act(n, ActionDrop, "the line is empty", raw, nil)
		f.dropTorn(torn)
		return
	}
	if bytes.HasPrefix(work[s:], rawjson.BOM) {
		nb := make([]byte, 0, len(work)-len(rawjson.BOM))
		nb = append(append(nb, work[:s]...), work[s+len(rawjson.BOM):]...)
		work = nb
		if s, e = rawjson.TrimWS(work); s == e {
			f.act(n, ActionDrop, "the line held only a UTF-8 byte order mark", raw, nil)
			f.dropTorn(torn)
			return
		}
		f.act(n, ActionStripBOM, "removed a UTF-8 byte order mark", raw, nb)
	}
	if work[s] == '{' {
		if end, _, err := rawjson.ParseValue(work[:e], s, true); err == nil && end == e {
			f.dropTorn(torn)
			f.entry(work, n, off, newline, emit)
			return
		}
	}
	segs := splitRecords(work[:e], s)
	whole := 0
	for _, sg := range segs {
		if sg.whole {
			whole++
		}
	}
	if torn != nil && completesTorn(torn, work) {
		joined := append(bytes.Clone(torn), work[:e]...)
		f.act(n, ActionJoin, fmt.Sprintf("this line is the rest of the record cut short on line %d: joined them into one line", f.tornLine), raw, joined)
		f.entry(joined, n, off, true, emit)
		return
	}
	f.dropTorn(torn)
	if whole == 0 {
		if len(segs) == 1 && segs[0].torn {
			// Whether it is dropped depends on the next line.
			f.torn, f.tornLine, f.tornLast = bytes.Clone(work[segs[0].Start:segs[0].End]), n, !newline
			return
		}
		f.act(n, ActionDrop, classifyLine(work).detail, raw, nil)
		return
	}
	// Several pieces: each whole record becomes a line.
	var kept [][]byte
	var notes []string
	for i, sg := range segs {
		b := work[sg.Start:sg.End]
		switch {
		case sg.whole:
			if fixed := f.fixed(b, n); fixed != nil {
				kept = append(kept, fixed)
			} else {
				notes = append(notes, fmt.Sprintf("dropped the record at bytes %d-%d, which is not a valid entry", sg.Start, sg.End-1))
			}
		case i == 0 && sg.torn:
			f.torn, f.tornLine, f.tornLast = bytes.Clone(b), n, false
			notes = append(notes, fmt.Sprintf("the record cut short at bytes %d-%d is completed from the next line if it holds the rest, else dropped", sg.Start, sg.End-1))
		case sg.torn:
			notes = append(notes, fmt.Sprintf("dropped a record cut short at bytes %d-%d", sg.Start, sg.End-1))
		default:
			notes = append(notes, fmt.Sprintf("dropped %d bytes of garbage at bytes %d-%d", sg.End-sg.Start, sg.Start, sg.End-1))
		}
	}
	detail := fmt.Sprintf("the line held %s; kept %d whole record(s) as lines of their own", describeSegments(segs), len(kept))
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	f.act(n, ActionSplit, detail, raw, bytes.Join(kept, []byte{'\n'}))
	for _, b := range kept {
		emit(outPiece{data: b, line: n, off: off})
	}
}

// entry emits a line that is one JSON object as far as grammar goes
// (whitespace around it is kept).
func (f *fixer) entry(line []byte, n, off int64, newline bool, emit func(outPiece)) {
	out := line
	if fx := fixEncoding(line, true); fx.out != nil {
		f.act(n, ActionReplaceInvalid, encodingDetail(fx.stats), line, fx.out)
		out = fx.out
	}
	if bad := uuidProblem(out, rawjson.SkipWS(out, 0)); bad != "" {
		f.act(n, ActionDrop, bad, line, nil)
		return
	}
	if !newline {
		f.act(n, ActionAddNewline, "the last line had no newline; the next append would have been spliced onto it", line, out)
	}
	emit(outPiece{data: out, line: n, off: off})
}

// fixed returns a whole record from a spliced line ready to be a line, or
// nil when it cannot be an entry.
func (f *fixer) fixed(obj []byte, n int64) []byte {
	out := obj
	if fx := fixEncoding(obj, true); fx.out != nil {
		f.act(n, ActionReplaceInvalid, encodingDetail(fx.stats), obj, fx.out)
		out = fx.out
	}
	if uuidProblem(out, 0) != "" {
		return nil
	}
	return out
}

func encodingDetail(st encodingStats) string {
	var parts []string
	if st.badUTF8 > 0 {
		parts = append(parts, fmt.Sprintf("%d invalid UTF-8 byte(s) with U+FFFD", st.badUTF8))
	}
	if st.lone > 0 {
		parts = append(parts, fmt.Sprintf(`%d lone surrogate escape(s) with \ufffd`, st.lone))
	}
	detail := ""
	if len(parts) > 0 {
		detail = "replaced " + strings.Join(parts, ", ")
	}
	if st.ctrl > 0 {
		if detail != "" {
			detail += "; "
		}
		detail += fmt.Sprintf("escaped %d raw control character(s) inside strings", st.ctrl)
	}
	return detail
}

// dropTorn drops a record cut short that the line after it did not
// complete.
func (f *fixer) dropTorn(torn []byte) {
	if torn == nil {
		return
	}
	what := "a record cut short (%d bytes) that the next line does not complete"
	if f.tornLast {
		what = "the last line is a record cut short (%d bytes), as a writer killed mid-append leaves it"
	}
	f.act(f.tornLine, ActionDrop, fmt.Sprintf(what, len(torn)), torn, nil)
}

// finish ends the input.
func (f *fixer) finish() {
	f.dropTorn(f.torn)
	f.torn = nil
}

// eachPiece runs the fixer over the whole input.
func eachPiece(src io.ReaderAt, size int64, f *fixer, emit func(outPiece)) error {
	sc := transcript.NewLineScanner(io.NewSectionReader(src, 0, size))
	var n int64
	for sc.Scan() {
		n++
		f.line(sc.Line(), n, sc.Offset(), sc.HasNewline(), emit)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	f.finish()
	return nil
}

// repairPlan is what the first pass decided for the second to do.
type repairPlan struct {
	opt     RepairOptions
	actions []Action
	g       *chainGraph
	// Per output piece: its node (or -1), and whether it is a later copy
	// of a uuid.
	pieceNode []int32
	dupOf     map[int32]int64
	// Per node.
	dropped  []bool               // only stray tool results: dropped
	reparent map[int32]parentEdit // parentUuid to write
	strays   map[int32][]int      // content elements to remove
	inserts  map[int32][]syntheticResult
	holders  map[int32]*resultHolder // assistant entries synthetic entries copy fields from
}

// parentSynthetic marks, among parent links, a link to an inserted entry
// (which has no node); its uuid is in repairPlan.reparent.
const parentSynthetic = -3

// parentEdit is a new parentUuid ("" = null) and why.
type parentEdit struct {
	uuid, why string
}

// syntheticResult is a tool_result entry to insert.
type syntheticResult struct {
	uuid, parent, toolID string
	holder               int32 // the assistant entry with the tool_use
}

// resultHolder keeps the raw top-level values a synthetic entry copies.
type resultHolder struct {
	uuid   string
	values map[string][]byte
}

// planRepair runs the first pass: the line fixer, then the chain repairs.
func planRepair(src io.ReaderAt, size int64, opt RepairOptions) (*repairPlan, error) {
	p := &repairPlan{opt: opt, g: newChainGraph(), dupOf: map[int32]int64{}}
	f := &fixer{record: true}
	err := eachPiece(src, size, f, func(pc outPiece) {
		k := int32(len(p.pieceNode))
		r := readRecord(pc.data)
		node := int32(-1)
		if first, dup := p.g.add(r, pc.line, pc.off, k); dup {
			p.dupOf[k] = first
		} else if r.hasUUID && r.typ != transcript.TypeOther {
			node = int32(len(p.g.nodes) - 1)
		}
		p.pieceNode = append(p.pieceNode, node)
	})
	if err != nil {
		return nil, err
	}
	p.actions = f.actions
	p.links()
	return p, nil
}

// links decides the chain repairs, in an order where each step sees the
// links the steps before it mended: dangling parents, cycles, stray tool
// results, orphaned tool uses.
func (p *repairPlan) links() {
	g := p.g
	g.resolve()
	parent := g.parents()
	why := make(map[int32]string)
	because := func(i int32, reason string) { // a link can be mended twice
		if why[i] != "" {
			reason = why[i] + "; then " + reason
		}
		why[i] = reason
	}
	l := newChainLinker(g, parent)
	for i := range g.nodes {
		if g.dangling(i) {
			parent[i] = l.pick(int32(i))
			because(int32(i), fmt.Sprintf("its parent %s is not in the file", g.nodes[i].parentID))
		}
	}
	for _, cyc := range parentCycles(parent) {
		e := cyc[0]
		parent[e] = l.pick(e)
		because(e, fmt.Sprintf("its parent link closed a cycle of %d entries", len(cyc)))
	}

	pr := pairTools(g, parent)
	p.dropped = make([]bool, len(g.nodes))
	p.strays = map[int32][]int{}
	for _, s := range pr.strays {
		n := &g.nodes[s.node]
		if len(s.blocks) == len(n.results) && !n.otherContent {
			p.dropped[s.node] = true
			continue
		}
		elems := make([]int, len(s.blocks))
		for k, b := range s.blocks {
			elems[k] = int(n.results[b].elem)
		}
		p.strays[s.node] = elems
	}
	for i := range parent {
		q := parent[i]
		for q >= 0 && p.dropped[q] {
			q = parent[q]
		}
		if q != parent[i] {
			because(int32(i), fmt.Sprintf("its parent (line %d) held only stray tool results and was dropped", g.nodes[parent[i]].line))
			parent[i] = q
		}
	}

	// Orphaned tool uses: a synthetic result per tool_use, chained after
	// the turn's last entry; what followed that entry follows them.
	p.inserts = map[int32][]syntheticResult{}
	p.holders = map[int32]*resultHolder{}
	tail := map[int32]string{} // turn's last node -> uuid of its last synthetic entry
	pr.orphans(func(t *toolTurn, u *toolUse) {
		x := t.last
		prev, ok := tail[x]
		if !ok {
			prev = g.nodes[x].uuid
		}
		s := syntheticResult{uuid: p.newUUID(), parent: prev, toolID: u.id, holder: u.node}
		at := g.nodes[x].piece
		p.inserts[at] = append(p.inserts[at], s)
		p.holders[u.node] = &resultHolder{}
		tail[x] = s.uuid
	})
	if len(tail) > 0 {
		// inTurn reports whether c is part of the turn that ends at x:
		// an assistant entry of it or a result answering it.
		inTurn := func(c, x int32) bool {
			t := pr.turnOf[x]
			if t < 0 {
				t = pr.answers[x]
			}
			return pr.turnOf[c] == t || pr.answers[c] == t
		}
		for i := range parent {
			x := parent[i]
			if x < 0 || p.dropped[i] {
				continue
			}
			if last, ok := tail[x]; ok && !inTurn(int32(i), x) {
				parent[i] = parentSynthetic
				because(int32(i), fmt.Sprintf("a tool_result was inserted after its parent (line %d)", g.nodes[x].line))
				p.setRelink(int32(i), last)
			}
		}
	}

	for i := range parent {
		if parent[i] == g.nodes[i].parent || parent[i] == parentSynthetic || p.dropped[i] {
			continue
		}
		uuid := ""
		if parent[i] >= 0 {
			uuid = g.nodes[parent[i]].uuid
		}
		p.setRelink(int32(i), uuid)
	}
	for i, r := range p.reparent {
		r.why = why[i]
		p.reparent[i] = r
	}
}

func (p *repairPlan) setRelink(i int32, uuid string) {
	if p.reparent == nil {
		p.reparent = map[int32]parentEdit{}
	}
	p.reparent[i] = parentEdit{uuid: uuid}
}

// newUUID returns a uuid no entry of the file has.
func (p *repairPlan) newUUID() string {
	for {
		var u string
		if p.opt.NewUUID != nil {
			u = p.opt.NewUUID()
		} else {
			u = randomUUID()
		}
		if _, taken := p.g.index[u]; !taken {
			p.g.index[u] = -1 // taken now
			return u
		}
	}
}

// randomUUID returns a random (version 4) uuid, as the CLI gives entries.
func randomUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// write runs the second pass: the same pieces, with the chain repairs
// applied, to w.
func (p *repairPlan) write(src io.ReaderAt, size int64, w io.Writer) error {
	var werr error
	put := func(b []byte) {
		if werr == nil {
			if _, werr = w.Write(b); werr == nil {
				_, werr = w.Write([]byte{'\n'})
			}
		}
	}
	var k int32
	f := &fixer{}
	err := eachPiece(src, size, f, func(pc outPiece) {
		defer func() { k++ }()
		if first, dup := p.dupOf[k]; dup {
			p.act(pc.line, ActionDropDuplicate, fmt.Sprintf("its uuid is already used by line %d, which is kept", first), pc.data, nil)
			return
		}
		ni := p.pieceNode[k]
		if ni < 0 {
			put(pc.data)
			return
		}
		n := &p.g.nodes[ni]
		if p.dropped[ni] {
			p.act(pc.line, ActionDrop, "the line held only tool_result blocks that answer no tool_use of the turn before it", pc.data, nil)
			return
		}
		out := pc.data
		if elems, ok := p.strays[ni]; ok {
			next := removeContent(out, elems)
			p.act(pc.line, ActionNeutraliseBlock, fmt.Sprintf("removed %d tool_result block(s) that answer no tool_use of the turn before", len(elems)), out, next)
			out = next
		}
		if r, ok := p.reparent[ni]; ok {
			next := setParent(out, r.uuid)
			to := r.uuid
			if to == "" {
				to = "null (it becomes a root)"
			}
			from := n.parentID
			if from == "" {
				from = "null"
			}
			p.act(pc.line, ActionRepointParent, fmt.Sprintf("parentUuid %s -> %s: %s", from, to, r.why), out, next)
			out = next
		}
		if h, ok := p.holders[ni]; ok {
			*h = captureHolder(out)
		}
		put(out)
		for _, s := range p.inserts[k] {
			b := p.syntheticLine(s)
			p.act(pc.line, ActionInsertResult, fmt.Sprintf("tool_use %s (line %d) had no tool_result: inserted an error result saying it was lost", s.toolID, p.g.nodes[s.holder].line), nil, b)
			put(b)
		}
	})
	if err != nil {
		return err
	}
	return werr
}

func (p *repairPlan) act(line int64, kind, detail string, before, after []byte) {
	p.actions = append(p.actions, Action{Line: line, Kind: kind, Detail: detail, Before: cutForDisplay(before), After: cutForDisplay(after)})
}

// setParent returns line with its top-level parentUuid set to uuid (null
// when ""). Only that value changes.
func setParent(line []byte, uuid string) []byte {
	m, ok := rawjson.LastMember(line, rawjson.SkipWS(line, 0), "parentUuid")
	if !ok {
		return line // a root without the key stays a root
	}
	v := []byte("null")
	if uuid != "" {
		v = rawjson.AppendString(nil, uuid)
	}
	return rawjson.ReplaceSpan(line, m.Val, v)
}

// removeContent returns line without the given elements of its
// message.content array. Only those elements (and their separators) go.
func removeContent(line []byte, elems []int) []byte {
	msg, ok := rawjson.LastMember(line, rawjson.SkipWS(line, 0), "message")
	if !ok || line[msg.Val.Start] != '{' {
		return line
	}
	content, ok := rawjson.LastMember(line, msg.Val.Start, "content")
	if !ok || line[content.Val.Start] != '[' {
		return line
	}
	var spans []rawjson.Span
	rawjson.EachElement(line, content.Val.Start, func(_ int, s rawjson.Span) bool {
		spans = append(spans, s)
		return true
	})
	drop := make([]bool, len(spans))
	for _, e := range elems {
		if e < len(drop) {
			drop[e] = true
		}
	}
	return rawjson.RemoveElements(line, spans, drop)
}

// copiedKeys are the fields a synthetic tool_result takes from its
// assistant entry, in the order the CLI writes them on tool_result lines.
var copiedKeys = []string{"isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch", "agentId", "slug", "teamName", "agentName"}

func captureHolder(line []byte) resultHolder {
	h := resultHolder{values: map[string][]byte{}}
	rawjson.EachMember(line, rawjson.SkipWS(line, 0), func(m rawjson.Member) bool {
		key, _ := rawjson.StringAt(line, m.Key)
		switch key {
		case "uuid":
			h.uuid, _ = rawjson.StringAt(line, m.Val)
		case "timestamp":
			if line[m.Val.Start] == '"' {
				h.values[key] = bytes.Clone(line[m.Val.Start:m.Val.End])
			}
		default:
			for _, k := range copiedKeys {
				if k == key {
					h.values[key] = bytes.Clone(line[m.Val.Start:m.Val.End])
				}
			}
		}
		return true
	})
	return h
}

// syntheticLine builds the tool_result line for s, shaped like the error
// results the CLI writes (key order included), so readers and the API
// take it as one of their own.
func (p *repairPlan) syntheticLine(s syntheticResult) []byte {
	h := p.holders[s.holder]
	b := []byte(`{"parentUuid":`)
	b = rawjson.AppendString(b, s.parent)
	for _, k := range copiedKeys {
		v := h.values[k]
		switch {
		case v != nil:
		case k == "isSidechain":
			v = []byte("false")
		case k == "userType":
			v = []byte(`"external"`)
		case k == "sessionId" && p.opt.SessionID != "":
			v = rawjson.AppendString(nil, p.opt.SessionID)
		default:
			continue
		}
		b = append(b, ',')
		b = rawjson.AppendString(b, k)
		b = append(b, ':')
		b = append(b, v...)
	}
	b = append(b, `,"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":`...)
	b = rawjson.AppendString(b, LostResultMessage)
	b = append(b, `,"is_error":true,"tool_use_id":`...)
	b = rawjson.AppendString(b, s.toolID)
	b = append(b, `}]},"uuid":`...)
	b = rawjson.AppendString(b, s.uuid)
	b = append(b, `,"timestamp":`...)
	if ts := h.values["timestamp"]; ts != nil {
		// The assistant's time: the transcript stays in time order,
		// which readers sort side branches by.
		b = append(b, ts...)
	} else {
		now := time.Now
		if p.opt.Now != nil {
			now = p.opt.Now
		}
		b = rawjson.AppendString(b, now().UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	b = append(b, `,"toolUseResult":`...)
	b = rawjson.AppendString(b, "Error: "+LostResultMessage)
	b = append(b, `,"sourceToolAssistantUUID":`...)
	b = rawjson.AppendString(b, h.uuid)
	return append(b, '}')
}
