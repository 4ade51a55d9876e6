package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// ForkOptions says how to fork a session (see Fork).
type ForkOptions struct {
	// SessionID is the source session's id, recorded in every entry's
	// forkedFrom.sessionId; it also picks the metadata records that belong
	// to the session. Required, a UUID.
	SessionID string
	// NewSessionID is the fork's session id. Required, a UUID.
	NewSessionID string
	// UpTo, when set, is the uuid of the last entry to copy (inclusive);
	// an entry whose queued-command source_uuid it is also matches. A uuid
	// the session does not have is an error wrapping errdefs.ErrNotFound.
	UpTo string
	// Title is the fork's title. When empty (or only whitespace) it is
	// "<source title> (fork)", the source title being what forkSession
	// derives: the last custom title, else the AI title, else the first
	// prompt, else "Forked session". A title given is trimmed and checked as
	// NormalizeTitle does, and used without " (fork)".
	Title string
	// SidecarTitle is the title of the source's custom-title.json sidecar
	// (see ParseTitleSidecar), which forkSession reads too; "" for none.
	SidecarTitle string
	// NewUUID makes the fork's entry uuids; nil means random UUIDs v4.
	NewUUID func() string
	// Now gives the time written as the last entry's timestamp and the
	// metadata records'; nil means time.Now.
	Now func() time.Time
}

// ForkResult says what Fork wrote.
type ForkResult struct {
	// Entries is the number of conversation entries written.
	Entries int
	// Lines is the number of lines written, metadata records included.
	Lines int
	// Title is the custom-title written at the end of the fork.
	Title string
}

// Fork writes to dst the transcript of a new session branched from the one
// read from src, as the official TypeScript SDK's forkSession (0.3.329)
// writes it, entry for entry and key for key:
//
//   - The conversation entries (user, assistant, attachment, system and
//     progress lines with a string uuid) that are not sidechain entries
//     are kept, up to UpTo when it is set; every other line is dropped:
//     file-history-snapshot, summary, queue-operation, custom-title,
//     ai-title, last-prompt, tag, permission-mode and unknown types.
//   - progress entries are dropped too, and a parentUuid naming one is
//     re-pointed to the first non-progress entry up its chain.
//   - Each entry gets a fresh uuid; parentUuid, logicalParentUuid, the
//     uuids in a compact boundary's preservedMessages / preservedSegment,
//     a queued command's source_uuid and a deferred-tools record's
//     nameOnlyAnnouncements are remapped. A parentUuid naming an entry that
//     is not copied becomes null.
//   - Every entry gets sessionId = NewSessionID, isSidechain false and
//     forkedFrom {sessionId, messageUuid: its old uuid}, and loses
//     teamName, agentName, sessionKind, slug, sourceToolAssistantUUID,
//     summarizedTurnPromptUuids, droppedPromptUuids, sentAsUuid,
//     rowsAheadOfPutBack and turnAttributionKey; an assistant entry gets
//     requestSessionId (its own, else the session it was forked from, else
//     its old sessionId); the last entry's timestamp becomes Now.
//   - Records of the session that carry over are rewritten for the fork:
//     history-suppression and hybrid-organization before the entries,
//     content-replacement, atis-latch, tools-used and relocated after them,
//     then a custom-title with the fork's title.
//
// Keys keep their order (new keys go last, as JavaScript's object spread
// puts them) and values their bytes: entries are edited as ordered JSON,
// never decoded into maps. Insignificant whitespace is removed, and invalid
// UTF-8 becomes U+FFFD, as in the SDK's output. Where the SDK's
// JSON.parse + JSON.stringify would re-spell a value (an escape such as
// \u00e9 or \/, a number such as 1.0 or 1e2, a lone surrogate escape in
// upper case, a duplicated key's spelling), Fork keeps the bytes as the
// agent wrote them.
//
// Fork reads src twice when it is an io.Seeker (from its current offset):
// once to index the entries (uuid, parent, kind: memory proportional to the
// number of entries, not their size) and once to rewrite them, so memory
// stays about one line plus that index. Any other reader is read into
// memory first. Nothing is written to dst before the first pass succeeds,
// but a failure while writing leaves dst partial: write to a temporary file
// and rename it into place.
//
// Errors: an invalid id or title wraps errdefs.ErrInvalidArgument, as does
// a session with nothing to fork (no conversation entries outside
// sidechains) or with data-flow or derived-from records, which only the
// Claude Code CLI knows how to carry over; an UpTo not in the session wraps
// errdefs.ErrNotFound. Read and write errors are returned as they are.
//
// Where the SDK's fork differs, deliberately or not:
//   - UpTo is looked up in file order; the SDK first looks on the resumed
//     conversation chain, which only matters when a uuid is both an entry
//     off that chain and the source_uuid of a queued command on it.
//   - After cutting at UpTo, the SDK also leaves out branches abandoned by
//     rewinding behind a compaction (HUe); Fork keeps them. Cuts next to a
//     compaction (ending before a compact boundary written after the last
//     message, UUe, and the boundary metadata dropped when cutting at its
//     anchor, FUe) are done as the SDK does them.
//   - A parentUuid whose chain of progress entries loops is null where the
//     SDK would point it at a progress entry it does not copy.
func Fork(src io.Reader, dst io.Writer, opt ForkOptions) (ForkResult, error) {
	if err := checkSDKSessionID("source session id", opt.SessionID); err != nil {
		return ForkResult{}, err
	}
	if err := checkSDKSessionID("new session id", opt.NewSessionID); err != nil {
		return ForkResult{}, err
	}
	title := jsTrim(opt.Title)
	if title != "" {
		var err error
		if title, err = NormalizeTitle(title); err != nil {
			return ForkResult{}, err
		}
	}
	newUUID := opt.NewUUID
	if newUUID == nil {
		newUUID = uuid.NewString
	}
	now := time.Now
	if opt.Now != nil {
		now = opt.Now
	}

	rs, start, err := rewindable(src)
	if err != nil {
		return ForkResult{}, err
	}
	ix, err := indexFork(rs, opt.SessionID)
	if err != nil {
		return ForkResult{}, err
	}
	ix.summary.SetSidecarTitle(opt.SidecarTitle)
	plan, err := ix.plan(opt.UpTo)
	if err != nil {
		return ForkResult{}, fmt.Errorf("fork of session %s: %w", opt.SessionID, err)
	}
	if title == "" {
		t := ix.summary.forkTitle()
		if t == "" {
			t = "Forked session"
		}
		title = t + " (fork)"
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return ForkResult{}, err
	}

	w := &forkWriter{
		w:      bufio.NewWriterSize(dst, 64<<10),
		plan:   plan,
		src:    opt.SessionID,
		sid:    opt.NewSessionID,
		now:    now().UTC().Format("2006-01-02T15:04:05.000Z"),
		newID:  newUUID,
		newIDs: make(map[string]string, len(plan.out)),
	}
	res, err := w.run(rs, ix, title)
	if err != nil {
		return ForkResult{}, err
	}
	return res, nil
}

