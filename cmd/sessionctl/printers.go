package main

import (
	"bufio"
	"fmt"
	"strings"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// checkPrinter prints a check's answer as it arrives, message by message:
// a store's problems are never held together, here or in the daemon.
type checkPrinter struct {
	g   *globals
	out *bufio.Writer
	all bool

	transcripts, damaged int
	// more: the last message said more of its transcript's problems
	// follow, so the next one is not a new transcript.
	more bool
	path string
	// idsLeft is how many ids of a problem split over several messages
	// are still to come: its line stays open until they have.
	idsLeft uint64
}

func (p *checkPrinter) receive(m *sessiondv1.CheckResponse) error {
	if !p.more {
		p.transcripts++
		if !m.GetClean() {
			p.damaged++
		}
		p.path = m.GetSession().GetPath()
		if !p.g.json && m.GetClean() && !p.all {
			fmt.Fprintf(p.out, "%s: clean (%s)\n", p.path, count(m.GetLines(), "line"))
		}
	}
	p.more = m.GetMore()
	if p.g.json {
		if err := p.g.printJSONTo(p.out, m); err != nil {
			return err
		}
	} else {
		for _, pr := range m.GetProblems() {
			p.problem(pr)
		}
	}
	return p.out.Flush()
}

// problem prints one problem as "path:line: kind: message [ids]"; a
// problem split over several messages is printed as one line all the
// same, its ids added as they come.
func (p *checkPrinter) problem(pr *sessiondv1.Problem) {
	ids := strings.Join(pr.GetIds(), ", ")
	if pr.GetContinued() {
		if p.idsLeft == 0 {
			return
		}
		fmt.Fprintf(p.out, ", %s", ids)
		p.idsLeft -= min(p.idsLeft, uint64(len(pr.GetIds())))
		if p.idsLeft == 0 {
			fmt.Fprintln(p.out, "]")
		}
		return
	}
	if p.idsLeft > 0 {
		// The daemon ended a split problem early; close its line.
		fmt.Fprintln(p.out, "]")
		p.idsLeft = 0
	}
	kind := pr.GetKind()
	if pr.GetWarning() {
		kind = "warning: " + kind
	}
	fmt.Fprintf(p.out, "%s:%d: %s: %s", p.path, pr.GetLine(), kind, pr.GetMessage())
	switch total := pr.GetIdsTotal(); {
	case total > uint64(len(pr.GetIds())):
		fmt.Fprintf(p.out, " [%s", ids)
		p.idsLeft = total - uint64(len(pr.GetIds()))
	case len(pr.GetIds()) > 0:
		fmt.Fprintf(p.out, " [%s]\n", ids)
	default:
		fmt.Fprintln(p.out)
	}
}

// repairPrinter prints a repair's answer as it arrives: the changes, then
// the outcome line, then what is still present.
type repairPrinter struct {
	g   *globals
	out *bufio.Writer
	dry bool

	// outcome is the first message: what the repair did.
	outcome *sessiondv1.RepairResponse
	// said: the outcome line is printed (it goes after the changes).
	said bool
}

func (p *repairPrinter) receive(m *sessiondv1.RepairResponse) error {
	if p.outcome == nil {
		p.outcome = m
	}
	if p.g.json {
		if err := p.g.printJSONTo(p.out, m); err != nil {
			return err
		}
		return p.out.Flush()
	}
	for _, a := range m.GetActions() {
		fmt.Fprintf(p.out, "line %d: %s: %s\n", a.GetLine(), a.GetKind(), a.GetDetail())
		for _, l := range splitLines(a.GetBefore()) {
			fmt.Fprintf(p.out, "- %s\n", l)
		}
		for _, l := range splitLines(a.GetAfter()) {
			fmt.Fprintf(p.out, "+ %s\n", l)
		}
	}
	if len(m.GetAfter()) > 0 && p.outcome.GetChanged() && !p.dry {
		p.say()
		for _, pr := range m.GetAfter() {
			if !pr.GetContinued() {
				fmt.Fprintf(p.out, "still present: line %d: %s: %s\n", pr.GetLine(), pr.GetKind(), pr.GetMessage())
			}
		}
	}
	return p.out.Flush()
}

// say prints the outcome line once.
func (p *repairPrinter) say() {
	if p.said || p.g.json || p.outcome == nil {
		return
	}
	p.said = true
	o := p.outcome
	path := o.GetSession().GetPath()
	switch {
	case !o.GetChanged():
		fmt.Fprintf(p.out, "%s: nothing to repair\n", path)
	case p.dry:
		fmt.Fprintf(p.out, "dry run: %s planned for %s; nothing was written\n", count(o.GetActionCount(), "change"), path)
	default:
		fmt.Fprintf(p.out, "repaired %s (%s); the original is kept at %s\n", path, count(o.GetActionCount(), "change"), o.GetBackupPath())
	}
}

// finish prints the outcome line if the answer ended before saying it.
func (p *repairPrinter) finish() error {
	if p.outcome == nil {
		return fmt.Errorf("sessiond ended the repair without saying what it did")
	}
	p.say()
	return nil
}
