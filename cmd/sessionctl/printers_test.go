package main

import (
	"bufio"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// TestCheckPrinterJoinsSplitProblem: a transcript whose answer came in
// three messages, one problem's ids split over two of them, prints as the
// unsplit answer did: the verdict once, one line per problem.
func TestCheckPrinterJoinsSplitProblem(t *testing.T) {
	var b strings.Builder
	p := &checkPrinter{g: &globals{}, out: bufio.NewWriter(&b)}
	session := &sessiondv1.ResolvedSession{Path: "/t.jsonl"}
	msgs := []*sessiondv1.CheckResponse{
		{Session: session, Lines: 9, ProblemCount: 2, Problems: []*sessiondv1.Problem{
			{Kind: "acknowledged_missing", Message: "3 entries missing", Ids: []string{"a", "b"}, IdsTotal: 3}}, More: true},
		{Session: session, Problems: []*sessiondv1.Problem{{Kind: "acknowledged_missing", Ids: []string{"c"}, Continued: true},
			{Line: 4, Kind: "torn", Message: "cut short"}}, More: true},
		{Session: session, Problems: []*sessiondv1.Problem{{Line: 7, Kind: "multiple_roots", Message: "another root", Warning: true}}},
		{Session: &sessiondv1.ResolvedSession{Path: "/u.jsonl"}, Lines: 2, Clean: true},
	}
	for _, m := range msgs {
		if err := p.receive(m); err != nil {
			t.Fatal(err)
		}
	}
	want := "/t.jsonl:0: acknowledged_missing: 3 entries missing [a, b, c]\n" +
		"/t.jsonl:4: torn: cut short\n" +
		"/t.jsonl:7: warning: multiple_roots: another root\n" +
		"/u.jsonl: clean (2 lines)\n"
	if b.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", b.String(), want)
	}
	if p.transcripts != 2 || p.damaged != 1 {
		t.Fatalf("%d transcripts, %d damaged; want 2, 1", p.transcripts, p.damaged)
	}
}

// TestRepairPrinterSaysItRepaired: the outcome comes first and is printed
// after the changes; when the answer ends after it, the repair is reported
// done however little of the list came.
func TestRepairPrinterSaysItRepaired(t *testing.T) {
	var b strings.Builder
	p := &repairPrinter{g: &globals{}, out: bufio.NewWriter(&b)}
	session := &sessiondv1.ResolvedSession{Path: "/t.jsonl"}
	for _, m := range []*sessiondv1.RepairResponse{
		{Session: session, Changed: true, BackupPath: "/kept.jsonl", ActionCount: 2, AfterCount: 1},
		{Session: session, Actions: []*sessiondv1.RepairAction{{Line: 2, Kind: "drop", Detail: "not JSON", Before: []byte("junk")}}},
	} {
		if err := p.receive(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.finish(); err != nil {
		t.Fatal(err)
	}
	p.out.Flush()
	want := "line 2: drop: not JSON\n- junk\nrepaired /t.jsonl (2 changes); the original is kept at /kept.jsonl\n"
	if b.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", b.String(), want)
	}
	if err := (&repairPrinter{g: &globals{}, out: bufio.NewWriter(&b)}).finish(); err == nil {
		t.Fatal("an answer without its outcome was taken for a repair")
	}
}
