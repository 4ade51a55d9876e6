package fork

import (
	"sort"

	"github.com/sessiond/sessiond/internal/transcript"
)

// The conversation chain a resume would load, as the SDK's $p finds it:
// the latest leaf, the parents relinked around compactions, then the
// siblings of split assistant messages and their tool results (NMe). The
// cut uses it to pick the occurrence of the uuid a fork ends at and to
// leave out the branches a resume of the fork would pick instead.

// forkNode is an entry as the chain builder sees it: its parent may be
// relinked around a compaction.
type forkNode struct {
	e          *forkEntry
	parent     string // "" when null or not a string
	parentTrue bool   // the parent is truthy
}

// relink points nd at parent ("" = null).
func (nd *forkNode) relink(parent string) { nd.parent, nd.parentTrue = parent, parent != "" }

// message reports whether nd is a user or assistant message, which a
// chain must reach.
func (nd *forkNode) message() bool {
	return nd.e.kind == transcript.TypeUser || nd.e.kind == transcript.TypeAssistant
}

// forkGraph is the entries a chain is built from, one node per uuid.
type forkGraph struct {
	n      map[string]*forkNode
	order  []string       // the uuids in the order they first appear
	pos    map[string]int // the last position of each uuid in the list
	forked bool           // entries are seen as the fork writes them
}

// newForkGraph indexes list by uuid: a later entry with a uuid seen
// before takes the earlier one's node, and so its place in the order.
func newForkGraph(list []*forkEntry, forked bool) *forkGraph {
	g := &forkGraph{
		n:      make(map[string]*forkNode, len(list)),
		order:  make([]string, 0, len(list)),
		pos:    make(map[string]int, len(list)),
		forked: forked,
	}
	for i, e := range list {
		if nd, ok := g.n[e.uuid]; ok {
			*nd = forkNode{e, e.parent, e.parentSet}
		} else {
			g.order = append(g.order, e.uuid)
			g.n[e.uuid] = &forkNode{e, e.parent, e.parentSet}
		}
		g.pos[e.uuid] = i
	}
	return g
}

func (g *forkGraph) parentOf(nd *forkNode) *forkNode {
	if nd.parent == "" {
		return nil
	}
	return g.n[nd.parent]
}

// buildChain is $p: the conversation a resume would load from list. The
// leaf is the latest entry (by position) that no other entry names as
// parent and that is not a progress entry, a team member's or a fork
// briefing, from which a user or assistant message is reachable; the
// chain runs from that message up to the root, after the parents of the
// messages a compaction preserved are relinked; then NMe adds the siblings
// of split assistant messages and their tool results. terminal is the leaf
// (nil when the chain was found by the fallback over all leaves). forked
// says the entries are seen as the fork writes them: without team names
// and sourceToolAssistantUUID. stripped marks boundaries whose preserved
// metadata the fork drops.
func buildChain(list []*forkEntry, forked bool, stripped map[*forkEntry]bool) (chain []*forkEntry, terminal *forkEntry) {
	g := newForkGraph(list, forked)
	g.relinkCompactions(stripped)
	m, leaf := g.latestLeafMessage()
	if m != nil {
		terminal = leaf.e
	} else if m = g.fallbackMessage(); m == nil {
		return nil, nil
	}
	t, in := g.chainUpTo(m)
	return siblings(g, t, in), terminal
}

// relinkCompactions relinks the parents of the messages each compact
// boundary preserved (unless the fork strips its metadata), in the order
// of the boundaries.
func (g *forkGraph) relinkCompactions(stripped map[*forkEntry]bool) {
	for _, id := range g.order {
		e := g.n[id].e
		if !e.boundary || stripped[e] {
			continue
		}
		switch e.relinkKind {
		case relinkMessages:
			g.relinkPreservedMessages(e)
		case relinkSegment:
			g.relinkPreservedSegment(e)
		}
	}
}

// relinkPreservedMessages chains the preserved messages one after the
// other from the anchor, and moves what hung off the anchor to the last
// of them. Nothing happens unless all of them are present.
func (g *forkGraph) relinkPreservedMessages(e *forkEntry) {
	for _, w := range e.relinkUUIDs {
		if g.n[w] == nil {
			return
		}
	}
	c := e.relinkAnchor
	for _, w := range e.relinkUUIDs {
		g.n[w].relink(c)
		c = w
	}
	first, last := e.relinkUUIDs[0], e.relinkUUIDs[len(e.relinkUUIDs)-1]
	g.moveAnchorChildren(e.relinkAnchor, first, last)
}

