package fork

import (
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Where a fork ends and what it copies: the plan built from the first
// pass. A fork up to a uuid ends where forkSession ends it (cutIndex, then
// UUe, FUe and HUe); progress entries are dropped and the parents that
// named them re-pointed (parentOf).

// forkPlan is what to write.
type forkPlan struct {
	out []forkOut // in file order
	// known maps each copied or dropped-progress uuid to its entry (the
	// last one with that uuid): the SDK's uuid map covers both.
	known map[string]*forkEntry
	// message holds the uuids of the entries written (non-progress).
	message map[string]bool
}

type forkOut struct {
	e         *forkEntry
	parent    string // old uuid of the new parent
	hasParent bool
	last      bool
	strip     bool // FUe: drop the boundary's preserved metadata
}

var errNothingToFork = fmt.Errorf("the session has no messages to fork (no conversation entries outside sidechains): %w", errdefs.ErrInvalidArgument)

func (ix *forkIndex) plan(upTo string) (*forkPlan, error) {
	if ix.unsupported != "" {
		return nil, fmt.Errorf("the session has %s records, which sessiond cannot carry over into a fork: %w", ix.unsupported, errdefs.ErrInvalidArgument)
	}
	if len(ix.entries) == 0 {
		return nil, errNothingToFork
	}
	sel := make([]*forkEntry, len(ix.entries))
	for i := range ix.entries {
		sel[i] = &ix.entries[i]
	}
	var target string
	var stripped map[*forkEntry]bool
	if upTo != "" {
		b := cutIndex(sel, upTo)
		if b < 0 {
			return nil, fmt.Errorf("message %s not found in the session: %w", upTo, errdefs.ErrNotFound)
		}
		target = sel[b].uuid
		sel = uue(sel[:b+1])
		for _, e := range sel {
			if e.zj() && e.hasAnchor && e.anchor == target {
				if stripped == nil {
					stripped = map[*forkEntry]bool{}
				}
				stripped[e] = true
			}
		}
		sel = hue(sel, stripped)
	}

	p := &forkPlan{known: make(map[string]*forkEntry, len(sel)), message: make(map[string]bool, len(sel))}
	for _, e := range sel {
		p.known[e.uuid] = e
		if e.kind != transcript.TypeProgress {
			p.message[e.uuid] = true
		}
	}
	for _, e := range sel {
		if e.kind == transcript.TypeProgress {
			continue
		}
		o := forkOut{e: e, strip: stripped[e]}
		o.parent, o.hasParent = p.parentOf(e)
		p.out = append(p.out, o)
	}
	if len(p.out) == 0 {
		return nil, errNothingToFork
	}
	p.out[len(p.out)-1].last = true
	return p, nil
}

// parentOf walks up from e's parent past progress entries.
func (p *forkPlan) parentOf(e *forkEntry) (string, bool) {
	var seen map[string]bool
	for id := e.parent; id != ""; {
		o, ok := p.known[id]
		if !ok {
			return "", false
		}
		if o.kind != transcript.TypeProgress {
			return id, true
		}
		if seen[id] {
			// A loop of progress entries: the SDK points at the progress
			// entry, which it does not copy, unless a message shares its uuid.
			return id, p.message[id]
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		seen[id] = true
		id = o.parent
	}
	return "", false
}

// uue is UUe: when the cut leaves a compact boundary (written by a
// compaction) after the last user or assistant message, the fork ends
// before it, and before the messages the boundary's compaction summarised
// away, unless that leaves no message.
func uue(e []*forkEntry) []*forkEntry {
	t := -1
	for k := len(e) - 1; k >= 0; k-- {
		if e[k].kind == transcript.TypeUser || e[k].kind == transcript.TypeAssistant {
			t = k
			break
		}
	}
	n := -1
	for k := t + 1; k < len(e); k++ {
		if e[k].zj() {
			n = k
			break
		}
	}
	if n < 0 {
		return e
	}
	o, r := e[:n], e[n]
	s := map[string]bool{}
	if !(r.hasAnchor && r.anchor == r.uuid) {
		for _, u := range r.preserved {
			s[u] = true
		}
		if r.logicalStr {
			s[r.logical] = true
		}
	}
	i := -1
	for k := len(o) - 1; k >= 0; k-- {
		if s[o[k].uuid] {
			i = k
			break
		}
	}
	var a *forkEntry
	for k := len(o) - 1; k >= 0; k-- {
		if o[k].boundary {
			a = o[k]
			break
		}
	}
	l := -1
	if i >= 0 && a != nil && !a.rewind && a.hasAnchor && stringIn(a.preserved, o[i].uuid) {
		for k := len(o) - 1; k >= 0; k-- {
			if o[k].uuid == a.anchor {
				l = k
				break
			}
		}
	}
	d := o
	if c := max(i, l); c >= 0 {
		d = o[:c+1]
	}
	for _, x := range d {
		if x.kind != transcript.TypeProgress {
			return d
		}
	}
	return e
}

func stringIn(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cutIndex finds where a fork up to upTo ends: the entry with that uuid (or
// whose queued command has that source_uuid) first on the conversation
// chain resumed from the latest leaf and after it, else anywhere in o. -1
// when there is none.
func cutIndex(o []*forkEntry, upTo string) int {
	first := make(map[string]int, len(o))
	for i, e := range o {
		if _, ok := first[e.uuid]; !ok {
			first[e.uuid] = i
		}
	}
	chain, _ := buildChain(o, false, nil)
	last := -1
	for _, e := range chain {
		if i, ok := first[e.uuid]; ok && i > last {
			last = i
		}
	}
	h := append(chain[:len(chain):len(chain)], o[last+1:]...)
	if i := findMessage(h, upTo); i >= 0 {
		if j, ok := first[h[i].uuid]; ok {
			return j
		}
		return -1
	}
	return findMessage(o, upTo)
}

// findMessage is NT: the index of the first entry with uuid id, else of the
// first whose queued command has source_uuid id, else -1.
func findMessage(list []*forkEntry, id string) int {
	for i, e := range list {
		if e.uuid == id {
			return i
		}
	}
	for i, e := range list {
		if e.source == id {
			return i
		}
	}
	return -1
}

// hue is HUe: after a cut, it leaves out the branches that a resume of the
// fork would otherwise pick instead of the one ending at the cut (their
// leaves come later), and the compactions behind which the conversation
// was rewound; what stays on the cut's own chain is kept.
func hue(e []*forkEntry, stripped map[*forkEntry]bool) []*forkEntry {
	if len(e) == 0 {
		return e
	}
	t := e[len(e)-1]
	// A leaf after the cut makes the chain the one that ends at it.
	synthetic := &forkEntry{uuid: "\x00fork-leaf", parent: t.uuid, parentSet: t.uuid != "", kind: transcript.TypeSystem, sidechain: "false"}
	r, _ := buildChain(append(e[:len(e):len(e)], synthetic), true, stripped)
	if len(r) == 0 {
		return e
	}
	p := newCutPruner(e, stripped)
	start, ok := p.index[r[0].uuid]
	if !ok {
		return e
	}
	p.start = start
	p.markLive(t.uuid)
	for _, x := range r {
		p.markLive(x.uuid)
	}
	p.leaveRewoundCompactions()
	p.leaveLaterBranches(r)
	if len(p.leftOut) == 0 {
		return e
	}
	return p.remaining()
}

// cutPruner is hue's state: which entries of the cut are live, and which
// it leaves out.
type cutPruner struct {
	e        []*forkEntry
	stripped map[*forkEntry]bool
	index    map[string]int // uuid -> its first position
	byUUID   map[string]*forkEntry
	start    int             // the position of the chain's root
	live     map[string]bool // on the way up from the cut or from the chain
	leftOut  map[string]bool
}

func newCutPruner(e []*forkEntry, stripped map[*forkEntry]bool) *cutPruner {
	p := &cutPruner{
		e:        e,
		stripped: stripped,
		index:    make(map[string]int, len(e)),
		byUUID:   make(map[string]*forkEntry, len(e)),
		live:     map[string]bool{},
		leftOut:  map[string]bool{},
	}
	for i, x := range e {
		if _, ok := p.index[x.uuid]; !ok {
			p.index[x.uuid] = i
		}
		p.byUUID[x.uuid] = x
	}
	return p
}

// markLive marks id and its ancestors live.
func (p *cutPruner) markLive(id string) {
	for f := p.byUUID[id]; f != nil && !p.live[f.uuid]; {
		p.live[f.uuid] = true
		if f.parent == "" {
			break
		}
		f = p.byUUID[f.parent]
	}
}

// removable reports whether x may be left out: it is not live and does not
// come before the chain's root (an entry not in the cut counts as at it).
func (p *cutPruner) removable(x *forkEntry) bool {
	i, ok := p.index[x.uuid]
	if !ok {
		i = p.start
	}
	return !p.live[x.uuid] && i >= p.start
}

// leave leaves out x with its removable ancestors, then every entry whose
// parent is left out (in one pass, in order).
func (p *cutPruner) leave(x *forkEntry) {
	for s := p.byUUID[x.uuid]; s != nil && p.removable(s) && !p.leftOut[s.uuid]; {
		p.leftOut[s.uuid] = true
		if s.parent == "" {
			break
		}
		s = p.byUUID[s.parent]
	}
	for _, s := range p.e {
		if s.parent != "" && p.leftOut[s.parent] {
			p.leftOut[s.uuid] = true
		}
	}
}

// leaveRewoundCompactions leaves out the removable compact boundaries that
// preserve no live message (or whose preserved metadata the fork strips):
// the conversation was rewound behind them.
func (p *cutPruner) leaveRewoundCompactions() {
	for _, b := range p.e {
		if !b.boundary || !p.removable(b) {
			continue
		}
		keeps := false
		if !p.stripped[b] {
			for _, f := range b.preserved {
				if p.live[f] {
					keeps = true
					break
				}
			}
		}
		if !keeps {
			p.leave(b)
		}
	}
}

// leaveLaterBranches leaves out, one leaf at a time, the branches a resume
// of what remains would pick instead of chain, until it picks chain or a
// leaf that may not be left out.
func (p *cutPruner) leaveLaterBranches(chain []*forkEntry) {
	onChain := make(map[string]bool, len(chain))
	for _, x := range chain {
		onChain[x.uuid] = true
	}
	for {
		f, terminal := buildChain(p.remaining(), true, p.stripped)
		same := len(f) == len(onChain)
		for _, x := range f {
			same = same && onChain[x.uuid]
		}
		if same || terminal == nil || !p.removable(terminal) {
			return
		}
		p.leave(terminal)
	}
}

// remaining returns the entries not left out, in order.
func (p *cutPruner) remaining() []*forkEntry {
	rest := make([]*forkEntry, 0, len(p.e))
	for _, x := range p.e {
		if !p.leftOut[x.uuid] {
			rest = append(rest, x)
		}
	}
	return rest
}

func (o *forkOut) line() int { return o.e.line }
