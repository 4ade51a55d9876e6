package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
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
// A fork up to UpTo ends where forkSession ends it: at the first entry
// with that uuid (or queued-command source_uuid) on the conversation chain
// a resume would load, or after it, else anywhere; before a compact
// boundary written after the last message, and before the messages that
// compaction summarised (UUe); with the preserved-message metadata of a
// boundary anchored at the cut dropped (FUe); and without the branches a
// resume of the fork would pick instead of the cut's own, which come
// later in the file (HUe). The chain is found as the SDK finds it ($p:
// latest leaf, compaction relinking, split assistant messages and their
// tool results).
//
// Where Fork differs from forkSession:
//   - Values are kept as written (see above) where the SDK re-spells them.
//   - A parentUuid whose chain of progress entries loops is null, where
//     the SDK points it at a progress entry it does not copy.
//   - Sessions with data-flow or derived-from records are refused.
//   - Malformed metadata the SDK would crash on (a truthy
//     preservedMessages without a uuids array) is ignored; values of
//     unexpected JSON types (a numeric parentUuid, an object agentId...)
//     are treated as absent; timestamps are ordered by their bytes, where
//     the SDK uses localeCompare (the same order for ISO 8601 times).
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
	// What the chain builder ($p, NMe) looks at.
	parentSet   bool     // parentUuid is truthy
	msgID       string   // an assistant's message.id
	toolUses    []string // an assistant's tool_use ids
	toolResults []string // the tool_use_ids of the tool_result blocks of message.content
	sourceTool  string   // sourceToolAssistantUUID
	agentID     string   // agentId as raw JSON, "" when absent
	sidechain   string   // isSidechain as raw JSON (a falsy value), "false" when absent or null
	teamName    bool     // teamName is truthy
	isMeta      bool     // isMeta is truthy
	briefing    bool     // an attachment of type fork_briefing
	fbUser      bool     // a user entry with a tool_result block (FB, when it has a parent)
	timestamp   string
	// Compact boundaries (system / compact_boundary) only:
	boundary  bool
	rewind    bool   // Yj: a boundary written by rewinding (durationMs 0, anchored at itself)
	anchor    string // p_(e).anchorUuid when it is a string
	hasAnchor bool
	preserved []string // Yh: preservedMessages.uuids, preservedSegment head and tail
	// The relinking $p does around the boundary: preservedMessages
	// (relinkUUIDs from relinkAnchor) else preservedSegment (head, anchor,
	// tail); see relink.
	relinkKind                           uint8
	relinkUUIDs                          []string
	relinkAnchor, relinkHead, relinkTail string
}

// Relinking kinds.
const (
	relinkNone uint8 = iota
	relinkMessages
	relinkSegment
)

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
		if v, ok := obj.get("parentUuid"); ok {
			e.parentSet = jsTruthy(v)
		}
		e.logical, e.logicalStr = obj.str("logicalParentUuid")
		e.source = queuedSource(obj, typ)
		e.chainInfo(obj, typ)
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

// compactInfo reads what the cut (UUe, FUe, HUe) and the chain builder
// ($p) need of a compact boundary: p_, Yh, Yj and the relinking.
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
	// $p: compactMetadata?.preservedMessages, if truthy, else
	// preservedSegment. (The SDK throws when a truthy preservedMessages has
	// no uuids array; Fork relinks nothing then.)
	switch {
	case hasPM && jsTruthy(pm):
		pmo := jsObjectOf(pm)
		u, _ := pmo.get("uuids")
		if len(u) == 0 || u[0] != '[' {
			return
		}
		all := true
		var uuids []string
		jsEachElement(u, func(el []byte) bool {
			s, ok := jsStringValue(el)
			all = all && ok
			uuids = append(uuids, s)
			return ok
		})
		if all && len(uuids) > 0 {
			e.relinkKind, e.relinkUUIDs = relinkMessages, uuids
			e.relinkAnchor, _ = pmo.str("anchorUuid")
		}
	case hasPS && jsTruthy(ps):
		pso := jsObjectOf(ps)
		e.relinkKind = relinkSegment
		e.relinkHead, _ = pso.str("headUuid")
		e.relinkAnchor, _ = pso.str("anchorUuid")
		e.relinkTail, _ = pso.str("tailUuid")
	}
}

