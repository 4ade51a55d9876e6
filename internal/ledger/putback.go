package ledger

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// Putting back acknowledged entries another program's rewrite dropped. The
// ledger says which entries are missing and in which order they were
// acknowledged; the journal, which keeps compacted segments for a while
// (its retention), still has their bytes. Repair inserts each missing
// entry once, right after the nearest entry acknowledged before it that the
// file holds (at the start when none is), in acknowledged order, and keeps
// every line the other program wrote where it is. An entry whose bytes the
// journal no longer holds cannot come back: the finding stays, and says
// so.

// Journal is where the bytes of compacted entries are found again.
type Journal interface {
	// Retained calls fn with each entry logged at one of at (i: its
	// index in at) that the journal still holds, and returns when the
	// oldest entries it keeps were compacted (zero: it keeps none).
	Retained(at []Pos, fn func(i int, entry []byte) error) (oldest time.Time, err error)
}

// problem is the check finding for missing acknowledged entries.
func problem(missing []ID, retained int, since time.Time) damage.Problem {
	ids := missingIDs(missing)
	shown := ids[:min(len(ids), 5)]
	more := ""
	if len(ids) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(missing)-len(shown))
	}
	msg := fmt.Sprintf("%s that sessiond acknowledged and wrote to this transcript %s missing from it (%s%s): another program rewrote the file without them",
		countOf(len(missing), "entry", "entries"), map[bool]string{true: "is", false: "are"}[len(missing) == 1], strings.Join(shown, ", "), more)
	switch gone := len(missing) - retained; {
	case gone == 0:
		msg += "; sessiond's journal still holds every one, and repair puts them back in the order they were acknowledged, keeping the other program's lines"
	case retained == 0:
		msg += fmt.Sprintf("; the journal no longer holds them (it keeps compacted entries %s), so repair cannot bring them back: look for a copy (a backup, the other program's)", retainedSince(since))
	default:
		msg += fmt.Sprintf("; repair puts back the %d the journal still holds, in the order they were acknowledged; it cannot bring back the other %d (the journal keeps compacted entries %s)", retained, gone, retainedSince(since))
	}
	return damage.Problem{Kind: damage.KindAcknowledgedMissing, Message: msg, IDs: ids}
}

func retainedSince(since time.Time) string {
	if since.IsZero() {
		return "for --journal-retention after their compaction, and keeps none now"
	}
	return "for --journal-retention after their compaction; the oldest it keeps now were compacted " + since.UTC().Format(time.RFC3339)
}

func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// retained finds which of the missing entries j still holds, by the
// positions the ledger recorded, with their bytes when keep.
func retained(j Journal, missing []ID, keep bool) (map[Pos][]byte, time.Time, error) {
	at := make([]Pos, len(missing))
	for i, id := range missing {
		at[i] = id.pos
	}
	found := map[Pos][]byte{}
	since, err := j.Retained(at, func(i int, e []byte) error {
		var b []byte
		if keep {
			b = append([]byte(nil), e...)
		}
		found[missing[i].pos] = b
		return nil
	})
	if err != nil {
		return nil, since, fmt.Errorf("read entries back from the journal: %w", err)
	}
	return found, since, nil
}

// Plan is what repair puts back: for each place in the file, the entries
// that go there.
type Plan struct {
	missing  []ID
	inserts  []insertion // by offset
	restored int
	since    time.Time
}

type insertion struct {
	off    int64 // in the file, at a line start (or its end)
	needNL bool  // the line before it has no newline
	line   int64 // 1-based line it goes after (0: at the start)
	ids    []ID
	lines  [][]byte
}

// fileLines is where each line of a file ends, and whether the last has
// its newline.
type fileLines struct {
	ends   []int64
	lastNL bool
}

// PlanPutback compares the ledger with what h holds (the canonical file
// plus the pending entries, which a dry run leaves pending) and finds where
// each missing entry j still holds goes. nil when nothing is missing.
func (b *Book) PlanPutback(h Holdings, j Journal) (*Plan, error) {
	led, err := b.read()
	if err != nil || led == nil || len(led.IDs) == 0 || !h.Exists() {
		return nil, err
	}
	mt := newMatcher(led)
	fl, err := b.scanFile(h, mt)
	if err != nil {
		return nil, err
	}
	n := len(fl.ends)
	k := n
	err = h.Pending(func(line []byte) { mt.line(k, line); k++ })
	if err != nil {
		return nil, fmt.Errorf("read the journal of %s: %w", b.key, errdefs.FromIO(err))
	}
	missing := mt.missing()
	if len(missing) == 0 {
		return nil, nil
	}
	found, since, err := retained(j, missing, true)
	if err != nil {
		return nil, err
	}
	plan := &Plan{missing: missing, since: since}
	plan.place(led, mt, fl, found)
	return plan, nil
}

