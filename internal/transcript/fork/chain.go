package fork

import (
	"math"
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
	order := make([]string, 0, len(list))
	n := make(map[string]*forkNode, len(list))
	for _, e := range list {
		if nd, ok := n[e.uuid]; ok {
			*nd = forkNode{e, e.parent, e.parentSet}
		} else {
			order = append(order, e.uuid)
			n[e.uuid] = &forkNode{e, e.parent, e.parentSet}
		}
	}
	relink := func(nd *forkNode, parent string) { nd.parent, nd.parentTrue = parent, parent != "" }
	for _, id := range order {
		e := n[id].e
		if !e.boundary || stripped[e] {
			continue
		}
		switch e.relinkKind {
		case relinkMessages:
			ok := true
			for _, w := range e.relinkUUIDs {
				if n[w] == nil {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			c := e.relinkAnchor
			for _, w := range e.relinkUUIDs {
				relink(n[w], c)
				c = w
			}
			first, last := e.relinkUUIDs[0], e.relinkUUIDs[len(e.relinkUUIDs)-1]
			for _, w := range order {
				if nd := n[w]; e.relinkAnchor != "" && nd.parent == e.relinkAnchor && w != first {
					relink(nd, last)
				}
			}
		case relinkSegment:
			if nd := n[e.relinkHead]; nd != nil && e.relinkHead != "" {
				relink(nd, e.relinkAnchor)
			}
			for _, w := range order {
				if nd := n[w]; e.relinkAnchor != "" && nd.parent == e.relinkAnchor && w != e.relinkHead {
					relink(nd, e.relinkTail)
				}
			}
		}
	}
	pos := make(map[string]int, len(list)) // the last position of each uuid
	for i, e := range list {
		pos[e.uuid] = i
	}
	parentOf := func(nd *forkNode) *forkNode {
		if nd.parent == "" {
			return nil
		}
		return n[nd.parent]
	}
	message := func(nd *forkNode) bool {
		return nd.e.kind == transcript.TypeUser || nd.e.kind == transcript.TypeAssistant
	}
	named := map[string]bool{}     // parents of any entry
	namedLeaf := map[string]bool{} // parents of leaf candidates
	candidate := func(nd *forkNode) bool {
		e := nd.e
		return !(e.teamName && !forked) && e.kind != transcript.TypeProgress && !e.briefing
	}
	for _, id := range order {
		nd := n[id]
		if nd.parent != "" {
			named[nd.parent] = true
			if candidate(nd) {
				namedLeaf[nd.parent] = true
			}
		}
	}
	var leaves []*forkNode
	for _, id := range order {
		if nd := n[id]; candidate(nd) && !namedLeaf[id] {
			leaves = append(leaves, nd)
		}
	}
	sort.SliceStable(leaves, func(i, j int) bool { return pos[leaves[i].e.uuid] > pos[leaves[j].e.uuid] })
	var found, leaf *forkNode
	done := map[string]bool{}
	for _, h := range leaves {
		var walked []string
		seen := map[string]bool{}
		for c := h; c != nil && !done[c.e.uuid] && !seen[c.e.uuid]; c = parentOf(c) {
			if message(c) {
				found, leaf = c, h
				break
			}
			seen[c.e.uuid] = true
			walked = append(walked, c.e.uuid)
		}
		if found != nil {
			break
		}
		for _, id := range walked {
			done[id] = true
		}
	}
	m := found
	if m == nil {
		var hs []*forkNode
		for _, id := range order {
			if named[id] {
				continue
			}
			seen := map[string]bool{}
			for a := n[id]; a != nil && !seen[a.e.uuid]; a = parentOf(a) {
				seen[a.e.uuid] = true
				if message(a) {
					hs = append(hs, a)
					break
				}
			}
		}
		if len(hs) == 0 {
			return nil, nil
		}
		latest := func(l []*forkNode) *forkNode {
			best := l[0]
			for _, x := range l[1:] {
				if pos[x.e.uuid] > pos[best.e.uuid] {
					best = x
				}
			}
			return best
		}
		var real []*forkNode
		for _, c := range hs {
			if !(c.e.teamName && !forked) && !c.e.isMeta {
				real = append(real, c)
			}
		}
		if len(real) > 0 {
			m = latest(real)
		} else {
			m = latest(hs)
		}
	}
	var g []*forkNode
	in := map[string]bool{}
	for c := n[m.e.uuid]; c != nil && !in[c.e.uuid]; c = parentOf(c) {
		in[c.e.uuid] = true
		g = append(g, c)
	}
	for i, j := 0, len(g)-1; i < j; i, j = i+1, j-1 {
		g[i], g[j] = g[j], g[i]
	}
	if m == found {
		terminal = leaf.e
	}
	return siblings(n, order, g, in, forked), terminal
}

// siblings is NMe: after each assistant message of the chain, the pieces of
// the same API message (same message.id) that are not on the chain, and
// the tool results that answer it but hang elsewhere.
func siblings(n map[string]*forkNode, order []string, t []*forkNode, in map[string]bool, forked bool) []*forkEntry {
	out := func(l []*forkNode) []*forkEntry {
		r := make([]*forkEntry, len(l))
		for i, nd := range l {
			r[i] = nd.e
		}
		return r
	}
	var r []*forkNode
	for _, b := range t {
		if b.e.kind == transcript.TypeAssistant {
			r = append(r, b)
		}
	}
	if len(r) == 0 {
		return out(t)
	}
	lastOf := map[string]*forkNode{}
	for _, b := range r {
		if b.e.msgID != "" {
			lastOf[b.e.msgID] = b
		}
	}
	byMsg := map[string][]*forkNode{}
	toolUse := map[string]*forkNode{} // nil: ambiguous
	var results []*forkNode
	for _, id := range order {
		b := n[id]
		if c := b.e.msgID; c != "" && b.e.kind == transcript.TypeAssistant {
			byMsg[c] = append(byMsg[c], b)
			for _, x := range b.e.toolUses {
				if w, seen := toolUse[x]; !seen || (w != nil && w.e.msgID == c) {
					toolUse[x] = b
				} else {
					toolUse[x] = nil
				}
			}
		} else if b.e.fbUser && b.parentTrue {
			results = append(results, b)
		}
	}
	children := map[string][]*forkNode{}
	edges := map[[2]string]bool{}
	edge := func(parent string, c *forkNode) {
		k := [2]string{parent, c.e.uuid}
		if !edges[k] {
			edges[k] = true
			children[parent] = append(children[parent], c)
		}
	}
	same := func(b, c *forkNode) bool {
		if !forked && b.e.sidechain != c.e.sidechain {
			return false
		}
		return b.e.agentID == c.e.agentID && (b.e.agentID == "" || (b.e.agentID[0] != '{' && b.e.agentID[0] != '['))
	}
	for _, b := range results {
		edge(b.parent, b)
		if st := b.e.sourceTool; !forked && st != "" && st != b.parent {
			if c := n[st]; c != nil && same(b, c) {
				edge(c.e.uuid, b)
			}
		}
		for _, a := range b.e.toolResults {
			if x := toolUse[a]; x != nil && same(b, x) {
				edge(x.e.uuid, b)
			}
		}
	}
	answered := map[string]bool{}
	for _, b := range t {
		for _, id := range b.e.toolResults {
			answered[id] = true
		}
	}
	var index map[string]int
	position := func(b *forkNode) int {
		if index == nil {
			index = make(map[string]int, len(order))
			for i, id := range order {
				index[id] = i
			}
		}
		if i, ok := index[b.e.uuid]; ok {
			return i
		}
		return math.MaxInt
	}
	done := map[string]bool{}
	after := map[string][]*forkNode{}
	total := 0
	for _, b := range r {
		c := b.e.msgID
		if c == "" || done[c] {
			continue
		}
		done[c] = true
		pieces := byMsg[c]
		if pieces == nil {
			pieces = []*forkNode{b}
		}
		ids := map[string]bool{}
		for _, m := range pieces {
			ids[m.e.uuid] = true
		}
		var w, p, f []*forkNode
		for _, m := range pieces {
			if !in[m.e.uuid] {
				w = append(w, m)
			}
		}
		seen := map[string]bool{}
		for _, m := range pieces {
			for _, x := range children[m.e.uuid] {
				if in[x.e.uuid] || seen[x.e.uuid] {
					continue
				}
				seen[x.e.uuid] = true
				if ids[x.parent] {
					p = append(p, x)
				} else {
					f = append(f, x)
				}
			}
		}
		if len(f) > 0 {
			have := make(map[string]bool, len(answered))
			for k := range answered {
				have[k] = true
			}
			for _, x := range p {
				for _, id := range x.e.toolResults {
					have[id] = true
				}
			}
			sort.SliceStable(f, func(i, j int) bool { return position(f[i]) < position(f[j]) })
			for _, x := range f {
				useful := false
				for _, id := range x.e.toolResults {
					if u := toolUse[id]; !have[id] && u != nil && ids[u.e.uuid] {
						useful = true
						break
					}
				}
				if !useful {
					continue
				}
				for _, id := range x.e.toolResults {
					have[id] = true
				}
				p = append(p, x)
			}
		}
		if len(w) == 0 && len(p) == 0 {
			continue
		}
		byTime := func(l []*forkNode) {
			sort.SliceStable(l, func(i, j int) bool { return l[i].e.timestamp < l[j].e.timestamp })
		}
		byTime(w)
		byTime(p)
		add := append(w, p...)
		for _, x := range add {
			in[x.e.uuid] = true
		}
		total += len(add)
		after[lastOf[c].e.uuid] = add
	}
	if total == 0 {
		return out(t)
	}
	var e []*forkNode
	for _, b := range t {
		e = append(e, b)
		e = append(e, after[b.e.uuid]...)
	}
	return out(e)
}