// chainInfo records what the chain builder needs of an entry.
func (e *forkEntry) chainInfo(obj jsObject, typ string) {
	msg := obj.object("message")
	if typ == "assistant" && msg != nil {
		e.msgID, _ = msg.str("id")
	}
	if c, ok := msg.get("content"); ok && c[0] == '[' {
		jsEachElement(c, func(el []byte) bool {
			b := jsObjectOf(el)
			switch t, _ := b.str("type"); t {
			case "tool_use":
				if id, ok := b.str("id"); ok && typ == "assistant" {
					e.toolUses = append(e.toolUses, id)
				}
			case "tool_result":
				if id, ok := b.str("tool_use_id"); ok {
					e.toolResults = append(e.toolResults, id)
				}
				if typ == "user" {
					e.fbUser = true
				}
			}
			return true
		})
	}
	e.sourceTool, _ = obj.str("sourceToolAssistantUUID")
	if v, ok := obj.get("agentId"); ok {
		e.agentID = string(v)
	}
	e.sidechain = "false"
	if v, ok := obj.get("isSidechain"); ok && !bytes.Equal(v, litNull) {
		e.sidechain = string(v)
	}
	if v, ok := obj.get("teamName"); ok {
		e.teamName = jsTruthy(v)
	}
	if v, ok := obj.get("isMeta"); ok {
		e.isMeta = jsTruthy(v)
	}
	if typ == "attachment" {
		t, _ := obj.object("attachment").str("type")
		e.briefing = t == "fork_briefing"
	}
	e.timestamp, _ = obj.str("timestamp")
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
	var stripped map[*forkEntry]bool
	if upTo != "" {
		b := cutIndex(sel, upTo)
		if b < 0 {
			return nil, fmt.Errorf("message %s not found in the session: %w", upTo, errdefs.ErrNotFound)
		}
		target = sel[b].uuid
		sel = uue(sel[:b+1])
		for _, e := range sel {
			if e.zj() && e.hasAnchor && e.anchor == target {
				if stripped == nil {
					stripped = map[*forkEntry]bool{}
				}
				stripped[e] = true
			}
		}
		sel = hue(sel, stripped)
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
		o := forkOut{e: e, strip: stripped[e]}
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

// cutIndex finds where a fork up to upTo ends: the entry with that uuid (or
// whose queued command has that source_uuid) first on the conversation
// chain resumed from the latest leaf and after it, else anywhere in o. -1
// when there is none.
func cutIndex(o []*forkEntry, upTo string) int {
	first := make(map[string]int, len(o))
	for i, e := range o {
		if _, ok := first[e.uuid]; !ok {
			first[e.uuid] = i
		}
	}
	chain, _ := buildChain(o, false, nil)
	last := -1
	for _, e := range chain {
		if i, ok := first[e.uuid]; ok && i > last {
			last = i
		}
	}
	h := append(chain[:len(chain):len(chain)], o[last+1:]...)
	if i := findMessage(h, upTo); i >= 0 {
		if j, ok := first[h[i].uuid]; ok {
			return j
		}
		return -1
	}
	return findMessage(o, upTo)
}

// findMessage is NT: the index of the first entry with uuid id, else of the
// first whose queued command has source_uuid id, else -1.
func findMessage(list []*forkEntry, id string) int {
	for i, e := range list {
		if e.uuid == id {
			return i
		}
	}
	for i, e := range list {
		if e.source == id {
			return i
		}
	}
	return -1
}

// forkNode is an entry as the chain builder sees it: its parent may be
// relinked around a compaction.
type forkNode struct {
	e          *forkEntry
	parent     string // "" when null or not a string
	parentTrue bool   // the parent is truthy
}

// buildChain is $p: the conversation a resume would load from list. The
// leaf is the latest entry (by position) that no other entry names as
// parent and that is not a progress entry, a team member's or a fork
// briefing, from which a user or assistant message is reachable; the
// chain runs from that message up to the root, after the parents of the
// messages a compaction preserved are relinked; then NMe adds the siblings
// of split assistant messages and their tool results. terminal is the leaf
// (nil when the chain was found by the fallback over all leaves). forked
// says the entries are seen as the fork writes them: without team names
// and sourceToolAssistantUUID. stripped marks boundaries whose preserved
// metadata the fork drops.
func buildChain(list []*forkEntry, forked bool, stripped map[*forkEntry]bool) (chain []*forkEntry, terminal *forkEntry) {
	order := make([]string, 0, len(list))
	n := make(map[string]*forkNode, len(list))
	for _, e := range list {
		if nd, ok := n[e.uuid]; ok {
			*nd = forkNode{e, e.parent, e.parentSet}
		} else {
			order = append(order, e.uuid)
			n[e.uuid] = &forkNode{e, e.parent, e.parentSet}
		}
	}
	relink := func(nd *forkNode, parent string) { nd.parent, nd.parentTrue = parent, parent != "" }
	for _, id := range order {
		e := n[id].e
		if !e.boundary || stripped[e] {
			continue
		}
		switch e.relinkKind {
		case relinkMessages:
			ok := true
			for _, w := range e.relinkUUIDs {
				if n[w] == nil {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			c := e.relinkAnchor
			for _, w := range e.relinkUUIDs {
				relink(n[w], c)
				c = w
			}
			first, last := e.relinkUUIDs[0], e.relinkUUIDs[len(e.relinkUUIDs)-1]
			for _, w := range order {
				if nd := n[w]; e.relinkAnchor != "" && nd.parent == e.relinkAnchor && w != first {
					relink(nd, last)
				}
			}
		case relinkSegment:
			if nd := n[e.relinkHead]; nd != nil && e.relinkHead != "" {
				relink(nd, e.relinkAnchor)
			}
			for _, w := range order {
				if nd := n[w]; e.relinkAnchor != "" && nd.parent == e.relinkAnchor && w != e.relinkHead {
					relink(nd, e.relinkTail)
				}
			}
		}
	}
	pos := make(map[string]int, len(list)) // the last position of each uuid
	for i, e := range list {
		pos[e.uuid] = i
	}
	parentOf := func(nd *forkNode) *forkNode {
		if nd.parent == "" {
			return nil
		}
		return n[nd.parent]
	}
	message := func(nd *forkNode) bool { return nd.e.kind == forkUser || nd.e.kind == forkAssistant }
	named := map[string]bool{}     // parents of any entry
	namedLeaf := map[string]bool{} // parents of leaf candidates
	candidate := func(nd *forkNode) bool {
		e := nd.e
		return !(e.teamName && !forked) && e.kind != forkProgress && !e.briefing
	}
	for _, id := range order {
		nd := n[id]
		if nd.parent != "" {
			named[nd.parent] = true
			if candidate(nd) {
				namedLeaf[nd.parent] = true
			}
		}
	}
	var leaves []*forkNode
	for _, id := range order {
		if nd := n[id]; candidate(nd) && !namedLeaf[id] {
			leaves = append(leaves, nd)
		}
	}
	sort.SliceStable(leaves, func(i, j int) bool { return pos[leaves[i].e.uuid] > pos[leaves[j].e.uuid] })
	var found, leaf *forkNode
	done := map[string]bool{}
	for _, h := range leaves {
		var walked []string
		seen := map[string]bool{}
		for c := h; c != nil && !done[c.e.uuid] && !seen[c.e.uuid]; c = parentOf(c) {
			if message(c) {
				found, leaf = c, h
				break
			}
			seen[c.e.uuid] = true
			walked = append(walked, c.e.uuid)
		}
		if found != nil {
			break
		}
		for _, id := range walked {
			done[id] = true
		}
	}
	m := found
	if m == nil {
		var hs []*forkNode
		for _, id := range order {
			if named[id] {
				continue
			}
			seen := map[string]bool{}
			for a := n[id]; a != nil && !seen[a.e.uuid]; a = parentOf(a) {
				seen[a.e.uuid] = true
				if message(a) {
					hs = append(hs, a)
					break
				}
			}
		}
		if len(hs) == 0 {
			return nil, nil
		}
		latest := func(l []*forkNode) *forkNode {
			best := l[0]
			for _, x := range l[1:] {
				if pos[x.e.uuid] > pos[best.e.uuid] {
					best = x
				}
			}
			return best
		}
		var real []*forkNode
		for _, c := range hs {
			if !(c.e.teamName && !forked) && !c.e.isMeta {
				real = append(real, c)
			}
		}
		if len(real) > 0 {
			m = latest(real)
		} else {
			m = latest(hs)
		}
	}
	var g []*forkNode
	in := map[string]bool{}
	for c := n[m.e.uuid]; c != nil && !in[c.e.uuid]; c = parentOf(c) {
		in[c.e.uuid] = true
		g = append(g, c)
	}
	for i, j := 0, len(g)-1; i < j; i, j = i+1, j-1 {
		g[i], g[j] = g[j], g[i]
	}
	if m == found {
		terminal = leaf.e
	}
	return siblings(n, order, g, in, forked), terminal
}

// siblings is NMe: after each assistant message of the chain, the pieces of
// the same API message (same message.id) that are not on the chain, and
// the tool results that answer it but hang elsewhere.
func siblings(n map[string]*forkNode, order []string, t []*forkNode, in map[string]bool, forked bool) []*forkEntry {
	out := func(l []*forkNode) []*forkEntry {
		r := make([]*forkEntry, len(l))
		for i, nd := range l {
			r[i] = nd.e
		}
		return r
	}
	var r []*forkNode
	for _, b := range t {
		if b.e.kind == forkAssistant {
			r = append(r, b)
		}
	}
	if len(r) == 0 {
		return out(t)
	}
	lastOf := map[string]*forkNode{}
	for _, b := range r {
		if b.e.msgID != "" {
			lastOf[b.e.msgID] = b
		}
	}
	byMsg := map[string][]*forkNode{}
	toolUse := map[string]*forkNode{} // nil: ambiguous
	var results []*forkNode
	for _, id := range order {
		b := n[id]
		if c := b.e.msgID; c != "" && b.e.kind == forkAssistant {
			byMsg[c] = append(byMsg[c], b)
			for _, x := range b.e.toolUses {
				if w, seen := toolUse[x]; !seen || (w != nil && w.e.msgID == c) {
					toolUse[x] = b
				} else {
					toolUse[x] = nil
				}
			}
		} else if b.e.fbUser && b.parentTrue {
			results = append(results, b)
		}
	}
	children := map[string][]*forkNode{}
	edges := map[[2]string]bool{}
	edge := func(parent string, c *forkNode) {
		k := [2]string{parent, c.e.uuid}
		if !edges[k] {
			edges[k] = true
			children[parent] = append(children[parent], c)
		}
	}
	same := func(b, c *forkNode) bool {
		if !forked && b.e.sidechain != c.e.sidechain {
			return false
		}
		return b.e.agentID == c.e.agentID && (b.e.agentID == "" || (b.e.agentID[0] != '{' && b.e.agentID[0] != '['))
	}
	for _, b := range results {
		edge(b.parent, b)
		if st := b.e.sourceTool; !forked && st != "" && st != b.parent {
			if c := n[st]; c != nil && same(b, c) {
				edge(c.e.uuid, b)
			}
		}
		for _, a := range b.e.toolResults {
			if x := toolUse[a]; x != nil && same(b, x) {
				edge(x.e.uuid, b)
			}
		}
	}
	answered := map[string]bool{}
	for _, b := range t {
		for _, id := range b.e.toolResults {
			answered[id] = true
		}
	}
	var index map[string]int
	position := func(b *forkNode) int {
		if index == nil {
			index = make(map[string]int, len(order))
			for i, id := range order {
				index[id] = i
			}
		}
		if i, ok := index[b.e.uuid]; ok {
			return i
		}
		return math.MaxInt
	}
	done := map[string]bool{}
	after := map[string][]*forkNode{}
	total := 0
	for _, b := range r {
		c := b.e.msgID
		if c == "" || done[c] {
			continue
		}
		done[c] = true
		pieces := byMsg[c]
		if pieces == nil {
			pieces = []*forkNode{b}
		}
		ids := map[string]bool{}
		for _, m := range pieces {
			ids[m.e.uuid] = true
		}
		var w, p, f []*forkNode
		for _, m := range pieces {
			if !in[m.e.uuid] {
				w = append(w, m)
			}
		}
		seen := map[string]bool{}
		for _, m := range pieces {
			for _, x := range children[m.e.uuid] {
				if in[x.e.uuid] || seen[x.e.uuid] {
					continue
				}
				seen[x.e.uuid] = true
				if ids[x.parent] {
					p = append(p, x)
				} else {
					f = append(f, x)
				}
			}
		}
		if len(f) > 0 {
			have := make(map[string]bool, len(answered))
			for k := range answered {
				have[k] = true
			}
			for _, x := range p {
				for _, id := range x.e.toolResults {
					have[id] = true
				}
			}
			sort.SliceStable(f, func(i, j int) bool { return position(f[i]) < position(f[j]) })
			for _, x := range f {
				useful := false
				for _, id := range x.e.toolResults {
					if u := toolUse[id]; !have[id] && u != nil && ids[u.e.uuid] {
						useful = true
						break
					}
				}
				if !useful {
					continue
				}
				for _, id := range x.e.toolResults {
					have[id] = true
				}
				p = append(p, x)
			}
		}
		if len(w) == 0 && len(p) == 0 {
			continue
		}
		byTime := func(l []*forkNode) {
			sort.SliceStable(l, func(i, j int) bool { return l[i].e.timestamp < l[j].e.timestamp })
		}
		byTime(w)
		byTime(p)
		add := append(w, p...)
		for _, x := range add {
			in[x.e.uuid] = true
		}
		total += len(add)
		after[lastOf[c].e.uuid] = add
	}
	if total == 0 {
		return out(t)
	}
	var e []*forkNode
	for _, b := range t {
		e = append(e, b)
		e = append(e, after[b.e.uuid]...)
	}
	return out(e)
}

// hue is HUe: after a cut, it leaves out the branches that a resume of the
// fork would otherwise pick instead of the one ending at the cut (their
// leaves come later), and the compactions behind which the conversation
// was rewound; what stays on the cut's own chain is kept.
func hue(e []*forkEntry, stripped map[*forkEntry]bool) []*forkEntry {
	if len(e) == 0 {
		return e
	}
	t := e[len(e)-1]
	synthetic := &forkEntry{uuid: "\x00fork-leaf", parent: t.uuid, parentSet: t.uuid != "", kind: forkSystem, sidechain: "false"}
	r, _ := buildChain(append(e[:len(e):len(e)], synthetic), true, stripped)
	index := make(map[string]int, len(e)) // first position
	byUUID := make(map[string]*forkEntry, len(e))
	for i, x := range e {
		if _, ok := index[x.uuid]; !ok {
			index[x.uuid] = i
		}
		byUUID[x.uuid] = x
	}
	if len(r) == 0 {
		return e
	}
	start, ok := index[r[0].uuid]
	if !ok {
		return e
	}
	onChain := make(map[string]bool, len(r))
	for _, x := range r {
		onChain[x.uuid] = true
	}
	live := map[string]bool{}
	walk := func(id string) {
		for f := byUUID[id]; f != nil && !live[f.uuid]; {
			live[f.uuid] = true
			if f.parent == "" {
				break
			}
			f = byUUID[f.parent]
		}
	}
	walk(t.uuid)
	for _, x := range r {
		walk(x.uuid)
	}
	leftOut := map[string]bool{}
	cv := func(x *forkEntry) bool {
		i, ok := index[x.uuid]
		if !ok {
			i = start
		}
		return !live[x.uuid] && i >= start
	}
	leave := func(x *forkEntry) {
		for s := byUUID[x.uuid]; s != nil && cv(s) && !leftOut[s.uuid]; {
			leftOut[s.uuid] = true
			if s.parent == "" {
				break
			}
			s = byUUID[s.parent]
		}
		for _, s := range e {
			if s.parent != "" && leftOut[s.parent] {
				leftOut[s.uuid] = true
			}
		}
	}
	for _, p := range e {
		if !p.boundary || !cv(p) {
			continue
		}
		keeps := false
		if !stripped[p] {
			for _, f := range p.preserved {
				if live[f] {
					keeps = true
					break
				}
			}
		}
		if !keeps {
			leave(p)
		}
	}
	for {
		rest := make([]*forkEntry, 0, len(e))
		for _, x := range e {
			if !leftOut[x.uuid] {
				rest = append(rest, x)
			}
		}
		f, terminal := buildChain(rest, true, stripped)
		same := len(f) == len(onChain)
		for _, x := range f {
			same = same && onChain[x.uuid]
		}
		if same || terminal == nil || !cv(terminal) {
			break
		}
		leave(terminal)
	}
	if len(leftOut) == 0 {
		return e
	}
	kept := make([]*forkEntry, 0, len(e))
	for _, x := range e {
		if !leftOut[x.uuid] {
			kept = append(kept, x)
		}
	}
	return kept
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
	var seen map[string]int
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
		i := -1
		switch {
		case seen != nil:
			if j, ok := seen[key]; ok {
				i = j
			}
		case len(obj) >= 16: // many members: look keys up in a map from now on
			seen = make(map[string]int, 2*len(obj))
			for j, m := range obj {
				seen[m.key] = j
			}
			if j, ok := seen[key]; ok {
				i = j
			}
		default:
			i = obj.index(key)
		}
		if i >= 0 {
			obj[i].val = val
		} else {
			obj = append(obj, jsMember{key: key, rawKey: rawKey, val: val})
			if seen != nil {
				seen[key] = len(obj) - 1
			}
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
