package damage

import (
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Chain analysis: the parentUuid links between entries, as the official
// readers follow them (see "What the official readers do" below), and how
// repair mends them.
//
// What the official readers do (TypeScript SDK getSessionMessages, read in
// sdk.mjs 0.3.x): keep the lines that parse whose type is user, assistant,
// progress, system or attachment and whose uuid is a string; index them by
// uuid (a later copy of a uuid replaces an earlier one); find the leaves
// (entries no entry names as parent), preferring those that are not
// sidechain, team or progress entries, latest in the file first; walk from
// the leaf up parentUuid, with a set guarding against cycles, to the first
// entry whose parent is null or unknown; then put back the parts of a
// split assistant message and the parallel tool results that hang off the
// path on side branches, and drop sidechain and meta entries from what it
// returns. So a missing parent silently cuts the conversation there, a
// cycle ends it where the walk comes round, and a second root hides
// everything before it.

// Parent link states besides a node index.
const (
	parentNone    = -1 // null or absent: a root
	parentMissing = -2 // names no entry of the file
)

// entryRecord is what check and repair need to know about one valid entry line.
type entryRecord struct {
	typ       transcript.ChainType
	uuid      string
	hasUUID   bool   // top-level "uuid" is a non-empty string
	parentID  string // "" when null or absent
	badParent bool   // "parentUuid" is neither a string nor null
	sidechain bool
	// compactRoot: a compact_boundary with a logicalParentUuid, the root
	// a compaction starts on purpose.
	compactRoot bool
	sessionID   string
	hasSession  bool
	agentID     string
	source      string // sourceToolAssistantUUID
	msgID       string // message.id of an assistant entry
	toolUses    []string
	results     []resultRef
	// otherContent: a user message with content besides tool_result
	// blocks (text, images, or a plain string).
	otherContent bool
}

// resultRef is one tool_result block: the tool_use it answers and its
// index in message.content.
type resultRef struct {
	id   string
	elem int32
}

// readRecord extracts a record from a valid entry line.
func readRecord(line []byte) entryRecord {
	var r entryRecord
	start := rawjson.SkipWS(line, 0)
	var msg rawjson.Span
	hasMsg := false
	typ, subtype := "", ""
	logical := false
	rawjson.EachMember(line, start, func(m rawjson.Member) bool {
		k, v := m.Key, m.Val
		// Keys are compared without decoding unless escaped; the
		// common case costs a few byte comparisons.
		switch {
		case rawjson.KeyIs(line, k, "type"):
			typ, _ = rawjson.StringAt(line, v)
		case rawjson.KeyIs(line, k, "uuid"):
			// An empty uuid cannot be linked to: readers take a
			// parentUuid of "" for null. So it is no uuid at all.
			r.uuid, r.hasUUID = rawjson.StringAt(line, v)
			r.hasUUID = r.hasUUID && r.uuid != ""
		case rawjson.KeyIs(line, k, "parentUuid"):
			r.parentID, _ = rawjson.StringAt(line, v)
			r.badParent = line[v.Start] != '"' && line[v.Start] != 'n'
		case rawjson.KeyIs(line, k, "isSidechain"):
			r.sidechain = line[v.Start] == 't'
		case rawjson.KeyIs(line, k, "subtype"):
			subtype, _ = rawjson.StringAt(line, v)
		case rawjson.KeyIs(line, k, "logicalParentUuid"):
			s, _ := rawjson.StringAt(line, v)
			logical = s != ""
		case rawjson.KeyIs(line, k, "sessionId"):
			r.sessionID, r.hasSession = rawjson.StringAt(line, v)
		case rawjson.KeyIs(line, k, "agentId"):
			r.agentID, _ = rawjson.StringAt(line, v)
		case rawjson.KeyIs(line, k, "sourceToolAssistantUUID"):
			r.source, _ = rawjson.StringAt(line, v)
		case rawjson.KeyIs(line, k, "message"):
			msg, hasMsg = v, line[v.Start] == '{'
		}
		return true
	})
	r.typ = transcript.ChainTypeOf(typ)
	r.compactRoot = r.typ == transcript.TypeSystem && subtype == "compact_boundary" && logical
	if hasMsg && (r.typ == transcript.TypeUser || r.typ == transcript.TypeAssistant) {
		readMessage(line, msg, &r)
	}
	return r
}

// readMessage reads message.id and the tool blocks of message.content.
func readMessage(line []byte, msg rawjson.Span, r *entryRecord) {
	rawjson.EachMember(line, msg.Start, func(m rawjson.Member) bool {
		switch {
		case rawjson.KeyIs(line, m.Key, "id") && r.typ == transcript.TypeAssistant:
			r.msgID, _ = rawjson.StringAt(line, m.Val)
		case rawjson.KeyIs(line, m.Key, "content"):
			r.toolUses, r.results, r.otherContent = nil, nil, false
			if line[m.Val.Start] != '[' {
				r.otherContent = line[m.Val.Start] == '"'
				return true
			}
			rawjson.EachElement(line, m.Val.Start, func(i int, el rawjson.Span) bool {
				btype, id := blockInfo(line, el, r.typ)
				switch {
				case r.typ == transcript.TypeAssistant && btype == "tool_use" && id != "":
					r.toolUses = append(r.toolUses, id)
				case r.typ == transcript.TypeUser && btype == "tool_result":
					r.results = append(r.results, resultRef{id: id, elem: int32(i)})
				default:
					r.otherContent = true
				}
				return true
			})
		}
		return true
	})
}

// blockInfo returns a content block's type and, for tool_use and
// tool_result blocks, the tool id it carries.
func blockInfo(line []byte, el rawjson.Span, typ transcript.ChainType) (btype, id string) {
	if line[el.Start] != '{' {
		return "", ""
	}
	idKey := "id"
	if typ == transcript.TypeUser {
		idKey = "tool_use_id"
	}
	rawjson.EachMember(line, el.Start, func(m rawjson.Member) bool {
		switch {
		case rawjson.KeyIs(line, m.Key, "type"):
			btype, _ = rawjson.StringAt(line, m.Val)
		case rawjson.KeyIs(line, m.Key, idKey):
			id, _ = rawjson.StringAt(line, m.Val)
		}
		return true
	})
	return btype, id
}

// chainNode is a chain entry in the graph: the first entry of the file with its
// uuid and one of the chain types. Nodes are numbered in file order.
type chainNode struct {
	entryRecord
	line, off int64 // where the entry is in the input
	piece     int32 // the output line it becomes (repair only)
	parent    int32 // a node index, parentNone or parentMissing
	// external: a sidechain entry at the head of the file whose parent is
	// in another transcript (see resolve).
	external bool
}

// chainGraph holds the chain entries of a transcript.
type chainGraph struct {
	nodes []chainNode
	index map[string]int32 // uuid -> node; -1 for a non-chain entry with that uuid
}

func newChainGraph() *chainGraph { return &chainGraph{index: make(map[string]int32)} }

// add records an entry line. It returns the line of the first entry with
// the same uuid when this one is a duplicate (and then adds nothing).
func (g *chainGraph) add(r entryRecord, line, off int64, piece int32) (dupOf int64, dup bool) {
	if !r.hasUUID {
		return 0, false
	}
	if prev, ok := g.index[r.uuid]; ok {
		return g.lineOf(prev), true
	}
	if r.typ == transcript.TypeOther {
		g.index[r.uuid] = -1 - int32(min(line, 1<<30)) // remember its line for the report
		return 0, false
	}
	r.toolUses = clipStrings(r.toolUses)
	g.index[r.uuid] = int32(len(g.nodes))
	g.nodes = append(g.nodes, chainNode{entryRecord: r, line: line, off: off, piece: piece})
	return 0, false
}

// clipStrings drops the spare capacity of s: graphs of big files hold many.
func clipStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s[:len(s):len(s)]
}

