package listing

import (
	"bytes"
)

// The streaming reader behind Summary.Add: per field, the value a lookup
// found last (or first) and where its record starts, so that after each
// line the fields are what the lite reader would read from the file as it
// is, without keeping the windows themselves.

// summaryStream is what Add keeps between lines.
type summaryStream struct {
	size  int64 // bytes so far
	lines int

	// The head window's lookups.
	stored, shown                     promptScan
	ts, gitHd, cwdHd, entryHd, kindHd headText
	kindLine                          bool // the head's first line with a parentUuid has been seen

	// The tail lookups: for each, the last value seen and where the
	// record holding it starts; it is in the tail window when that is at
	// or after the window's start.
	tailCT, tailAI, tag, lastPrompt, summary, relocated tailValue
	git, entry                                          [2]lastTextScan
	gitBest, entryBest                                  tailValue

	// floor is the size the caller promised the transcript will reach
	// (ExpectAtLeast); skipped counts the lines it saved a search of.
	floor   int64
	skipped int

	// damaged are the lines, in the tail window or crossing its start,
	// that have a tail pattern but are not JSON (drField.lineDamaged): the
	// SDK reads the one the window starts in from the window's start.
	damaged []damagedLine
}

// tailKeys are the keys the tail window's lookups search for, as `"key":`
// (a DR field's pattern, the start of a kR one); tailKeyBit numbers them.
var tailKeys = [...]string{"customTitle", "aiTitle", "tag", "lastPrompt", "summary", "relocatedCwd", "gitBranch", "entrypoint"}

func tailKeyBit(key string) uint16 {
	for i, k := range tailKeys {
		if k == key {
			return 1 << i
		}
	}
	panic("transcript: " + key + " is not a tail key")
}

// keysIn calls found for each occurrence in line of one of keys as
// `"key":`, with the key's index and the offset of its colon: exactly
// where bytes.Contains would find the pattern, for the price of one pass
// over the line's colons instead of a search per key.
func keysIn(line []byte, keys []string, found func(b, colon int)) {
	for i := 0; ; {
		j := bytes.IndexByte(line[i:], ':')
		if j < 0 {
			return
		}
		j += i
		i = j + 1
		if j == 0 || line[j-1] != '"' {
			continue
		}
		before := line[:j-1]
		for b, k := range keys {
			n := len(k)
			// A quote before and after: at most one key can match here.
			if len(before) > n && before[len(before)-n-1] == '"' && string(before[len(before)-n:]) == k {
				found(b, j)
				break
			}
		}
	}
}

// tailKeysIn returns the tailKeyBits of the keys that occur in line as
// `"key":` (keysIn), and for the kR keys which of textField's two
// patterns follows.
func tailKeysIn(line []byte) (keys uint16) {
	keysIn(line, tailKeys[:], func(b, j int) {
		keys |= 1 << b
		if k := tailKeys[b]; k == "gitBranch" || k == "entrypoint" {
			after := line[j+1:]
			switch {
			case len(after) > 0 && after[0] == '"':
				keys |= textPatBit(k, 0)
			case len(after) > 1 && after[0] == ' ' && after[1] == '"':
				keys |= textPatBit(k, 1)
			}
		}
	})
	return keys
}

// headKeys are the keys the head window's lookups need, as `"key":`: a
// line without one of them cannot match that key's patterns (every head
// pattern starts with its key), so the search for it is left out.
// headKeyBit numbers them.
var headKeys = [...]string{"customTitle", "aiTitle", "timestamp", "gitBranch", "cwd", "entrypoint", "sessionKind", "parentUuid", "type", "isSidechain"}

const (
	hkCustomTitle uint16 = 1 << iota
	hkAITitle
	hkTimestamp
	hkGitBranch
	hkCwd
	hkEntrypoint
	hkSessionKind
	hkParentUUID
	hkType
	hkSidechain
)

// headKeysIn returns the bits of the headKeys that occur in line as
// `"key":` (keysIn), in one pass over the line rather than a search of its
// whole text per pattern (some twenty for a line holding none of them).
func headKeysIn(line []byte) (keys uint16) {
	keysIn(line, headKeys[:], func(b, _ int) { keys |= 1 << b })
	return keys
}

// textPatBit is the bit tailKeysIn sets when a line has the kR key's i-th
// pattern (textField.pats: `"key":"`, `"key": "`); these bits follow the
// keys' own.
func textPatBit(key string, i int) uint16 {
	switch key {
	case "gitBranch":
		return 1 << (len(tailKeys) + i)
	case "entrypoint":
		return 1 << (len(tailKeys) + 2 + i)
	}
	panic("transcript: " + key + " is not a kR key")
}