// rewindable returns src as an io.ReadSeeker and the offset to come back
// to, reading it into memory when it cannot seek.
func rewindable(src io.Reader) (io.ReadSeeker, int64, error) {
	if rs, ok := src.(io.ReadSeeker); ok {
		if off, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, off, nil
		}
	}
	data, err := io.ReadAll(src)
	if err != nil {
		return nil, 0, err
	}
	return bytes.NewReader(data), 0, nil
}

// Entry kinds: the types forkSession copies (DUe).
const (
	forkUser uint8 = iota + 1
	forkAssistant
	forkAttachment
	forkSystem
	forkProgress
)

var forkKinds = map[string]uint8{
	"user": forkUser, "assistant": forkAssistant, "attachment": forkAttachment,
	"system": forkSystem, "progress": forkProgress,
}

// forkEntry is what the first pass keeps of one non-sidechain entry.
type forkEntry struct {
	line   int
	uuid   string
	parent string // "" when null, absent, empty or not a string: the chain ends
	kind   uint8
	// logical is logicalParentUuid when it is a string.
	logical    string
	logicalStr bool
	// source is the queued command's source_uuid (Np), "" if none.
	source string
	// Compact boundaries (system / compact_boundary) only:
	boundary  bool
	rewind    bool   // Yj: a boundary written by rewinding (durationMs 0, anchored at itself)
	anchor    string // p_(e).anchorUuid when it is a string
	hasAnchor bool
	preserved []string // Yh: preservedMessages.uuids, preservedSegment head and tail
}

// forkIndex is the first pass over the source.
type forkIndex struct {
	entries []forkEntry // non-sidechain conversation entries, in file order

	historySuppressed bool
	orgs              []string // hybrid organizations, lower case, first-seen order
	replacements      [][]byte // content-replacement objects
	atis              string
	atisSet           bool
	tools             []string
	toolsSet          bool
	relocated         string
	unsupported       string

	summary Summary // for the default title
}

