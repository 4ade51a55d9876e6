package server

import (
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// Answers that grow with a session or with the store (a check's problems,
// a repair's actions, the trash) go out in pages: any one of them can pass
// the message limit (a 173,485-line session's problems made 74 MB), and
// one message holding a store's answer holds it whole in the daemon too.
const (
	// pageItems is the most items in one page.
	pageItems = 1000
	// pageBytes is the most bytes of items in one page, unless the
	// message limit asks for less (see Server.pageBudget).
	pageBytes = 1 << 20
	// itemOverhead is what the repeated field's tag and length add to
	// each item, at most.
	itemOverhead = 8
)

// pageBudget is how many bytes of items a page may carry: pageBytes, or a
// quarter of --max-message-bytes when that is smaller, which leaves room
// for the message's other fields.
func (s *Server) pageBudget() int {
	b := pageBytes
	if m := s.info.MaxMessageBytes; m > 0 && m/4 < b {
		b = m / 4
	}
	return max(b, 1024)
}

// pager gathers items into pages and hands each full one to send, with
// more set: items follow. close sends the last page, empty or not.
type pager[P proto.Message] struct {
	budget int
	send   func(page []P, more bool) error
	page   []P
	size   int
}

func newPager[P proto.Message](budget int, send func(page []P, more bool) error) *pager[P] {
	return &pager[P]{budget: budget, send: send}
}

func (p *pager[P]) add(x P) error {
	sz := proto.Size(x) + itemOverhead
	if len(p.page) > 0 && (len(p.page) >= pageItems || p.size+sz > p.budget) {
		if err := p.send(p.page, true); err != nil {
			return err
		}
		p.page, p.size = nil, 0
	}
	p.page = append(p.page, x)
	p.size += sz
	return nil
}

func (p *pager[P]) close() error {
	err := p.send(p.page, false)
	p.page, p.size = nil, 0
	return err
}

// addProblem adds p to pg as one Problem, or, when its ids would not fit
// in half a page, as a first piece with ids_total and pieces with
// continued set carrying the rest of its ids. A message longer than a
// quarter of a page is cut (its start says what it is).
func addProblem(pg *pager[*sessiondv1.Problem], p damage.Problem) error {
	msg := cutText(p.Message, pg.budget/4)
	head := &sessiondv1.Problem{Line: uint64(p.Line), Offset: uint64(p.Offset), Kind: p.Kind, Message: msg, Warning: p.Warning()}
	room := pg.budget/2 - proto.Size(head)
	if idsSize(p.IDs) <= room {
		head.Ids = p.IDs
		return pg.add(head)
	}
	head.IdsTotal = uint64(len(p.IDs))
	ids := p.IDs
	piece := head
	for {
		n := idsFitting(ids, room)
		piece.Ids = ids[:n]
		if err := pg.add(piece); err != nil {
			return err
		}
		ids = ids[n:]
		if len(ids) == 0 {
			return nil
		}
		piece = &sessiondv1.Problem{Line: uint64(p.Line), Offset: uint64(p.Offset), Kind: p.Kind, Warning: p.Warning(), Continued: true}
		room = pg.budget/2 - proto.Size(piece)
	}
}

// idsSize is the encoded size of ids as a repeated string field.
func idsSize(ids []string) int {
	n := 0
	for _, id := range ids {
		n += len(id) + itemOverhead
	}
	return n
}

// idsFitting is how many of ids, from the first, fit in room bytes; at
// least one, so that every piece makes progress.
func idsFitting(ids []string, room int) int {
	n, size := 0, 0
	for n < len(ids) {
		size += len(ids[n]) + itemOverhead
		if size > room && n > 0 {
			break
		}
		n++
	}
	return n
}

// cutText keeps at most n bytes of s, cut at a character boundary, and
// says it was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " … (cut: too long for one message)"
	i := max(n-len(mark), 0)
	for i > 0 && i < len(s) && s[i]&0xc0 == 0x80 {
		i--
	}
	return s[:i] + mark
}

// addProblems adds ps to pg, in order.
func addProblems(pg *pager[*sessiondv1.Problem], ps []damage.Problem) error {
	for _, p := range ps {
		if err := addProblem(pg, p); err != nil {
			return err
		}
	}
	return nil
}