// tailFields are the DR lookups of the tail window, in the order of
// tailValues.
var tailFields = [...]*drField{drCustomTitle, drAITitle, drTag, drLastPrompt, drSummary, drRelocated}

// tailValues returns the values of tailFields, in their order.
func (st *summaryStream) tailValues() [len(tailFields)]*tailValue {
	return [...]*tailValue{&st.tailCT, &st.tailAI, &st.tag, &st.lastPrompt, &st.summary, &st.relocated}
}

// damagedLine is a line that may read differently from inside: it spans
// [start, end) of the file, and tail is its last bytes (at most a window).
type damagedLine struct {
	start, end int64
	keys       uint16 // tailKeysIn of the whole line
	tail       []byte
}

type tailValue struct {
	val string
	at  int64
	ok  bool
}

// Add feeds the next line of the transcript, without its '\n', counting a
// '\n' after it.
func (s *Summary) Add(line []byte) { s.AddLine(line, true) }

// AddLine feeds the next line of the transcript, without its '\n'; newline
// says whether one follows it (false only for a torn last line, see
// LineScanner.HasNewline). The file's size, which decides where the tail
// window starts, is the bytes fed so far.
func (s *Summary) AddLine(line []byte, newline bool) {
	st := s.stream()
	start := st.size
	end := start + int64(len(line))
	window := int64(liteWindow)
	if start >= window && end+1 <= st.floor-window && !st.tailPending() {
		// Wholly between the head window and where the tail window will
		// start: nothing in it can be found by the lite reader.
		st.skipped++
	} else {
		if start < window {
			s.addHead(line, start, end, newline)
		}
		// The tail window's lookups, for any line.
		keys := st.lookupTailFields(line, start, end)
		st.scanLastTexts(line, keys, start, end, newline)
	}
	st.size = end
	if newline {
		st.size++
	}
	st.lines++
	s.settle()
}

// addHead runs the head window's lookups on the line spanning [start,
// end): on the whole line, or on the part of it before the window's end
// when it crosses that.
func (s *Summary) addHead(line []byte, start, end int64, newline bool) {
	st := s.st
	window := int64(liteWindow)
	vis := line
	if end > window {
		vis = line[:window-start]
	}
	hk := headKeysIn(vis)
	if st.lines == 0 {
		s.IsSidechain = hk&hkSidechain != 0 && containsAnyOf(vis, patSidechain)
	}
	p := &s.parts
	if hk&hkCustomTitle != 0 {
		if v, _, ok := drCustomTitle.line(vis); ok {
			p.headCT = v
		}
	}
	if hk&hkAITitle != 0 {
		if v, _, ok := drAITitle.line(vis); ok {
			p.headAI = v
		}
	}
	// A prompt and a media block are on user lines: `"type":` first.
	if hk&hkType != 0 {
		st.stored.line(vis)
		st.shown.line(vis)
		// The media fallback shows only without a first prompt
		// (Display), and a first prompt, once found, stays: past it,
		// the search of every user line for a media block is waste.
		if p.media == "" && p.firstPrompt == "" {
			p.media = mediaOf(vis)
		}
	}
	p.firstPrompt, p.shownPrompt = st.stored.result(), st.shown.result()
	s.addHeadTexts(vis, hk, newline && end < window)
}

// addHeadTexts feeds the head window's text lookups (timestamp,
// gitBranch, cwd, entrypoint, sessionKind) the visible part of a line,
// and its newline when the window holds that too.
func (s *Summary) addHeadTexts(vis []byte, hk uint16, newline bool) {
	st, p := s.st, &s.parts
	for _, h := range [...]struct {
		h   *headText
		bit uint16
	}{{&st.ts, hkTimestamp}, {&st.gitHd, hkGitBranch}, {&st.cwdHd, hkCwd}, {&st.entryHd, hkEntrypoint}, {&st.kindHd, hkSessionKind}} {
		h.h.feed(vis, hk&h.bit != 0)
		if newline {
			h.h.feed(summaryNewline, false)
		}
	}
	p.timestamp, p.timestampSet = st.ts.result()
	p.gitHead, _ = st.gitHd.result()
	p.cwdHead, _ = st.cwdHd.result()
	p.entryHead, p.entryHeadSet = st.entryHd.result()
	switch {
	case st.kindLine:
	case hk&hkParentUUID != 0:
		// The first line with a parentUuid decides the kind alone.
		st.kindLine = true
		p.kind, _ = scSessionKind.first(vis)
	default:
		p.kind, _ = st.kindHd.result()
	}
}

