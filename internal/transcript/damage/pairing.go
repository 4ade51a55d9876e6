package damage

import "github.com/sessiond/sessiond/internal/transcript"

// Tool pairing: the API refuses a conversation in which an assistant
// message's tool_use is not answered by a tool_result in the next user
// turn, or a tool_result answers no tool_use of the assistant turn before
// it (doc: "Tool pairing").
//
// A turn here is one assistant message, which the CLI writes as several
// assistant entries sharing message.id (one per content block), followed
// by its tool results. How the results are chained differs by version:
// 1.x and 2.0 chain every entry to the one written before it, so parallel
// results follow each other; 2.1 chains each result to the assistant entry
// holding its tool_use (sourceToolAssistantUUID), so parallel results are
// side branches, which the SDK's reader folds back in. Both are covered by
// following parent links: the turn an entry answers (its anchor) is that
// of the nearest assistant entry up its chain, passing through other tool
// results, progress, attachment and system entries, but not through a
// user message with no tool results (a new prompt ends the turn) nor a
// compact boundary. A tool_result answers its anchor's turn if that turn
// has the tool_use; otherwise it is stray. Pairing by id across the whole
// file would accept a result that readers place after the wrong message.

// toolTurn is one assistant message and what answers it.
type toolTurn struct {
	uses []toolUse
	last int32 // the turn's last entry in the file: an assistant entry of it or a result answering it
}

type toolUse struct {
	id       string
	node     int32 // the assistant entry holding the tool_use
	answered bool
}

// strayResults lists the tool_result blocks of one user entry that answer nothing.
type strayResults struct {
	node   int32
	blocks []int // indexes into the node's results
}

// toolPairing is the outcome of matching tool results to tool uses.
type toolPairing struct {
	turns  []toolTurn
	strays []strayResults
	// Per node: the turn of an assistant entry, and the turn a user
	// entry's tool results answer; -1 when none.
	turnOf, answers []int32
}

// inTurnEndingAt reports whether c is part of the turn that ends at x: an
// assistant entry of it or a result answering it.
func (p *toolPairing) inTurnEndingAt(c, x int32) bool {
	t := p.turnOf[x]
	if t < 0 {
		t = p.answers[x]
	}
	return p.turnOf[c] == t || p.answers[c] == t
}

// orphans calls fn for every tool_use without a result, by turn.
func (p *toolPairing) orphans(fn func(t *toolTurn, u *toolUse)) {
	for ti := range p.turns {
		t := &p.turns[ti]
		for ui := range t.uses {
			if !t.uses[ui].answered {
				fn(t, &t.uses[ui])
			}
		}
	}
}

// pairTools matches tool results with tool uses along the links parent.
func pairTools(g *chainGraph, parent []int32) *toolPairing {
	p := &toolPairing{}
	turnOf := make([]int32, len(g.nodes))
	byKey := map[string]int32{}
	type useKey struct {
		toolTurn int32
		id       string
	}
	uses := map[useKey]int32{}
	for i := range g.nodes {
		n := &g.nodes[i]
		turnOf[i] = -1
		if n.typ != transcript.TypeAssistant {
			continue
		}
		key := n.msgID
		if key == "" {
			key = "\x00" + n.uuid // no message id: the entry is a message of its own
		}
		t, ok := byKey[key]
		if !ok {
			t = int32(len(p.turns))
			byKey[key] = t
			p.turns = append(p.turns, toolTurn{})
		}
		turnOf[i] = t
		tt := &p.turns[t]
		tt.last = int32(i)
		for _, id := range n.toolUses {
			k := useKey{t, id}
			if _, dup := uses[k]; !dup {
				uses[k] = int32(len(tt.uses))
				tt.uses = append(tt.uses, toolUse{id: id, node: int32(i)})
			}
		}
	}

	anchor := anchors(g, parent, turnOf)
	p.turnOf = turnOf
	p.answers = make([]int32, len(g.nodes))
	for i := range g.nodes {
		n := &g.nodes[i]
		p.answers[i] = -1
		if n.typ != transcript.TypeUser || len(n.results) == 0 {
			continue
		}
		a := int32(-1)
		if parent[i] >= 0 {
			a = anchor[parent[i]]
		}
		var s strayResults
		answers := false
		for bi, res := range n.results {
			if a >= 0 {
				if u, ok := uses[useKey{a, res.id}]; ok {
					p.turns[a].uses[u].answered = true
					answers = true
					continue
				}
			}
			s.blocks = append(s.blocks, bi)
		}
		if answers {
			p.answers[i] = a
			p.turns[a].last = max(p.turns[a].last, int32(i))
		}
		if len(s.blocks) > 0 {
			s.node = int32(i)
			p.strays = append(p.strays, s)
		}
	}
	return p
}

// passesThrough reports whether a turn continues through entry n to the
// entries chained below it.
func passesThrough(n *chainNode) bool {
	switch n.typ {
	case transcript.TypeProgress, transcript.TypeAttachment:
		return true
	case transcript.TypeSystem:
		return !n.compactRoot
	case transcript.TypeUser:
		return len(n.results) > 0
	}
	return false
}

// anchors returns, for every node, the turn it belongs to: its own for an
// assistant entry, else that of its parent for entries the turn passes
// through, else -1. Each node is resolved once (memoised along the walk),
// and a walk that comes round to itself (a cycle) ends at -1.
func anchors(g *chainGraph, parent []int32, turnOf []int32) []int32 {
	const unknown, visiting = -2, -3
	anchor := make([]int32, len(g.nodes))
	for i := range anchor {
		anchor[i] = unknown
	}
	var path []int32
	for i := range g.nodes {
		if anchor[i] != unknown {
			continue
		}
		path = path[:0]
		a := int32(-1)
		for j := int32(i); ; {
			if anchor[j] >= -1 {
				a = anchor[j]
				break
			}
			if anchor[j] == visiting {
				break
			}
			n := &g.nodes[j]
			if n.typ == transcript.TypeAssistant {
				a = turnOf[j]
				anchor[j] = a
				break
			}
			if !passesThrough(n) {
				anchor[j] = -1
				break
			}
			anchor[j] = visiting
			path = append(path, j)
			if j = parent[j]; j < 0 {
				break
			}
		}
		for _, j := range path {
			anchor[j] = a
		}
	}
	return anchor
}
