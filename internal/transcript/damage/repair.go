package damage

import (
	"bufio"
	"io"
	"sort"
	"time"
)

// Action is one change Repair made.
type Action struct {
	Line   int64  // 1-based line of the input it concerns (for inserted lines: the line it is inserted after)
	Kind   string // one of the Action kinds below
	Detail string // what and why, for people
	Before []byte // the line before (cut to 200 bytes for display)
	After  []byte // the new line(s), '\n'-separated (cut likewise); nil when the line is gone
}

// Action kinds.
const (
	ActionSplit           = "split"                  // a line holding several records became one line per whole record
	ActionJoin            = "join"                   // a record cut short was completed with the next line, which held its rest
	ActionDrop            = "drop"                   // an unrecoverable line (or a line holding only stray tool results) was dropped
	ActionStripNUL        = "strip_nul"              // NUL bytes were removed
	ActionStripBOM        = "strip_bom"              // a byte order mark was removed
	ActionReplaceInvalid  = "replace_invalid"        // invalid UTF-8, lone surrogates or raw control characters were replaced or escaped
	ActionAddNewline      = "add_newline"            // the last line got its missing newline
	ActionInsertResult    = "insert_tool_result"     // a synthetic error tool_result was inserted for an orphaned tool_use
	ActionNeutraliseBlock = "neutralise_tool_result" // stray tool_result blocks were removed from a line
	ActionRepointParent   = "repoint_parent"         // a parentUuid was changed
	ActionDropDuplicate   = "drop_duplicate"         // a later copy of a uuid was dropped
	// ActionRestore is sessiond's, not Repair's: an entry sessiond had
	// acknowledged, missing from the file, was put back from its log.
	ActionRestore = "restore_acknowledged"
)

// LostResultMessage is the content of the tool_result Repair inserts for
// a tool_use whose result is missing.
const LostResultMessage = "[sessiond] The result of this tool call was lost before it was saved to the transcript."

// RepairOptions tune Repair.
type RepairOptions struct {
	SessionID string // the file's session id: compared like CheckOptions.SessionID, and used for synthetic entries when the assistant entry has none
	// Now gives the timestamp of a synthetic entry whose assistant entry
	// has no timestamp to copy; nil means time.Now.
	Now func() time.Time
	// NewUUID gives the uuids of synthetic entries; nil means random v4
	// uuids. Tests fix it.
	NewUUID func() string
}

// RepairResult says what Repair did.
type RepairResult struct {
	Actions []Action // in line order
	Before  *Report  // Check of the input
	After   *Report  // Check of the output
	Changed bool     // the output differs from the input
}

// Repair reads the transcript from src (twice: the first pass learns the
// chain, the second rewrites) and writes the repaired transcript to dst.
// The caller keeps the original: Repair destroys nothing.
//
// Line by line: NUL bytes are removed; the records of a spliced line each
// get a line of their own, and a record cut short is completed from the
// next line when that line holds its rest (else dropped); invalid UTF-8
// becomes U+FFFD, lone surrogate escapes \ufffd, raw control characters in
// strings are escaped; a missing final newline is added; lines that are
// still not entries are dropped. Between entries: later copies of a uuid
// are dropped; a parentUuid naming no entry, or closing a cycle, is
// re-pointed to the entry the writer would have chained it to (the
// assistant entry a tool result answers, else the entry written before it
// on the same side); stray tool_result blocks are removed, and a user line
// holding nothing else is dropped with its children re-pointed to its
// parent; every orphaned tool_use gets a synthetic error tool_result,
// chained after the last entry of its turn, with what followed that entry
// re-pointed to it, so the conversation stays one line.
//
// Lines Repair does not change keep every byte; a changed line keeps its
// key order, and only the edited value or array element differs.
//
// After Repair, Check of the output reports only problems Repairable says
// it leaves, and repairing the output again changes nothing.
func Repair(src io.ReaderAt, size int64, dst io.Writer, opt RepairOptions) (*RepairResult, error) {
	checkOpt := CheckOptions{SessionID: opt.SessionID}
	type checked struct {
		rep *Report
		err error
	}
	before := make(chan checked, 1)
	go func() {
		rep, err := Check(io.NewSectionReader(src, 0, size), checkOpt)
		before <- checked{rep, err}
	}()

	p, err := planRepair(src, size, opt)
	if err != nil {
		<-before
		return nil, err
	}

	// The output is checked as it is written, so it is read only once.
	pr, pw := io.Pipe()
	after := make(chan checked, 1)
	go func() {
		rep, err := Check(pr, checkOpt)
		pr.CloseWithError(err)
		after <- checked{rep, err}
	}()
	w := bufio.NewWriterSize(io.MultiWriter(dst, pw), 64<<10)
	err = p.write(src, size, w)
	if err == nil {
		err = w.Flush()
	}
	pw.CloseWithError(err)
	b, a := <-before, <-after
	switch {
	case err != nil:
		return nil, err
	case b.err != nil:
		return nil, b.err
	case a.err != nil:
		return nil, a.err
	}
	sort.SliceStable(p.actions, func(i, j int) bool { return p.actions[i].Line < p.actions[j].Line })
	return &RepairResult{Actions: p.actions, Before: b.rep, After: a.rep, Changed: len(p.actions) > 0}, nil
}