// lookupTailFields runs the tail window's DR lookups on the line spanning
// [start, end) and keeps it when it is damaged; it returns the line's
// tailKeysIn. One pass finds which of their keys the line has at all;
// most lines have none.
func (st *summaryStream) lookupTailFields(line []byte, start, end int64) (keys uint16) {
	keys = tailKeysIn(line)
	damaged := false
	for i, f := range tailFields {
		if keys&tailKeyBit(f.key) == 0 {
			continue
		}
		v, at, ok, dmg := f.lineDamaged(line)
		if ok {
			*st.tailValues()[i] = tailValue{v, start + int64(at), true}
		}
		damaged = damaged || dmg
	}
	if damaged {
		// Kept while it can still be the line the tail window starts in:
		// its last window's worth of bytes is all the window can hold.
		keep := line[max(0, len(line)-liteWindow):]
		st.damaged = append(st.damaged, damagedLine{start: start, end: end, keys: keys, tail: bytes.Clone(keep)})
	}
	return keys
}

// scanLastTexts feeds the tail window's kR lookups (the last gitBranch and
// entrypoint) the line spanning [start, end), whose tailKeysIn are keys,
// and its newline.
func (st *summaryStream) scanLastTexts(line []byte, keys uint16, start, end int64, newline bool) {
	for _, t := range []struct {
		scans *[2]lastTextScan
		best  *tailValue
		key   string
	}{{&st.git, &st.gitBest, "gitBranch"}, {&st.entry, &st.entryBest, "entrypoint"}} {
		for i := range t.scans {
			k := &t.scans[i]
			// Without an occurrence on the line, only a value left open by
			// an earlier line can change anything.
			if k.pending || keys&textPatBit(t.key, i) != 0 {
				k.scan(line, start, t.best)
			}
			if newline && k.pending {
				k.scan(summaryNewline, end, t.best)
			}
		}
	}
}

// stream returns the state kept between lines, creating it on first use.
func (s *Summary) stream() *summaryStream {
	st := s.st
	if st == nil {
		st = &summaryStream{shown: promptScan{shown: true}}
		st.ts.field, st.gitHd.field, st.cwdHd.field = scTimestamp, scGitBranch, scCwd
		st.entryHd.field, st.kindHd.field = scEntrypoint, scSessionKind
		for i := range st.git {
			st.git[i].pat = scGitBranch.pats[i]
			st.entry[i].pat = scEntrypoint.pats[i]
		}
		s.st = st
	}
	return st
}

// ExpectAtLeast promises that the lines fed from now on will bring the
// transcript to at least n bytes (counted as AddLine counts them) before
// the summary is next relied on. A line that will then lie wholly before
// the tail window and after the head window is only counted, not searched:
// a reader that knows the file's size up front (a scan, a journal replay)
// pays for the two windows, not for the whole file.
//
// Skipping cannot change the result for lines that are JSON: a tail
// pattern's value then always ends on its own line. A malformed line can
// leave one open, which in a full scan swallows the text after it; no line
// is skipped while a value is open, but a skipped malformed line is not
// searched, so the value it would open is missed. The lite reader, which
// starts its search at the tail window, never sees that value either.
func (s *Summary) ExpectAtLeast(n int64) {
	st := s.stream()
	st.floor = max(st.floor, n)
}

// tailPending reports whether a tail pattern's value runs past the last
// line fed.
func (st *summaryStream) tailPending() bool {
	for i := range st.git {
		if st.git[i].pending || st.entry[i].pending {
			return true
		}
	}
	return false
}

// settle recomputes the fields after a line: the tail window moved.
func (s *Summary) settle() {
	st := s.st
	tailStart := max(0, st.size-int64(liteWindow))
	in := func(v tailValue) (string, bool) {
		if v.ok && v.at >= tailStart {
			return v.val, true
		}
		return "", false
	}
	var vals [len(tailFields)]struct {
		s  string
		ok bool
	}
	for i, v := range st.tailValues() {
		vals[i].s, vals[i].ok = in(*v)
	}
	if frag, end, keys, ok := st.fragment(tailStart); ok {
		// The window starts inside a damaged line: DR reads what the
		// window holds of it. A value from a later line still wins, and a
		// key the whole line lacks is not in its part either.
		for i, v := range st.tailValues() {
			if keys&tailKeyBit(tailFields[i].key) != 0 && (!v.ok || v.at < end) {
				vals[i].s, _, vals[i].ok = tailFields[i].line(frag)
			}
		}
	}
	p := &s.parts
	p.tailCT, p.tailCTSet = vals[0].s, vals[0].ok
	p.tailAI = vals[1].s
	p.tag = vals[2].s
	p.lastPrompt = vals[3].s
	p.summaryHint = vals[4].s
	p.relocatedCwd = vals[5].s
	p.gitTail, _ = in(st.gitBest)
	p.entryTail, p.entryTailSet = in(st.entryBest)
	s.resolve()
}

