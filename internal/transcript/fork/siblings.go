package fork

import (
	"math"
	"sort"

	"github.com/sessiond/sessiond/internal/transcript"
)

// siblings is NMe: after each assistant message of the chain t, the pieces
// of the same API message (same message.id) that are not on the chain,
// and the tool results that answer it but hang elsewhere. in is the set of
// uuids on the chain; what is added joins it.
func siblings(g *forkGraph, t []*forkNode, in map[string]bool) []*forkEntry {
	var r []*forkNode // the chain's assistant entries
	for _, b := range t {
		if b.e.kind == transcript.TypeAssistant {
			r = append(r, b)
		}
	}
	if len(r) == 0 {
		return entriesOf(t)
	}
	lastOf := map[string]*forkNode{} // message.id -> its last piece on the chain
	for _, b := range r {
		if b.e.msgID != "" {
			lastOf[b.e.msgID] = b
		}
	}
	s := newSiblingFinder(g, t, in)
	done := map[string]bool{}
	after := map[string][]*forkNode{}
	total := 0
	for _, b := range r {
		c := b.e.msgID
		if c == "" || done[c] {
			continue
		}
		done[c] = true
		add := s.missing(c, b)
		if len(add) == 0 {
			continue
		}
		for _, x := range add {
			in[x.e.uuid] = true
		}
		total += len(add)
		after[lastOf[c].e.uuid] = add
	}
	if total == 0 {
		return entriesOf(t)
	}
	var e []*forkNode
	for _, b := range t {
		e = append(e, b)
		e = append(e, after[b.e.uuid]...)
	}
	return entriesOf(e)
}

func entriesOf(l []*forkNode) []*forkEntry {
	r := make([]*forkEntry, len(l))
	for i, nd := range l {
		r[i] = nd.e
	}
	return r
}

// siblingFinder holds what NMe looks siblings up in.
type siblingFinder struct {
	g        *forkGraph
	in       map[string]bool        // on the chain (or added to it)
	byMsg    map[string][]*forkNode // message.id -> its assistant pieces, in order
	toolUse  map[string]*forkNode   // tool_use id -> the assistant piece with it; nil: ambiguous
	children map[string][]*forkNode // uuid -> the tool results hanging off it
	answered map[string]bool        // tool_use ids the chain's results answer
	index    map[string]int         // uuid -> position in the order, made on first use
}

func newSiblingFinder(g *forkGraph, t []*forkNode, in map[string]bool) *siblingFinder {
	s := &siblingFinder{
		g:        g,
		in:       in,
		byMsg:    map[string][]*forkNode{},
		toolUse:  map[string]*forkNode{},
		children: map[string][]*forkNode{},
		answered: map[string]bool{},
	}
	results := s.indexPieces()
	s.linkResults(results)
	for _, b := range t {
		for _, id := range b.e.toolResults {
			s.answered[id] = true
		}
	}
	return s
}

// indexPieces groups the assistant pieces by message.id and notes which
// piece holds each tool_use; it returns the tool result entries that
// have a parent.
func (s *siblingFinder) indexPieces() (results []*forkNode) {
	for _, id := range s.g.order {
		b := s.g.n[id]
		if c := b.e.msgID; c != "" && b.e.kind == transcript.TypeAssistant {
			s.byMsg[c] = append(s.byMsg[c], b)
			for _, x := range b.e.toolUses {
				// A tool_use id held by pieces of different messages
				// belongs to none.
				if w, seen := s.toolUse[x]; !seen || (w != nil && w.e.msgID == c) {
					s.toolUse[x] = b
				} else {
					s.toolUse[x] = nil
				}
			}
		} else if b.e.fbUser && b.parentTrue {
			results = append(results, b)
		}
	}
	return results
}

