package damage

import (
	"crypto/rand"
	"fmt"
	"io"

	"github.com/sessiond/sessiond/internal/transcript"
)

// Repair's first pass: it learns the chain from the fixed lines and plans
// the chain repairs (relinks, dropped and trimmed lines, synthetic results).

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
// results, orphaned tool uses. parent holds the links as mended so far;
// the last step turns those that differ from the file into parentUuid
// edits.
func (p *repairPlan) links() {
	g := p.g
	g.resolve()
	parent := g.parents()
	why := linkReasons{}
	p.mendBrokenParents(parent, why)
	pr := pairTools(g, parent)
	p.planStrays(pr)
	p.skipDroppedParents(parent, why)
	p.planLostResults(pr, parent, why)
	p.recordRelinks(parent, why)
}

// linkReasons says, per node, why its parent link was changed.
type linkReasons map[int32]string

// add records reason for node i. A link can be mended twice (a dangling
// parent, then a dropped one), and the edit's detail tells both.
func (why linkReasons) add(i int32, reason string) {
	if why[i] != "" {
		reason = why[i] + "; then " + reason
	}
	why[i] = reason
}

// mendBrokenParents re-points the parents that name no entry of the file,
// then one link of each cycle, to the entry the writer would have chained
// the node to.
func (p *repairPlan) mendBrokenParents(parent []int32, why linkReasons) {
	g := p.g
	l := newChainLinker(g, parent)
	for i := range g.nodes {
		if g.dangling(i) {
			parent[i] = l.pick(int32(i))
			why.add(int32(i), fmt.Sprintf("its parent %s is not in the file", g.nodes[i].parentID))
		}
	}
	for _, cyc := range parentCycles(parent) {
		e := cyc[0]
		parent[e] = l.pick(e)
		why.add(e, fmt.Sprintf("its parent link closed a cycle of %d entries", len(cyc)))
	}
}

// planStrays decides what happens to the stray tool_result blocks: a line
// holding nothing else is dropped, otherwise the blocks are removed from
// its content.
func (p *repairPlan) planStrays(pr *toolPairing) {
	g := p.g
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
}

// skipDroppedParents re-points the children of dropped lines to the
// nearest ancestor that is kept.
func (p *repairPlan) skipDroppedParents(parent []int32, why linkReasons) {
	for i := range parent {
		q := parent[i]
		for q >= 0 && p.dropped[q] {
			q = parent[q]
		}
		if q != parent[i] {
			why.add(int32(i), fmt.Sprintf("its parent (line %d) held only stray tool results and was dropped", p.g.nodes[parent[i]].line))
			parent[i] = q
		}
	}
}

// planLostResults gives every orphaned tool_use a synthetic result,
// chained after the last entry of its turn; what followed that entry
// outside the turn follows the synthetic results instead, so the
// conversation stays one line.
func (p *repairPlan) planLostResults(pr *toolPairing, parent []int32, why linkReasons) {
	g := p.g
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
	if len(tail) == 0 {
		return
	}
	for i := range parent {
		x := parent[i]
		if x < 0 || p.dropped[i] {
			continue
		}
		if last, ok := tail[x]; ok && !pr.inTurnEndingAt(int32(i), x) {
			parent[i] = parentSynthetic
			why.add(int32(i), fmt.Sprintf("a tool_result was inserted after its parent (line %d)", g.nodes[x].line))
			p.setRelink(int32(i), last)
		}
	}
}

// recordRelinks turns every mended link that differs from the file into a
// parentUuid edit, with the reasons gathered on the way. Links to
// synthetic results were recorded when they were made, and dropped lines
// are not written at all.
func (p *repairPlan) recordRelinks(parent []int32, why linkReasons) {
	g := p.g
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