// scanFile feeds mt the canonical file's lines and says where they end.
func (b *Book) scanFile(h Holdings, mt *matcher) (fileLines, error) {
	fl := fileLines{lastNL: true}
	path := b.s.layout.TranscriptPath(b.key)
	f, err := h.Open()
	if err != nil {
		return fl, fmt.Errorf("open %s: %w", path, errdefs.FromIO(err))
	}
	defer f.Close()
	sc := transcript.NewLineScannerAt(f)
	for sc.Scan() {
		mt.line(len(fl.ends), sc.Line())
		end := sc.Offset() + int64(len(sc.Line()))
		if sc.HasNewline() {
			end++
		}
		fl.lastNL = sc.HasNewline()
		fl.ends = append(fl.ends, end)
	}
	if err := sc.Err(); err != nil {
		return fl, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	return fl, nil
}

// place puts each missing entry found in the journal right after the last
// line of the file holding an entry acknowledged before it.
func (p *Plan) place(led *Ledger, mt *matcher, fl fileLines, found map[Pos][]byte) {
	n := len(fl.ends)
	byAnchor := map[int]*insertion{}
	anchor := -1
	for i, id := range led.IDs {
		if at := mt.at[i]; at >= 0 {
			if at < n {
				anchor = at
			}
			continue
		}
		b, ok := found[id.pos]
		if !ok {
			continue
		}
		ins := byAnchor[anchor]
		if ins == nil {
			ins = &insertion{line: int64(anchor + 1)}
			if anchor >= 0 {
				ins.off = fl.ends[anchor]
				ins.needNL = anchor == n-1 && !fl.lastNL
			}
			byAnchor[anchor] = ins
		}
		ins.ids = append(ins.ids, id)
		ins.lines = append(ins.lines, b)
		p.restored++
	}
	for _, ins := range byAnchor {
		p.inserts = append(p.inserts, *ins)
	}
	sort.Slice(p.inserts, func(i, j int) bool { return p.inserts[i].off < p.inserts[j].off })
}

// Restored is how many entries the plan puts back.
func (p *Plan) Restored() int { return p.restored }

// actions are the plan's repair actions, in line order.
func (p *Plan) actions() []damage.Action {
	var out []damage.Action
	for _, ins := range p.inserts {
		for k, id := range ins.ids {
			after := ins.lines[k]
			if len(after) > 200 {
				after = after[:200]
			}
			out = append(out, damage.Action{Line: ins.line, Kind: damage.ActionRestore,
				Detail: fmt.Sprintf("put back entry %s, acknowledged by sessiond and missing from the file, from the journal", id), After: after})
		}
	}
	return out
}

// Remaining is what stays missing once the plan is carried out.
func (p *Plan) Remaining() []ID {
	put := map[Pos]bool{}
	for _, ins := range p.inserts {
		for _, id := range ins.ids {
			put[id.pos] = true
		}
	}
	var out []ID
	for _, id := range p.missing {
		if !put[id.pos] {
			out = append(out, id)
		}
	}
	return out
}

// Write writes the file src (size bytes) with the plan's entries put back
// to dst.
func (p *Plan) Write(dst io.Writer, src io.ReaderAt, size int64) error {
	w := bufio.NewWriterSize(dst, 64<<10)
	var at int64
	for _, ins := range p.inserts {
		if _, err := io.Copy(w, io.NewSectionReader(src, at, ins.off-at)); err != nil {
			return err
		}
		at = ins.off
		if ins.needNL {
			w.WriteByte('\n')
		}
		for _, l := range ins.lines {
			w.Write(l)
			w.WriteByte('\n')
		}
	}
	if _, err := io.Copy(w, io.NewSectionReader(src, at, size-at)); err != nil {
		return err
	}
	return w.Flush()
}

// Fold folds the plan into a repair's result: its actions first, the
// finding in Before (before, when not nil, is the check of the file as it
// was), and what stays missing in After. A nil plan folds nothing.
func (p *Plan) Fold(res *damage.RepairResult, before *damage.Report) {
	if p == nil {
		return
	}
	res.Actions = append(p.actions(), res.Actions...)
	res.Changed = res.Changed || p.restored > 0
	if before != nil {
		res.Before = before
	}
	if res.Before != nil {
		res.Before.Problems = append([]damage.Problem{problem(p.missing, p.restored, p.since)}, res.Before.Problems...)
	}
	if rest := p.Remaining(); len(rest) > 0 && res.After != nil {
		res.After.Problems = append([]damage.Problem{problem(rest, 0, p.since)}, res.After.Problems...)
	}
}