func indexFork(r io.Reader, sessionID string) (*forkIndex, error) {
	ix := &forkIndex{}
	sc := NewLineScanner(r)
	for n := 0; sc.Scan(); n++ {
		raw := sc.Line()
		ix.summary.AddLine(raw, sc.HasNewline())
		line := trimLeadingControl(raw)
		if len(line) == 0 {
			continue
		}
		line = nodeUTF8(line)
		obj, isObj, ok := jsParseObject(line)
		if !ok || !isObj {
			continue
		}
		ix.add(n, obj, sessionID)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ix, nil
}

// trimLeadingControl drops what the SDK skips before parsing a line: every
// byte up to and including ' '.
func trimLeadingControl(line []byte) []byte {
	i := 0
	for i < len(line) && line[i] <= ' ' {
		i++
	}
	return line[i:]
}

// add is Kj: it files one parsed line.
func (ix *forkIndex) add(n int, obj jsObject, sessionID string) {
	typ, _ := obj.str("type")
	id, hasID := obj.str("uuid")
	if kind := forkKinds[typ]; kind != 0 && hasID {
		if v, ok := obj.get("isSidechain"); ok && jsTruthy(v) {
			return
		}
		e := forkEntry{line: n, uuid: id, kind: kind}
		e.parent, _ = obj.str("parentUuid")
		e.logical, e.logicalStr = obj.str("logicalParentUuid")
		e.source = queuedSource(obj, typ)
		if sub, _ := obj.str("subtype"); kind == forkSystem && sub == "compact_boundary" {
			e.boundary = true
			e.compactInfo(obj)
		}
		ix.entries = append(ix.entries, e)
		return
	}
	ownSession := func() bool { s, ok := obj.str("sessionId"); return ok && s == sessionID }
	switch typ {
	case "history-suppression":
		ix.historySuppressed = true
	case "atis-latch":
		if a, ok := obj.str("atis"); ok && ownSession() && atisPrintable(a) {
			ix.atis, ix.atisSet = a, true
		}
	case "tools-used":
		if v, ok := obj.get("tools"); ok && v[0] == '[' && ownSession() {
			ix.tools, ix.toolsSet = nil, true
			jsEachElement(v, func(el []byte) bool {
				if s, ok := jsStringValue(el); ok && s != "" {
					ix.tools = append(ix.tools, s)
				}
				return true
			})
		}
	case "data-flow-records", "data-flow-incomplete":
		if _, ok := obj.str("sessionId"); ok && !obj.has("agentId") && ix.unsupported == "" {
			ix.unsupported = typ
		}
	case "derived-from":
		if ownSession() && ix.unsupported == "" {
			ix.unsupported = typ
		}
	case "hybrid-organization":
		if o, ok := obj.str("organizationUuid"); ok && sdkUUID(o) {
			o = string(bytes.ToLower([]byte(o)))
			for _, x := range ix.orgs {
				if x == o {
					return
				}
			}
			ix.orgs = append(ix.orgs, o)
		}
	case "content-replacement":
		if v, ok := obj.get("replacements"); ok && v[0] == '[' && ownSession() {
			jsEachElement(v, func(el []byte) bool {
				if el[0] == '{' {
					if c, ok := jsCompact(el); ok {
						ix.replacements = append(ix.replacements, c)
					}
				}
				return true
			})
		}
	case "relocated":
		if c, ok := obj.str("relocatedCwd"); ok && c != "" && ownSession() {
			ix.relocated = c
		}
	}
}

func atisPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// queuedSource is Np: the source_uuid of a queued command (an attachment
// of type queued_command, or the command of a voice_call_talk fold), when
// it is a non-empty string.
func queuedSource(obj jsObject, typ string) string {
	cmd := queuedCommand(obj, typ)
	if cmd == nil {
		return ""
	}
	s, _ := cmd.str("source_uuid")
	return s
}

// queuedCommand is q$.
func queuedCommand(obj jsObject, typ string) jsObject {
	switch typ {
	case "system":
		if sub, _ := obj.str("subtype"); sub != "voice_call_talk" {
			return nil
		}
		fold := obj.object("fold")
		if fold == nil {
			return nil
		}
		return fold.object("command")
	case "attachment":
		a := obj.object("attachment")
		if t, _ := a.str("type"); t == "queued_command" {
			return a
		}
	}
	return nil
}

// compactInfo reads what UUe needs of a compact boundary: p_, Yh and Yj.
func (e *forkEntry) compactInfo(obj jsObject) {
	cm := obj.object("compactMetadata")
	if cm == nil {
		return
	}
	pm, hasPM := cm.get("preservedMessages")
	ps, hasPS := cm.get("preservedSegment")
	// p_: preservedMessages ?? preservedSegment, if it has an anchorUuid.
	var p []byte
	switch {
	case hasPM && !bytes.Equal(pm, litNull):
		p = pm
	case hasPS:
		p = ps
	}
	if po := jsObjectOf(p); po != nil {
		e.anchor, e.hasAnchor = po.str("anchorUuid")
	}
	if pmo := jsObjectOf(pm); pmo != nil {
		if u, ok := pmo.get("uuids"); ok && u[0] == '[' {
			jsEachElement(u, func(el []byte) bool {
				if s, ok := jsStringValue(el); ok {
					e.preserved = append(e.preserved, s)
				}
				return true
			})
		}
	}
	if pso := jsObjectOf(ps); pso != nil {
		for _, k := range []string{"headUuid", "tailUuid"} {
			if s, ok := pso.str(k); ok {
				e.preserved = append(e.preserved, s)
			}
		}
	}
	if d, ok := cm.get("durationMs"); ok && jsIsZero(d) && e.hasAnchor && e.anchor == e.uuid {
		e.rewind = true
	}
}

// zj is Zj: a compact boundary a compaction wrote (not a rewind).
func (e *forkEntry) zj() bool { return e.boundary && !e.rewind }

// forkPlan is what to write.
type forkPlan struct {
	out []forkOut // in file order
	// known maps each copied or dropped-progress uuid to its entry (the
	// last one with that uuid): the SDK's uuid map covers both.
	known map[string]*forkEntry
	// message holds the uuids of the entries written (non-progress).
	message map[string]bool
}

type forkOut struct {
	e         *forkEntry
	parent    string // old uuid of the new parent
	hasParent bool
	last      bool
	strip     bool // FUe: drop the boundary's preserved metadata
}

var errNothingToFork = fmt.Errorf("the session has no messages to fork (no conversation entries outside sidechains): %w", errdefs.ErrInvalidArgument)

func (ix *forkIndex) plan(upTo string) (*forkPlan, error) {
	if ix.unsupported != "" {
		return nil, fmt.Errorf("the session has %s records, which sessiond cannot carry over into a fork: %w", ix.unsupported, errdefs.ErrInvalidArgument)
	}
	if len(ix.entries) == 0 {
		return nil, errNothingToFork
	}
	sel := make([]*forkEntry, len(ix.entries))
	for i := range ix.entries {
		sel[i] = &ix.entries[i]
	}
	var target string
	if upTo != "" {
		b := -1
		for i, e := range sel {
			if e.uuid == upTo {
				b = i
				break
			}
		}
		if b < 0 {
			for i, e := range sel {
				if e.source == upTo {
					b = i
					break
				}
			}
		}
		if b < 0 {
			return nil, fmt.Errorf("message %s not found in the session: %w", upTo, errdefs.ErrNotFound)
		}
		target = sel[b].uuid
		sel = uue(sel[:b+1])
	}

	p := &forkPlan{known: make(map[string]*forkEntry, len(sel)), message: make(map[string]bool, len(sel))}
	for _, e := range sel {
		p.known[e.uuid] = e
		if e.kind != forkProgress {
			p.message[e.uuid] = true
		}
	}
	for _, e := range sel {
		if e.kind == forkProgress {
			continue
		}
		o := forkOut{e: e, strip: upTo != "" && e.zj() && e.hasAnchor && e.anchor == target}
		o.parent, o.hasParent = p.parentOf(e)
		p.out = append(p.out, o)
	}
	if len(p.out) == 0 {
		return nil, errNothingToFork
	}
	p.out[len(p.out)-1].last = true
	return p, nil
}

// parentOf walks up from e's parent past progress entries.
func (p *forkPlan) parentOf(e *forkEntry) (string, bool) {
	var seen map[string]bool
	for id := e.parent; id != ""; {
		o, ok := p.known[id]
		if !ok {
			return "", false
		}
		if o.kind != forkProgress {
			return id, true
		}
		if seen[id] {
			// A loop of progress entries: the SDK points at the progress
			// entry, which it does not copy, unless a message shares its uuid.
			return id, p.message[id]
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		seen[id] = true
		id = o.parent
	}
	return "", false
}

// uue is UUe: when the cut leaves a compact boundary (written by a
// compaction) after the last user or assistant message, the fork ends
// before it, and before the messages the boundary's compaction summarised
// away, unless that leaves no message.
func uue(e []*forkEntry) []*forkEntry {
	t := -1
	for k := len(e) - 1; k >= 0; k-- {
		if e[k].kind == forkUser || e[k].kind == forkAssistant {
			t = k
			break
		}
	}
	n := -1
	for k := t + 1; k < len(e); k++ {
		if e[k].zj() {
			n = k
			break
		}
	}
	if n < 0 {
		return e
	}
	o, r := e[:n], e[n]
	s := map[string]bool{}
	if !(r.hasAnchor && r.anchor == r.uuid) {
		for _, u := range r.preserved {
			s[u] = true
		}
		if r.logicalStr {
			s[r.logical] = true
		}
	}
	i := -1
	for k := len(o) - 1; k >= 0; k-- {
		if s[o[k].uuid] {
			i = k
			break
		}
	}
	var a *forkEntry
	for k := len(o) - 1; k >= 0; k-- {
		if o[k].boundary {
			a = o[k]
			break
		}
	}
	l := -1
	if i >= 0 && a != nil && !a.rewind && a.hasAnchor && stringIn(a.preserved, o[i].uuid) {
		for k := len(o) - 1; k >= 0; k-- {
			if o[k].uuid == a.anchor {
				l = k
				break
			}
		}
	}
	d := o
	if c := max(i, l); c >= 0 {
		d = o[:c+1]
	}
	for _, x := range d {
		if x.kind != forkProgress {
			return d
		}
	}
	return e
}

func stringIn(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// forkWriter is the second pass.
type forkWriter struct {
	w      *bufio.Writer
	plan   *forkPlan
	src    string // source session id
	sid    string // new session id
	now    string // ISO time, as Date.toISOString
	newID  func() string
	newIDs map[string]string
	lines  int
	buf    []byte
}

// id returns the new uuid of old, which must be in the plan's uuid map.
func (w *forkWriter) id(old string) string {
	n, ok := w.newIDs[old]
	if !ok {
		n = w.newID()
		w.newIDs[old] = n
	}
	return n
}

func (w *forkWriter) emit(line []byte) error {
	w.lines++
	line = append(line, '\n')
	_, err := w.w.Write(line)
	return err
}

func (w *forkWriter) run(r io.Reader, ix *forkIndex, title string) (ForkResult, error) {
	if ix.historySuppressed {
		b := append(w.buf[:0], `{"type":"history-suppression","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"cause":"fork_inherit","ts":`...)
		b = appendJSString(b, w.now)
		if err := w.emit(append(b, '}')); err != nil {
			return ForkResult{}, err
		}
	}
	for _, o := range ix.orgs {
		b := append(w.buf[:0], `{"type":"hybrid-organization","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"organizationUuid":`...)
		b = appendJSString(b, o)
		if err := w.emit(append(b, '}')); err != nil {
			return ForkResult{}, err
		}
	}

	sc := NewLineScanner(r)
	next := 0
	out := w.plan.out
	for n := 0; next < len(out) && sc.Scan(); n++ {
		if n != out[next].line() {
			continue
		}
		line, err := w.rewrite(sc.Line(), &out[next])
		if err != nil {
			return ForkResult{}, err
		}
		if err := w.emit(line); err != nil {
			return ForkResult{}, err
		}
		w.buf = line[:0]
		next++
	}
	if err := sc.Err(); err != nil {
		return ForkResult{}, err
	}
	if next < len(out) {
		return ForkResult{}, errors.New("fork: the source transcript changed between the two passes")
	}

	if len(ix.replacements) > 0 {
		b := append(w.buf[:0], `{"type":"content-replacement","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"replacements":[`...)
		for i, r := range ix.replacements {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, r...)
		}
		b = append(b, `],"uuid":`...)
		b = appendJSString(b, w.newID())
		b = append(b, `,"timestamp":`...)
		b = appendJSString(b, w.now)
		if err := w.emit(append(b, '}')); err != nil {
			return ForkResult{}, err
		}
	}
	if ix.atisSet {
		b := append(w.buf[:0], `{"type":"atis-latch","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"atis":`...)
		b = appendJSString(b, ix.atis)
		if err := w.emit(append(b, '}')); err != nil {
			return ForkResult{}, err
		}
	}
	if ix.toolsSet {
		b := append(w.buf[:0], `{"type":"tools-used","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"tools":[`...)
		for i, t := range ix.tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSString(b, t)
		}
		if err := w.emit(append(b, "]}"...)); err != nil {
			return ForkResult{}, err
		}
	}
	if ix.relocated != "" {
		b := append(w.buf[:0], `{"type":"relocated","sessionId":`...)
		b = appendJSString(b, w.sid)
		b = append(b, `,"relocatedCwd":`...)
		b = appendJSString(b, ix.relocated)
		if err := w.emit(append(b, '}')); err != nil {
			return ForkResult{}, err
		}
	}
	b := append(w.buf[:0], `{"type":"custom-title","sessionId":`...)
	b = appendJSString(b, w.sid)
	b = append(b, `,"customTitle":`...)
	b = appendJSString(b, title)
	b = append(b, `,"uuid":`...)
	b = appendJSString(b, w.newID())
	b = append(b, `,"timestamp":`...)
	b = appendJSString(b, w.now)
	if err := w.emit(append(b, '}')); err != nil {
		return ForkResult{}, err
	}
	if err := w.w.Flush(); err != nil {
		return ForkResult{}, err
	}
	return ForkResult{Entries: len(out), Lines: w.lines, Title: title}, nil
}

func (o *forkOut) line() int { return o.e.line }

// Keys forkSession removes from every entry (Vj, but isSidechain, which it sets to false).
var forkDropKeys = []string{"teamName", "agentName", "sessionKind", "slug", "sourceToolAssistantUUID",
	"summarizedTurnPromptUuids", "droppedPromptUuids", "sentAsUuid", "rowsAheadOfPutBack", "turnAttributionKey"}

var (
	litNull  = []byte("null")
	litTrue  = []byte("true")
	litFalse = []byte("false")
)

// rewrite builds the fork's version of one entry, as
// {...y, ...x, ...w, ...P, ...F, uuid, parentUuid, logicalParentUuid,
// sessionId, timestamp, ...Vj, requestSessionId, forkedFrom}.
func (w *forkWriter) rewrite(raw []byte, o *forkOut) ([]byte, error) {
	line, ok := jsCompact(nodeUTF8(trimLeadingControl(raw)))
	var obj jsObject
	var isObj bool
	if ok {
		obj, isObj, ok = jsParseObject(line)
	}
	if id, _ := obj.str("uuid"); !ok || !isObj || id != o.e.uuid {
		return nil, errors.New("fork: the source transcript changed between the two passes")
	}
	p := w.plan
	typ, _ := obj.str("type")
	sub, _ := obj.str("subtype")
	reqSession := requestSessionOf(obj, typ) // from the entry as it was

	// x: a refusal fallback is neutralized.
	if typ == "system" && sub == "model_refusal_fallback" {
		obj = obj.set("neutralizedByFork", litTrue)
	}
	// w: a deferred-tools record's announcements that name entries.
	if typ == "attachment" {
		if a := obj.object("attachment"); a != nil {
			if t, _ := a.str("type"); t == "deferred_tools_record" {
				if v, ok := a.get("nameOnlyAnnouncements"); ok && v[0] == '[' {
					b := []byte{'['}
					jsEachElement(v, func(el []byte) bool {
						if s, ok := jsStringValue(el); ok && p.known[s] != nil {
							if len(b) > 1 {
								b = append(b, ',')
							}
							b = appendJSString(b, w.id(s))
						}
						return true
					})
					a = a.set("nameOnlyAnnouncements", append(b, ']'))
					obj = obj.set("attachment", a.appendTo(nil))
				}
			}
		}
	}
	// FUe and P (X$): a compact boundary's preserved uuids.
	if typ == "system" {
		if cm := obj.object("compactMetadata"); cm != nil {
			changed := false
			if o.strip {
				cm = cm.del("preservedMessages").del("preservedSegment").del("postTokens")
				changed = true
			}
			pm, hasPM := cm.get("preservedMessages")
			ps, hasPS := cm.get("preservedSegment")
			if hasPM || hasPS || cm.has("runningTurnSends") {
				cm = cm.del("preservedMessages").del("preservedSegment").del("runningTurnSends")
				if hasPM {
					cm = cm.set("preservedMessages", w.remapFields(pm, "anchorUuid", "uuids", "allUuids"))
				}
				if hasPS {
					cm = cm.set("preservedSegment", w.remapFields(ps, "headUuid", "anchorUuid", "tailUuid"))
				}
				changed = true
			}
			if changed {
				obj = obj.set("compactMetadata", cm.appendTo(nil))
			}
		}
	}
	// F: a queued command's source_uuid.
	if src := o.e.source; src != "" && p.known[src] != nil {
		nid := appendJSString(nil, w.id(src))
		if typ == "attachment" {
			a := obj.object("attachment").set("source_uuid", nid)
			obj = obj.set("attachment", a.appendTo(nil))
		} else if fold := obj.object("fold"); fold != nil {
			cmd := fold.object("command").set("source_uuid", nid)
			fold = fold.set("command", cmd.appendTo(nil))
			obj = obj.set("fold", fold.appendTo(nil))
		}
	}

	b := appendJSString(nil, w.id(o.e.uuid))
	obj = obj.set("uuid", b)
	if o.hasParent {
		obj = obj.set("parentUuid", appendJSString(nil, w.id(o.parent)))
	} else {
		obj = obj.set("parentUuid", litNull)
	}
	if v, ok := obj.get("logicalParentUuid"); ok && !bytes.Equal(v, litNull) {
		if s, ok := jsStringValue(v); ok && p.known[s] != nil {
			obj = obj.set("logicalParentUuid", appendJSString(nil, w.id(s)))
		} else {
			obj = obj.set("logicalParentUuid", litNull)
		}
	}
	obj = obj.set("sessionId", appendJSString(nil, w.sid))
	if o.last {
		obj = obj.set("timestamp", appendJSString(nil, w.now))
	}
	obj = obj.set("isSidechain", litFalse)
	for _, k := range forkDropKeys {
		obj = obj.del(k)
	}
	if reqSession != nil {
		obj = obj.set("requestSessionId", reqSession)
	} else {
		obj = obj.del("requestSessionId")
	}
	ff := append([]byte(`{"sessionId":`), appendJSString(nil, w.src)...)
	ff = append(ff, `,"messageUuid":`...)
	ff = appendJSString(ff, o.e.uuid)
	obj = obj.set("forkedFrom", append(ff, '}'))
	return obj.appendTo(w.buf[:0]), nil
}

// requestSessionOf is $j: for an assistant entry, the first string among
// its requestSessionId, the sessionId of the session it was forked from
// and its sessionId (as raw JSON); nil otherwise.
func requestSessionOf(obj jsObject, typ string) []byte {
	if typ != "assistant" {
		return nil
	}
	if v, ok := obj.get("requestSessionId"); ok && v[0] == '"' {
		return v
	}
	if ff := obj.object("forkedFrom"); ff != nil {
		if v, ok := ff.get("sessionId"); ok && v[0] == '"' {
			return v
		}
	}
	if v, ok := obj.get("sessionId"); ok && v[0] == '"' {
		return v
	}
	return nil
}

// remapFields is X$'s l: a copy of the object v whose listed members
// (strings, or arrays of them) name copied messages get their new uuids;
// anything that is not an object is kept as it is.
func (w *forkWriter) remapFields(v []byte, keys ...string) []byte {
	o := jsObjectOf(v)
	if o == nil {
		return v
	}
	remap := func(el []byte) []byte {
		if s, ok := jsStringValue(el); ok && w.plan.message[s] {
			return appendJSString(nil, w.id(s))
		}
		return el
	}
	for _, k := range keys {
		m, ok := o.get(k)
		if !ok {
			continue
		}
		if m[0] == '[' {
			b := []byte{'['}
			first := true
			jsEachElement(m, func(el []byte) bool {
				if !first {
					b = append(b, ',')
				}
				first = false
				b = append(b, remap(el)...)
				return true
			})
			o = o.set(k, append(b, ']'))
		} else {
			o = o.set(k, remap(m))
		}
	}
	return o.appendTo(nil)
}

// JSON objects as JavaScript sees them.

// jsMember is one member of a JSON object.
type jsMember struct {
	key    string // decoded
	rawKey []byte // as written, quotes included
	val    []byte // as written
}

// jsObject is a JSON object's members in order, as JSON.parse builds it:
// when a key repeats, the member stays where it first appeared and takes
// the last value.
type jsObject []jsMember

// jsParseObject splits data, one JSON value with optional JSON whitespace
// around it, into members. ok is false when data is not one well-formed JSON
// value (as encoding/json defines it, invalid UTF-8 aside), isObj when it is
// well-formed but not an object.
func jsParseObject(data []byte) (obj jsObject, isObj, ok bool) {
	s := scanner{data: data}
	s.ws()
	if s.pos >= len(data) {
		return nil, false, false
	}
	if data[s.pos] != '{' {
		if s.value() != nil {
			return nil, false, false
		}
		s.ws()
		return nil, false, s.pos == len(data)
	}
	s.pos++
	s.ws()
	if s.pos < len(data) && data[s.pos] == '}' {
		s.pos++
		s.ws()
		return jsObject{}, true, s.pos == len(data)
	}
	for {
		if s.pos >= len(data) || data[s.pos] != '"' {
			return nil, false, false
		}
		ks := s.pos
		flags, err := s.str()
		if err != nil {
			return nil, false, false
		}
		rawKey := data[ks:s.pos]
		key := string(rawKey[1 : len(rawKey)-1])
		if flags != 0 {
			key = unquote(nodeUTF8(rawKey[1 : len(rawKey)-1]))
		}
		s.ws()
		if s.pos >= len(data) || data[s.pos] != ':' {
			return nil, false, false
		}
		s.pos++
		s.ws()
		vs := s.pos
		if s.value() != nil {
			return nil, false, false
		}
		val := data[vs:s.pos]
		if i := obj.index(key); i >= 0 {
			obj[i].val = val
		} else {
			obj = append(obj, jsMember{key: key, rawKey: rawKey, val: val})
		}
		s.ws()
		if s.pos >= len(data) {
			return nil, false, false
		}
		if data[s.pos] == ',' {
			s.pos++
			s.ws()
			continue
		}
		if data[s.pos] != '}' {
			return nil, false, false
		}
		s.pos++
		break
	}
	s.ws()
	if s.pos != len(data) {
		return nil, false, false
	}
	return obj, true, true
}

// jsCompact returns the JSON value v without insignificant whitespace,
// and whether v is one well-formed JSON value.
func jsCompact(v []byte) ([]byte, bool) {
	s := scanner{data: v}
	s.ws()
	st := s.pos
	s.compact, s.out, s.seg = true, make([]byte, 0, len(v)), st
	if s.pos >= len(v) || s.value() != nil {
		return nil, false
	}
	s.flush()
	s.compact = false
	s.ws()
	return s.out, s.pos == len(v)
}

func (o jsObject) index(key string) int {
	for i := range o {
		if o[i].key == key {
			return i
		}
	}
	return -1
}

func (o jsObject) get(key string) ([]byte, bool) {
	if i := o.index(key); i >= 0 {
		return o[i].val, true
	}
	return nil, false
}

func (o jsObject) has(key string) bool { return o.index(key) >= 0 }

// str returns the member key when it is a string, decoded.
func (o jsObject) str(key string) (string, bool) {
	v, ok := o.get(key)
	if !ok {
		return "", false
	}
	return jsStringValue(v)
}

// isTrue reports whether member key is true (=== true).
func (o jsObject) isTrue(key string) bool {
	v, ok := o.get(key)
	return ok && bytes.Equal(v, litTrue)
}

// object returns member key when it is an object (not null, not an array).
func (o jsObject) object(key string) jsObject {
	v, _ := o.get(key)
	return jsObjectOf(v)
}

// jsObjectOf parses v when it is a JSON object, else returns nil.
func jsObjectOf(v []byte) jsObject {
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	obj, isObj, ok := jsParseObject(v)
	if !ok || !isObj {
		return nil
	}
	if obj == nil {
		obj = jsObject{}
	}
	return obj
}

// set gives key the value val (raw JSON): in place when the key exists,
// else as a new last member, as an object spread does.
func (o jsObject) set(key string, val []byte) jsObject {
	if i := o.index(key); i >= 0 {
		o[i].val = val
		return o
	}
	return append(o, jsMember{key: key, rawKey: appendJSString(nil, key), val: val})
}

// del removes key, as an object spread does with a key set to undefined.
func (o jsObject) del(key string) jsObject {
	if i := o.index(key); i >= 0 {
		return append(o[:i:i], o[i+1:]...)
	}
	return o
}

// appendTo appends the object as compact JSON.
func (o jsObject) appendTo(b []byte) []byte {
	b = append(b, '{')
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.rawKey...)
		b = append(b, ':')
		b = append(b, m.val...)
	}
	return append(b, '}')
}

