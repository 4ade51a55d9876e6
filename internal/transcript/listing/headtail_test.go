package listing

import "bytes"

// summaryFromHeadTail is the SDK's lite reader itself, the oracle the
// streaming Summary is checked against: the Summary of a file whose first
// 64 KiB are head and last 64 KiB are tail. For a file of at most 64 KiB,
// pass the whole file as head and nil (or the same bytes) as tail, as the
// SDK does.

func summaryFromHeadTail(head, tail []byte) Summary {
	if tail == nil {
		tail = head
	}
	var s Summary
	first := head
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		first = head[:i]
	}
	s.IsSidechain = containsAnyOf(first, patSidechain)
	p := &s.parts
	p.tailCT, p.tailCTSet = drCustomTitle.last(tail)
	p.headCT, _ = drCustomTitle.last(head)
	p.tailAI, _ = drAITitle.last(tail)
	p.headAI, _ = drAITitle.last(head)
	p.lastPrompt, _ = drLastPrompt.last(tail)
	p.summaryHint, _ = drSummary.last(tail)
	p.relocatedCwd, _ = drRelocated.last(tail)
	p.tag, _ = drTag.last(tail)
	stored, shown := promptScan{}, promptScan{shown: true}
	eachTextLine(head, func(line []byte) bool {
		stored.line(line)
		shown.line(line)
		if p.media == "" {
			p.media = mediaOf(line)
		}
		return true
	})
	p.firstPrompt, p.shownPrompt = stored.result(), shown.result()
	p.timestamp, p.timestampSet = scTimestamp.first(head)
	p.gitTail, _ = scGitBranch.lastOf(tail)
	p.gitHead, _ = scGitBranch.first(head)
	p.cwdHead, _ = scCwd.first(head)
	p.entryHead, p.entryHeadSet = scEntrypoint.first(head)
	p.entryTail, p.entryTailSet = scEntrypoint.lastOf(tail)
	kindText := head
	eachTextLine(head, func(line []byte) bool {
		if bytes.Contains(line, patParentKey) {
			kindText = line
			return false
		}
		return true
	})
	p.kind, _ = scSessionKind.first(kindText)
	s.resolve()
	return s
}

// last is DR over a whole window: the value on the last line that has one.
func (f *drField) last(text []byte) (string, bool) {
	for i := len(text); i > 0; {
		a := bytes.LastIndexByte(text[:i], '\n')
		line := text[a+1 : i]
		i = a
		if v, _, ok := f.line(line); ok {
			return v, true
		}
		if a < 0 {
			break
		}
	}
	return "", false
}

// lastOf is kR: of all occurrences of either pattern whose value ends in
// text (each pattern's search resuming after the value it last read), the
// value of the one that starts last.
func (f *textField) lastOf(text []byte) (string, bool) {
	best, val := -1, ""
	for _, p := range f.pats {
		for i := 0; i <= len(text); {
			a := bytes.Index(text[i:], p)
			if a < 0 {
				break
			}
			a += i
			l := a + len(p)
			c := textValueEnd(text, l)
			if c < 0 {
				break
			}
			if a > best {
				best, val = a, textValue(text[l:c])
			}
			i = c + 1
		}
	}
	return val, best >= 0
}

// eachTextLine calls fn with each '\n'-separated segment of text, as the
// SDK's forward loops split it (no empty segment after a final newline).
func eachTextLine(text []byte, fn func(line []byte) bool) {
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			fn(text)
			return
		}
		if !fn(text[:i]) {
			return
		}
		text = text[i+1:]
	}
}
