package damage

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// Repair's line fixer: each input line becomes zero or more valid entry
// lines, before anything about the chain is decided.

// outPiece is one line of the output as the line fixer produces it, before the
// chain repairs.
type outPiece struct {
	data      []byte // valid only during the emit call
	line, off int64  // the input line it comes from
}

// fixer turns input lines into valid entry lines. It is deterministic, so
// both passes of Repair see the same pieces.
type fixer struct {
	record  bool // collect actions (first pass only)
	actions []Action
	// torn is a record cut short at the start of the previous line (a
	// copy), which this line may complete.
	torn     []byte
	tornLine int64
	tornLast bool // torn was the whole last line of the file
}

func (f *fixer) act(line int64, kind, detail string, before, after []byte) {
	if f.record {
		f.actions = append(f.actions, Action{Line: line, Kind: kind, Detail: detail, Before: cutForDisplay(before), After: cutForDisplay(after)})
	}
}

// cutForDisplay copies b for display, keeping at most 200 bytes.
func cutForDisplay(b []byte) []byte {
	if b == nil {
		return nil
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return bytes.Clone(b)
}

// line fixes input line n (raw, without its '\n') and emits the entries
// it becomes.
func (f *fixer) line(raw []byte, n, off int64, newline bool, emit func(outPiece)) {
	torn := f.torn
	f.torn = nil
	work := raw
	if bytes.IndexByte(work, 0) >= 0 {
		stripped := stripNULs(work)
		if s, e := rawjson.TrimWS(stripped); s == e {
			f.act(n, ActionStripNUL, nulDetail(raw)+"; nothing else was on the line, so it is gone", raw, nil)
			f.dropTorn(torn)
			return
		}
		f.act(n, ActionStripNUL, nulDetail(raw), raw, stripped)
		work = stripped
	}
	s, e := rawjson.TrimWS(work)
	if s == e {
		f.act(n, ActionDrop, "the line is empty", raw, nil)
		f.dropTorn(torn)
		return
	}
	if bytes.HasPrefix(work[s:], rawjson.BOM) {
		nb := make([]byte, 0, len(work)-len(rawjson.BOM))
		nb = append(append(nb, work[:s]...), work[s+len(rawjson.BOM):]...)
		work = nb
		if s, e = rawjson.TrimWS(work); s == e {
			f.act(n, ActionDrop, "the line held only a UTF-8 byte order mark", raw, nil)
			f.dropTorn(torn)
			return
		}
		f.act(n, ActionStripBOM, "removed a UTF-8 byte order mark", raw, nb)
	}
	if work[s] == '{' {
		if end, _, err := rawjson.ParseValue(work[:e], s, true); err == nil && end == e {
			f.dropTorn(torn)
			f.entry(work, n, off, newline, emit)
			return
		}
	}
	segs := splitRecords(work[:e], s)
	whole := 0
	for _, sg := range segs {
		if sg.whole {
			whole++
		}
	}
	if torn != nil && completesTorn(torn, work) {
		joined := append(bytes.Clone(torn), work[:e]...)
		f.act(n, ActionJoin, fmt.Sprintf("this line is the rest of the record cut short on line %d: joined them into one line", f.tornLine), raw, joined)
		f.entry(joined, n, off, true, emit)
		return
	}
	f.dropTorn(torn)
	if whole == 0 {
		if len(segs) == 1 && segs[0].torn {
			// Whether it is dropped depends on the next line.
			f.torn, f.tornLine, f.tornLast = bytes.Clone(work[segs[0].Start:segs[0].End]), n, !newline
			return
		}
		f.act(n, ActionDrop, classifyLine(work).detail, raw, nil)
		return
	}
	// Several pieces: each whole record becomes a line.
	var kept [][]byte
	var notes []string
	for i, sg := range segs {
		b := work[sg.Start:sg.End]
		switch {
		case sg.whole:
			if fixed := f.fixed(b, n); fixed != nil {
				kept = append(kept, fixed)
			} else {
				notes = append(notes, fmt.Sprintf("dropped the record at bytes %d-%d, which is not a valid entry", sg.Start, sg.End-1))
			}
		case i == 0 && sg.torn:
			f.torn, f.tornLine, f.tornLast = bytes.Clone(b), n, false
			notes = append(notes, fmt.Sprintf("the record cut short at bytes %d-%d is completed from the next line if it holds the rest, else dropped", sg.Start, sg.End-1))
		case sg.torn:
			notes = append(notes, fmt.Sprintf("dropped a record cut short at bytes %d-%d", sg.Start, sg.End-1))
		default:
			notes = append(notes, fmt.Sprintf("dropped %d bytes of garbage at bytes %d-%d", sg.End-sg.Start, sg.Start, sg.End-1))
		}
	}
	detail := fmt.Sprintf("the line held %s; kept %d whole record(s) as lines of their own", describeSegments(segs), len(kept))
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	f.act(n, ActionSplit, detail, raw, bytes.Join(kept, []byte{'\n'}))
	for _, b := range kept {
		emit(outPiece{data: b, line: n, off: off})
	}
}

// entry emits a line that is one JSON object as far as grammar goes
// (whitespace around it is kept).
func (f *fixer) entry(line []byte, n, off int64, newline bool, emit func(outPiece)) {
	out := line
	if fx := fixEncoding(line, true); fx.out != nil {
		f.act(n, ActionReplaceInvalid, encodingDetail(fx.stats), line, fx.out)
		out = fx.out
	}
	if bad := uuidProblem(out, rawjson.SkipWS(out, 0)); bad != "" {
		f.act(n, ActionDrop, bad, line, nil)
		return
	}
	if !newline {
		f.act(n, ActionAddNewline, "the last line had no newline; the next append would have been spliced onto it", line, out)
	}
	emit(outPiece{data: out, line: n, off: off})
}

// fixed returns a whole record from a spliced line ready to be a line, or
// nil when it cannot be an entry.
func (f *fixer) fixed(obj []byte, n int64) []byte {
	out := obj
	if fx := fixEncoding(obj, true); fx.out != nil {
		f.act(n, ActionReplaceInvalid, encodingDetail(fx.stats), obj, fx.out)
		out = fx.out
	}
	if uuidProblem(out, 0) != "" {
		return nil
	}
	return out
}

func encodingDetail(st encodingStats) string {
	var parts []string
	if st.badUTF8 > 0 {
		parts = append(parts, fmt.Sprintf("%d invalid UTF-8 byte(s) with U+FFFD", st.badUTF8))
	}
	if st.lone > 0 {
		parts = append(parts, fmt.Sprintf(`%d lone surrogate escape(s) with \ufffd`, st.lone))
	}
	detail := ""
	if len(parts) > 0 {
		detail = "replaced " + strings.Join(parts, ", ")
	}
	if st.ctrl > 0 {
		if detail != "" {
			detail += "; "
		}
		detail += fmt.Sprintf("escaped %d raw control character(s) inside strings", st.ctrl)
	}
	return detail
}

// dropTorn drops a record cut short that the line after it did not
// complete.
func (f *fixer) dropTorn(torn []byte) {
	if torn == nil {
		return
	}
	what := "a record cut short (%d bytes) that the next line does not complete"
	if f.tornLast {
		what = "the last line is a record cut short (%d bytes), as a writer killed mid-append leaves it"
	}
	f.act(f.tornLine, ActionDrop, fmt.Sprintf(what, len(torn)), torn, nil)
}

// finish ends the input.
func (f *fixer) finish() {
	f.dropTorn(f.torn)
	f.torn = nil
}

// eachPiece runs the fixer over the whole input.
func eachPiece(src io.ReaderAt, size int64, f *fixer, emit func(outPiece)) error {
	sc := transcript.NewLineScanner(io.NewSectionReader(src, 0, size))
	var n int64
	for sc.Scan() {
		n++
		f.line(sc.Line(), n, sc.Offset(), sc.HasNewline(), emit)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	f.finish()
	return nil
}