// lineOf returns the line of the entry an index value of g.index names.
func (g *chainGraph) lineOf(v int32) int64 {
	if v >= 0 {
		return g.nodes[v].line
	}
	return int64(-1 - v)
}

// resolve turns parent uuids into node indexes once every entry is known
// (a parent may follow its child in the file).
//
// A subagent transcript may begin with entries whose parents are in the
// main transcript: the compaction agent's file in the fixtures starts with
// six sidechain entries chained to messages of its parent session. So a
// missing parent is external, not dangling, for a sidechain entry that
// comes before the first entry of the file whose parent is in the file. A
// lost line later in a subagent file is still reported.
func (g *chainGraph) resolve() {
	firstLink := len(g.nodes)
	for i := range g.nodes {
		n := &g.nodes[i]
		switch p, ok := g.index[n.parentID]; {
		case n.badParent:
			n.parent = parentMissing
		case n.parentID == "":
			n.parent = parentNone
		case ok && p >= 0:
			n.parent = p
			firstLink = min(firstLink, i)
		default:
			n.parent = parentMissing
		}
	}
	for i := 0; i < firstLink; i++ {
		n := &g.nodes[i]
		n.external = n.parent == parentMissing && n.sidechain && !n.badParent
	}
}

// parents returns the resolved parent of every node.
func (g *chainGraph) parents() []int32 {
	p := make([]int32, len(g.nodes))
	for i := range g.nodes {
		p[i] = g.nodes[i].parent
	}
	return p
}