// linkResults hangs each tool result off its parent, off its
// sourceToolAssistantUUID (unless forked, which drops it) and off the
// pieces holding the tool uses it answers, each edge once.
func (s *siblingFinder) linkResults(results []*forkNode) {
	edges := map[[2]string]bool{}
	edge := func(parent string, c *forkNode) {
		k := [2]string{parent, c.e.uuid}
		if !edges[k] {
			edges[k] = true
			s.children[parent] = append(s.children[parent], c)
		}
	}
	for _, b := range results {
		edge(b.parent, b)
		if st := b.e.sourceTool; !s.g.forked && st != "" && st != b.parent {
			if c := s.g.n[st]; c != nil && s.sameThread(b, c) {
				edge(c.e.uuid, b)
			}
		}
		for _, a := range b.e.toolResults {
			if x := s.toolUse[a]; x != nil && s.sameThread(b, x) {
				edge(x.e.uuid, b)
			}
		}
	}
}

// sameThread reports whether b and c belong to the same agent (and,
// unless forked, the same side of isSidechain); an agentId that is an
// object or array matches nothing.
func (s *siblingFinder) sameThread(b, c *forkNode) bool {
	if !s.g.forked && b.e.sidechain != c.e.sidechain {
		return false
	}
	return b.e.agentID == c.e.agentID && (b.e.agentID == "" || (b.e.agentID[0] != '{' && b.e.agentID[0] != '['))
}

func (s *siblingFinder) position(b *forkNode) int {
	if s.index == nil {
		s.index = make(map[string]int, len(s.g.order))
		for i, id := range s.g.order {
			s.index[id] = i
		}
	}
	if i, ok := s.index[b.e.uuid]; ok {
		return i
	}
	return math.MaxInt
}

// missing returns what the chain lacks of message c (whose piece on the
// chain is b): its pieces off the chain, then the tool results hanging
// off its pieces, each group by time.
func (s *siblingFinder) missing(c string, b *forkNode) []*forkNode {
	pieces := s.byMsg[c]
	if pieces == nil {
		pieces = []*forkNode{b}
	}
	ids := map[string]bool{}
	for _, m := range pieces {
		ids[m.e.uuid] = true
	}
	var w []*forkNode
	for _, m := range pieces {
		if !s.in[m.e.uuid] {
			w = append(w, m)
		}
	}
	p, f := s.hangingResults(pieces, ids)
	if len(f) > 0 {
		p = s.addUsefulResults(p, f, ids)
	}
	if len(w) == 0 && len(p) == 0 {
		return nil
	}
	byTime(w)
	byTime(p)
	return append(w, p...)
}

// hangingResults returns the tool results off the chain that hang off the
// pieces: p those whose parent is a piece, f those linked to one only by
// the tool uses they answer (or their sourceToolAssistantUUID).
func (s *siblingFinder) hangingResults(pieces []*forkNode, ids map[string]bool) (p, f []*forkNode) {
	seen := map[string]bool{}
	for _, m := range pieces {
		for _, x := range s.children[m.e.uuid] {
			if s.in[x.e.uuid] || seen[x.e.uuid] {
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
	return p, f
}

// addUsefulResults appends to p, in file order, the results of f that
// answer a tool use of the pieces not yet answered by the chain, by p or
// by a result added before.
func (s *siblingFinder) addUsefulResults(p, f []*forkNode, ids map[string]bool) []*forkNode {
	have := make(map[string]bool, len(s.answered))
	for k := range s.answered {
		have[k] = true
	}
	for _, x := range p {
		for _, id := range x.e.toolResults {
			have[id] = true
		}
	}
	sort.SliceStable(f, func(i, j int) bool { return s.position(f[i]) < s.position(f[j]) })
	for _, x := range f {
		useful := false
		for _, id := range x.e.toolResults {
			if u := s.toolUse[id]; !have[id] && u != nil && ids[u.e.uuid] {
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
	return p
}

func byTime(l []*forkNode) {
	sort.SliceStable(l, func(i, j int) bool { return l[i].e.timestamp < l[j].e.timestamp })
}