// jsStringValue decodes v when it is a JSON string.
func jsStringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	body := nodeUTF8(v[1 : len(v)-1])
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	return unquote(body), true
}

// jsTruthy reports whether the JSON value v is truthy in JavaScript: not
// false, null, 0 or "".
func jsTruthy(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case 'f', 'n':
		return false
	case '"':
		return len(v) > 2
	case 't', '{', '[':
		return true
	}
	return !jsIsZero(v)
}

// jsIsZero reports whether v is a JSON number equal to 0 in JavaScript
// (-0 and numbers too small for a double included).
func jsIsZero(v []byte) bool {
	if len(v) == 0 || !(v[0] == '-' || '0' <= v[0] && v[0] <= '9') {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f == 0 && (err == nil || errors.Is(err, strconv.ErrRange))
}

// jsEachElement calls fn with each element of the JSON array arr until fn
// returns false.
func jsEachElement(arr []byte, fn func(el []byte) bool) {
	s := scanner{data: arr}
	s.ws()
	if s.pos >= len(arr) || arr[s.pos] != '[' {
		return
	}
	s.pos++
	s.ws()
	if s.pos < len(arr) && arr[s.pos] == ']' {
		return
	}
	for s.pos < len(arr) {
		vs := s.pos
		if s.value() != nil {
			return
		}
		if !fn(arr[vs:s.pos]) {
			return
		}
		s.ws()
		if s.pos >= len(arr) || arr[s.pos] != ',' {
			return
		}
		s.pos++
		s.ws()
	}
}
