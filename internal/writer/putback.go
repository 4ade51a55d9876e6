package writer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

// Putting back acknowledged entries another program's rewrite dropped
// (see acked.go and missing.go). The ledger says which entries are
// missing and in which order they were acknowledged; the journal,
// which keeps compacted segments for a while (the journal's retention), still
// has their bytes. Repair inserts each missing entry once, right after
// the nearest entry acknowledged before it that the file holds (at the
// start when none is), in acknowledged order, and keeps every line the
// other program wrote where it is. An entry whose bytes the journal no longer
// holds cannot come back: the finding stays, and says so.

// ackProblem is the check finding for missing acknowledged entries.
func ackProblem(missing []ackID, retained int, since time.Time) damage.Problem {
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

// retained finds which of the missing entries the journal still holds, by
// the spans the ledger recorded (journal.Log.Lookup), with their bytes when
// keep.
func (ls *logStore) retained(missing []ackID, keep bool) (map[span][]byte, journal.LookupInfo, error) {
	spans := make([]journal.Span, len(missing))
	for i, id := range missing {
		spans[i] = journal.Span{Seg: id.sp.seg, Off: id.sp.off}
	}
	found := map[span][]byte{}
	info, err := ls.jr.Lookup(spans, func(i int, e []byte) error {
		var b []byte
		if keep {
			b = append([]byte(nil), e...)
		}
		found[missing[i].sp] = b
		return nil
	})
	if err != nil {
		return nil, info, fmt.Errorf("read entries back from the journal: %w", err)
	}
	return found, info, nil
}

// checkAcked adds the finding for key's missing acknowledged entries to
// a check's report, given the matcher Check's reading fed, and records
// what it found (Status, log, note).
func (m *Manager) checkAcked(key layout.Key, mt *ackMatcher, rep *damage.Report) error {
	missing := mt.missing()
	m.recordMissing(key, missing, "check")
	if len(missing) == 0 {
		return nil
	}
	found, info, err := m.logs.retained(missing, false)
	if err != nil {
		return err
	}
	rep.Problems = append([]damage.Problem{ackProblem(missing, len(found), info.Since)}, rep.Problems...)
	return nil
}

// recordMissing records a finding made outside the session's writer (by
// check): the registry, the note and the journal, as setMissing does.
func (m *Manager) recordMissing(key layout.Key, missing []ackID, where string) {
	st := &state{deps: &m.deps, fs: m.cfg.FS, log: m.log.With(zap.Stringer("session", key)), key: key}
	st.setMissing(missing, where)
}

// putbackPlan is what repair puts back: for each place in the file, the
// entries that go there.
type putbackPlan struct {
	missing  []ackID
	inserts  []insertion // by offset
	restored int
	since    time.Time
}

type insertion struct {
	off    int64 // in the file, at a line start (or its end)
	needNL bool  // the line before it has no newline
	line   int64 // 1-based line it goes after (0: at the start)
	ids    []ackID
	lines  [][]byte
}

// planPutback compares the ledger with the canonical file (plus the
// pending entries, which a dry run leaves pending) and finds where each
// missing entry the journal still holds goes. nil when nothing is missing.
func (st *state) planPutback() (*putbackPlan, error) {
	led, err := readLedger(st.fs, st.cfg.Layout, st.key)
	if err != nil || led == nil || len(led.ids) == 0 || !st.canonExists {
		return nil, err
	}
	mt := newAckMatcher(led)
	f, err := st.fs.OpenFile(st.canonPath, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	defer f.Close()
	// Where each line of the file ends, and whether it has its newline.
	var ends []int64
	lastNL := true
	sc := transcript.NewLineScannerAt(f)
	for sc.Scan() {
		mt.line(len(ends), sc.Line())
		end := sc.Offset() + int64(len(sc.Line()))
		if sc.HasNewline() {
			end++
		}
		lastNL = sc.HasNewline()
		ends = append(ends, end)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", st.canonPath, errdefs.FromIO(err))
	}
	n := len(ends)
	if len(st.pending) > 0 {
		spans := make([]span, len(st.pending))
		for i, p := range st.pending {
			spans[i] = p.span
		}
		err := st.j.read(spans, func(i int, line []byte) error { mt.line(n+i, line); return nil })
		if err != nil {
			return nil, fmt.Errorf("read the journal of %s: %w", st.key, errdefs.FromIO(err))
		}
	}
	missing := mt.missing()
	if len(missing) == 0 {
		return nil, nil
	}
	found, info, err := st.logs.retained(missing, true)
	if err != nil {
		return nil, err
	}
	plan := &putbackPlan{missing: missing, since: info.Since}
	byAnchor := map[int]*insertion{}
	anchor := -1 // the last line, of the file, holding an entry acknowledged before this one
	for i, id := range led.ids {
		if at := mt.at[i]; at >= 0 {
			if at < n {
				anchor = at
			}
			continue
		}
		b, ok := found[id.sp]
		if !ok {
			continue
		}
		ins := byAnchor[anchor]
		if ins == nil {
			ins = &insertion{line: int64(anchor + 1)}
			if anchor >= 0 {
				ins.off = ends[anchor]
				ins.needNL = anchor == n-1 && !lastNL
			}
			byAnchor[anchor] = ins
		}
		ins.ids = append(ins.ids, id)
		ins.lines = append(ins.lines, b)
		plan.restored++
	}
	for _, ins := range byAnchor {
		plan.inserts = append(plan.inserts, *ins)
	}
	sort.Slice(plan.inserts, func(i, j int) bool { return plan.inserts[i].off < plan.inserts[j].off })
	return plan, nil
}

// actions are the plan's repair actions, in line order.
func (p *putbackPlan) actions() []damage.Action {
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

// remaining is what stays missing once the plan is carried out.
func (p *putbackPlan) remaining() []ackID {
	put := map[span]bool{}
	for _, ins := range p.inserts {
		for _, id := range ins.ids {
			put[id.sp] = true
		}
	}
	var out []ackID
	for _, id := range p.missing {
		if !put[id.sp] {
			out = append(out, id)
		}
	}
	return out
}

// write writes the file src (size bytes) with the plan's entries put
// back to dst.
func (p *putbackPlan) write(dst io.Writer, src io.ReaderAt, size int64) error {
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

// putbackTemp carries out the plan into a synced temp file next to the
// canonical file, returned open; the caller removes it.
func (st *state) putbackTemp(p *putbackPlan, src fsys.File, size int64) (fsys.File, string, int64, error) {
	path := filepath.Join(st.dir, st.tempPrefix()+uuid.NewString()[:8]+".tmp")
	f, err := st.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", 0, fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	err = p.write(f, src, size)
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if err != nil {
		f.Close()
		st.fs.Remove(path)
		return nil, "", 0, fmt.Errorf("repair %s: %w", st.key, errdefs.FromIO(err))
	}
	return f, path, fi.Size(), nil
}

// withPutback folds the plan into a repair's result: its actions first,
// the finding in Before, and what stays missing in After.
func (p *putbackPlan) withPutback(res *damage.RepairResult, before *damage.Report) {
	res.Actions = append(p.actions(), res.Actions...)
	res.Changed = res.Changed || p.restored > 0
	if before != nil {
		res.Before = before
	}
	if res.Before != nil {
		res.Before.Problems = append([]damage.Problem{ackProblem(p.missing, p.restored, p.since)}, res.Before.Problems...)
	}
	if rest := p.remaining(); len(rest) > 0 && res.After != nil {
		res.After.Problems = append([]damage.Problem{ackProblem(rest, 0, p.since)}, res.After.Problems...)
	}
}

// checkOriginal is Check of the file as it was before repair (Repair
// itself checks what it reads: the file with the entries put back).
func checkOriginal(ctx context.Context, src io.ReaderAt, size int64, sid string) (*damage.Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep, err := damage.Check(io.NewSectionReader(src, 0, size), damage.CheckOptions{SessionID: sid})
	if err != nil {
		return nil, errdefs.FromIO(err)
	}
	return rep, nil
}