// dangling reports whether node i's parent is missing and not external.
func (g *chainGraph) dangling(i int) bool {
	return g.nodes[i].parent == parentMissing && !g.nodes[i].external
}

// extraRoots returns the roots that nothing explains, each with the root
// before it. Explained are: the first root of the main conversation;
// compact boundaries (they start a new chain on purpose, keeping the old
// one in logicalParentUuid); and sidechain roots (old versions write each
// Task subagent's conversation inline as a sidechain starting at null, 405
// such entries in one fixture; subagent files are all sidechain). Any
// other root cuts off everything before it from readers, which walk up
// from the newest leaf.
func (g *chainGraph) extraRoots() (roots []int32, first int32) {
	first = -1
	for i := range g.nodes {
		n := &g.nodes[i]
		if n.parent != parentNone || n.compactRoot || n.sidechain {
			continue
		}
		if first < 0 {
			first = int32(i)
			continue
		}
		roots = append(roots, int32(i))
	}
	return roots, first
}

// parentCycles returns the cycles among the parent links, each listed from its
// member that comes first in the file, in parent order.
func parentCycles(parent []int32) [][]int32 {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(parent))
	var out [][]int32
	var path []int32
	for i := range parent {
		if state[i] != unseen {
			continue
		}
		path = path[:0]
		j := int32(i)
		for j >= 0 && state[j] == unseen {
			state[j] = onPath
			path = append(path, j)
			j = parent[j]
		}
		if j >= 0 && state[j] == onPath {
			k := 0
			for path[k] != j {
				k++
			}
			cyc := append([]int32(nil), path[k:]...)
			first := 0
			for x := range cyc {
				if cyc[x] < cyc[first] {
					first = x
				}
			}
			out = append(out, append(cyc[first:], cyc[:first]...))
		}
		for _, x := range path {
			state[x] = done
		}
	}
	return out
}

// chainLinker chooses new parents for entries whose links repair must change.
type chainLinker struct {
	g      *chainGraph
	parent []int32
	// prevSame[i] is the nearest node before i on the same side (main
	// conversation, or the sidechain of the same agent), or -1.
	prevSame []int32
	// forward is set when some link points to a later entry; only then
	// can an earlier entry descend from a later one.
	forward bool
}

func newChainLinker(g *chainGraph, parent []int32) *chainLinker {
	l := &chainLinker{g: g, parent: parent, prevSame: make([]int32, len(g.nodes))}
	type side struct {
		sidechain bool
		agent     string
	}
	last := map[side]int32{}
	for i := range g.nodes {
		n := &g.nodes[i]
		k := side{n.sidechain, n.agentID}
		if p, ok := last[k]; ok {
			l.prevSame[i] = p
		} else {
			l.prevSame[i] = -1
		}
		last[k] = int32(i)
		if parent[i] >= int32(i) {
			l.forward = true
		}
	}
	return l
}

// descends reports whether c has e among its ancestors (or is e).
func (l *chainLinker) descends(c, e int32) bool {
	if !l.forward {
		// Every link points back in the file, so ancestors of c come
		// before c, and e comes after it.
		return c == e
	}
	for steps := 0; c >= 0 && steps <= len(l.parent); steps++ {
		if c == e {
			return true
		}
		c = l.parent[c]
	}
	return c >= 0 // still walking: a cycle; treat as unsafe
}

// pick chooses the parent node e should have had: the writer chains a
// tool result to the assistant entry that made the call
// (sourceToolAssistantUUID), and every other entry to the entry it wrote
// before on the same side. Candidates that descend from e would make a
// cycle and are passed over; with none left e becomes a root.
func (l *chainLinker) pick(e int32) int32 {
	n := &l.g.nodes[e]
	if n.source != "" && len(n.results) > 0 {
		if s, ok := l.g.index[n.source]; ok && s >= 0 && s < e && !l.descends(s, e) {
			return s
		}
	}
	for c := l.prevSame[e]; c >= 0; c = l.prevSame[c] {
		if !l.descends(c, e) {
			return c
		}
	}
	return parentNone
}