// relinkPreservedSegment hangs the preserved segment's head off the
// anchor, and moves what hung off the anchor to the segment's tail.
func (g *forkGraph) relinkPreservedSegment(e *forkEntry) {
	if nd := g.n[e.relinkHead]; nd != nil && e.relinkHead != "" {
		nd.relink(e.relinkAnchor)
	}
	g.moveAnchorChildren(e.relinkAnchor, e.relinkHead, e.relinkTail)
}

// moveAnchorChildren relinks every child of anchor but head to tail.
func (g *forkGraph) moveAnchorChildren(anchor, head, tail string) {
	if anchor == "" {
		return
	}
	for _, w := range g.order {
		if nd := g.n[w]; nd.parent == anchor && w != head {
			nd.relink(tail)
		}
	}
}

// leafCandidate reports whether nd may be the leaf a resume starts from:
// not a progress entry, a fork briefing, or (unless forked, which drops
// team names) a team member's entry.
func (g *forkGraph) leafCandidate(nd *forkNode) bool {
	e := nd.e
	return !(e.teamName && !g.forked) && e.kind != transcript.TypeProgress && !e.briefing
}

// latestLeafMessage walks up from the leaves, latest first, to the first
// message reachable from one; it returns that message and its leaf, or
// nils. A walk stops where an earlier walk went without finding one.
func (g *forkGraph) latestLeafMessage() (found, leaf *forkNode) {
	namedLeaf := map[string]bool{} // parents of leaf candidates
	for _, id := range g.order {
		if nd := g.n[id]; nd.parent != "" && g.leafCandidate(nd) {
			namedLeaf[nd.parent] = true
		}
	}
	var leaves []*forkNode
	for _, id := range g.order {
		if nd := g.n[id]; g.leafCandidate(nd) && !namedLeaf[id] {
			leaves = append(leaves, nd)
		}
	}
	sort.SliceStable(leaves, func(i, j int) bool { return g.pos[leaves[i].e.uuid] > g.pos[leaves[j].e.uuid] })
	done := map[string]bool{}
	for _, h := range leaves {
		var walked []string
		seen := map[string]bool{}
		for c := h; c != nil && !done[c.e.uuid] && !seen[c.e.uuid]; c = g.parentOf(c) {
			if c.message() {
				return c, h
			}
			seen[c.e.uuid] = true
			walked = append(walked, c.e.uuid)
		}
		for _, id := range walked {
			done[id] = true
		}
	}
	return nil, nil
}

// fallbackMessage is the message the chain ends at when no leaf
// candidate reaches one: of the nearest messages above every entry no
// other names as parent, the latest that is neither meta nor (unless
// forked) a team member's, else the latest of them; nil when there is none.
func (g *forkGraph) fallbackMessage() *forkNode {
	named := map[string]bool{} // parents of any entry
	for _, id := range g.order {
		if nd := g.n[id]; nd.parent != "" {
			named[nd.parent] = true
		}
	}
	var hs []*forkNode
	for _, id := range g.order {
		if named[id] {
			continue
		}
		seen := map[string]bool{}
		for a := g.n[id]; a != nil && !seen[a.e.uuid]; a = g.parentOf(a) {
			seen[a.e.uuid] = true
			if a.message() {
				hs = append(hs, a)
				break
			}
		}
	}
	if len(hs) == 0 {
		return nil
	}
	var real []*forkNode
	for _, c := range hs {
		if !(c.e.teamName && !g.forked) && !c.e.isMeta {
			real = append(real, c)
		}
	}
	if len(real) > 0 {
		return g.latest(real)
	}
	return g.latest(hs)
}

// latest returns the node of l whose uuid comes last in the list (the
// first such on a tie).
func (g *forkGraph) latest(l []*forkNode) *forkNode {
	best := l[0]
	for _, x := range l[1:] {
		if g.pos[x.e.uuid] > g.pos[best.e.uuid] {
			best = x
		}
	}
	return best
}

// chainUpTo returns the chain from the root down to m, and the set of its
// uuids. A cycle ends the walk up.
func (g *forkGraph) chainUpTo(m *forkNode) (chain []*forkNode, in map[string]bool) {
	in = map[string]bool{}
	for c := g.n[m.e.uuid]; c != nil && !in[c.e.uuid]; c = g.parentOf(c) {
		in[c.e.uuid] = true
		chain = append(chain, c)
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, in
}