// fragment returns, when the tail window starting at tailStart starts
// inside a damaged line, the part of that line the window holds, where the
// line ends and which tail keys the whole line has. It first forgets the
// damaged lines that ended before the window.
//
// DR reads that part as a line of its own: its patterns, its parse, its
// appended record. The part may lack a key the whole line has (so no
// value), or parse as an object the whole line does not hold (another
// value), so settle evaluates it as it is rather than reasoning from the
// whole line's result.
func (st *summaryStream) fragment(tailStart int64) (frag []byte, end int64, keys uint16, ok bool) {
	i := 0
	for i < len(st.damaged) && st.damaged[i].end <= tailStart {
		i++
	}
	if i > 0 {
		st.damaged = append(st.damaged[:0], st.damaged[i:]...)
	}
	if len(st.damaged) == 0 || st.damaged[0].start >= tailStart {
		return nil, 0, 0, false
	}
	d := st.damaged[0]
	return d.tail[tailStart-(d.end-int64(len(d.tail))):], d.end, d.keys, true
}

var summaryNewline = []byte{'\n'}

// headText is sc over the head window as it grows, chunk by chunk (a
// pattern never spans chunks: they are lines and their newlines): per
// pattern, the first occurrence and its value as far as it has been read.
type headText struct {
	field *textField
	pat   [2]struct {
		found bool // the first occurrence has been seen
		done  bool // its value ended
		v     openValue
	}
}

// feed reads the next chunk of the head window. hasKey says whether the
// chunk holds the field's `"key":` at all (headKeysIn): without it, only a
// value already begun can go on.
func (h *headText) feed(chunk []byte, hasKey bool) {
	for i := range h.pat {
		p := &h.pat[i]
		if p.done {
			continue
		}
		rest := chunk
		if !p.found {
			if !hasKey {
				continue
			}
			o := bytes.Index(chunk, h.field.pats[i])
			if o < 0 {
				continue
			}
			p.found = true
			rest = chunk[o+len(h.field.pats[i]):]
		}
		if e := p.v.read(rest); e >= 0 {
			p.v.val = append(p.v.val, rest[:e]...)
			p.done = true
		}
	}
}

func (h *headText) result() (string, bool) {
	for _, p := range h.pat {
		if p.done {
			return textValue(p.v.val), true
		}
	}
	return "", false
}

// lastTextScan is one pattern of kR over the whole stream: it remembers the
// occurrence whose value has not ended yet (a value ends at the next
// unescaped quote, possibly on a later line).
type lastTextScan struct {
	pat     []byte
	pending bool
	occ     int64
	v       openValue
}

func (k *lastTextScan) scan(b []byte, off int64, best *tailValue) {
	i := 0
	for i <= len(b) {
		if k.pending {
			rest := b[i:]
			e := k.v.read(rest)
			if e < 0 {
				return
			}
			if !k.v.long && (!best.ok || k.occ > best.at) {
				k.v.val = append(k.v.val, rest[:e]...)
				*best = tailValue{textValue(k.v.val), k.occ, true}
			}
			k.pending, k.v.long, k.v.val = false, false, k.v.val[:0]
			i += e + 1
			continue
		}
		a := bytes.Index(b[i:], k.pat)
		if a < 0 {
			return
		}
		a += i
		k.pending, k.occ, k.v.skip = true, off+int64(a), false
		i = a + len(k.pat)
	}
}

// openValue is a text value read chunk by chunk up to the quote that ends
// it, as textValueEnd reads one within a single text: the byte after a
// backslash is skipped, even when the backslash ends a chunk.
type openValue struct {
	val  []byte // the value so far
	skip bool   // the value so far ends with a backslash
	long bool   // the value is longer than a window: no window sees it end, so it is not kept
}

// read reads chunk, which continues the value: it returns the index in
// chunk of the quote that ends it, or -1 when the value runs past chunk,
// which it then keeps (unless the value is too long to matter). The part
// before the quote is the caller's to keep.
func (v *openValue) read(chunk []byte) int {
	j := 0
	if v.skip && j < len(chunk) {
		v.skip = false
		j++
	}
	for j < len(chunk) && chunk[j] != '"' {
		if chunk[j] == '\\' {
			if j+1 == len(chunk) {
				v.skip = true
			}
			j += 2
			continue
		}
		j++
	}
	if j < len(chunk) {
		return j
	}
	if !v.long {
		v.val = append(v.val, chunk...)
		if len(v.val) > liteWindow {
			v.long, v.val = true, nil
		}
	}
	return -1
}
