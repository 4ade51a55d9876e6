package server

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// pages collects what a pager sends.
type pages[P proto.Message] struct {
	got  [][]P
	more []bool
}

func (p *pages[P]) send(page []P, more bool) error {
	p.got = append(p.got, page)
	p.more = append(p.more, more)
	return nil
}

func TestPagerCountsAndBytes(t *testing.T) {
	var out pages[*sessiondv1.TrashedCopy]
	pg := newPager(1<<20, out.send)
	for i := range 2500 {
		if err := pg.add(&sessiondv1.TrashedCopy{SessionId: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.close(); err != nil {
		t.Fatal(err)
	}
	if len(out.got) != 3 || len(out.got[0]) != pageItems || len(out.got[1]) != pageItems || len(out.got[2]) != 500 ||
		!out.more[0] || !out.more[1] || out.more[2] {
		t.Fatalf("pages of %d, %d, ...; more %v", len(out.got[0]), len(out.got[1]), out.more)
	}

	// Large items: every page within the budget, unless it holds one item.
	out = pages[*sessiondv1.TrashedCopy]{}
	const budget = 256 << 10
	pg = newPager(budget, out.send)
	big := strings.Repeat("p", 100<<10)
	for range 10 {
		pg.add(&sessiondv1.TrashedCopy{Path: big})
	}
	pg.add(&sessiondv1.TrashedCopy{Path: strings.Repeat("q", 300<<10)})
	pg.close()
	n := 0
	for _, page := range out.got {
		n += len(page)
		if size := proto.Size(&sessiondv1.ListTrashResponse{Copies: page}); size > budget && len(page) > 1 {
			t.Errorf("a page of %d items is %d bytes, over %d", len(page), size, budget)
		}
	}
	if n != 11 {
		t.Fatalf("%d items sent, want 11", n)
	}

	// Nothing at all: one empty last page.
	out = pages[*sessiondv1.TrashedCopy]{}
	newPager(budget, out.send).close()
	if len(out.got) != 1 || len(out.got[0]) != 0 || out.more[0] {
		t.Fatalf("an empty answer sent %v", out.got)
	}
}

// TestProblemWithManyIDsSplit: a problem whose ids are larger than a page
// (acknowledged_missing after a large rewrite) goes in pieces that each
// fit, the first with ids_total and every field, the rest continued, and
// together they hold every id in order.
func TestProblemWithManyIDsSplit(t *testing.T) {
	const budget = 64 << 10
	var out pages[*sessiondv1.Problem]
	pg := newPager(budget, out.send)
	ids := make([]string, 50000)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	p := damage.Problem{Kind: damage.KindAcknowledgedMissing, Message: "50000 entries missing", IDs: ids}
	if err := addProblem(pg, damage.Problem{Line: 1, Kind: damage.KindTorn, Message: "before"}); err != nil {
		t.Fatal(err)
	}
	if err := addProblem(pg, p); err != nil {
		t.Fatal(err)
	}
	if err := addProblem(pg, damage.Problem{Line: 9, Kind: damage.KindTorn, Message: "after"}); err != nil {
		t.Fatal(err)
	}
	pg.close()
	var all []*sessiondv1.Problem
	for _, page := range out.got {
		if size := proto.Size(&sessiondv1.CheckResponse{Problems: page}); size > budget {
			t.Errorf("a page is %d bytes, over %d", size, budget)
		}
		all = append(all, page...)
	}
	if all[0].GetMessage() != "before" || all[len(all)-1].GetMessage() != "after" {
		t.Fatalf("the problems around the split one moved")
	}
	split := all[1 : len(all)-1]
	if len(split) < 2 || split[0].GetIdsTotal() != uint64(len(ids)) || split[0].GetContinued() || split[0].GetMessage() != p.Message {
		t.Fatalf("first piece %v (of %d)", split[0], len(split))
	}
	var got []string
	for i, piece := range split {
		if i > 0 && (!piece.GetContinued() || piece.GetKind() != p.Kind) {
			t.Fatalf("piece %d: %v", i, piece)
		}
		got = append(got, piece.GetIds()...)
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("the pieces hold %d ids, not the %d in order", len(got), len(ids))
	}
}

func TestCutText(t *testing.T) {
	if got := cutText("short", 100); got != "short" {
		t.Fatalf("cut %q", got)
	}
	long := strings.Repeat("é", 1000)
	got := cutText(long, 101)
	if len(got) > 101 || !utf8.ValidString(got) || !strings.HasSuffix(got, "(cut: too long for one message)") {
		t.Fatalf("cut to %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
}
