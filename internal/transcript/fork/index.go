package fork

import (
	"bytes"
	"io"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// The first pass of Fork: it files each line of the source as forkSession's
// Kj does, keeping of a conversation entry only what the chain builder and
// the cut look at (a forkEntry, no content), and of the session's metadata
// records what the fork carries over.

// forkEntry is what the first pass keeps of one non-sidechain entry.
type forkEntry struct {
	line   int
	uuid   string
	parent string // "" when null, absent, empty or not a string: the chain ends
	// kind is the entry's chain type: forkSession copies the types
	// the official readers chain (DUe), and no other.
	kind transcript.ChainType
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

	summary listing.Summary // for the default title
}

func indexFork(r io.Reader, sessionID string) (*forkIndex, error) {
	ix := &forkIndex{}
	sc := transcript.NewLineScanner(r)
	for n := 0; sc.Scan(); n++ {
		raw := sc.Line()
		ix.summary.AddLine(raw, sc.HasNewline())
		line := trimLeadingControl(raw)
		if len(line) == 0 {
			continue
		}
		line = rawjson.NodeUTF8(line)
		obj, isObj, ok := rawjson.ParseObject(line)
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
func (ix *forkIndex) add(n int, obj rawjson.Object, sessionID string) {
	typ, _ := obj.Str("type")
	id, hasID := obj.Str("uuid")
	if kind := transcript.ChainTypeOf(typ); kind != transcript.TypeOther && hasID {
		if v, ok := obj.Get("isSidechain"); ok && rawjson.Truthy(v) {
			return
		}
		e := forkEntry{line: n, uuid: id, kind: kind}
		e.parent, _ = obj.Str("parentUuid")
		if v, ok := obj.Get("parentUuid"); ok {
			e.parentSet = rawjson.Truthy(v)
		}
		e.logical, e.logicalStr = obj.Str("logicalParentUuid")
		e.source = queuedSource(obj, typ)
		e.chainInfo(obj, typ)
		if sub, _ := obj.Str("subtype"); kind == transcript.TypeSystem && sub == "compact_boundary" {
			e.boundary = true
			e.compactInfo(obj)
		}
		ix.entries = append(ix.entries, e)
		return
	}
	ownSession := func() bool { s, ok := obj.Str("sessionId"); return ok && s == sessionID }
	switch typ {
	case "history-suppression":
		ix.historySuppressed = true
	case "atis-latch":
		if a, ok := obj.Str("atis"); ok && ownSession() && atisPrintable(a) {
			ix.atis, ix.atisSet = a, true
		}
	case "tools-used":
		if v, ok := obj.Get("tools"); ok && v[0] == '[' && ownSession() {
			ix.tools, ix.toolsSet = nil, true
			rawjson.EachValue(v, func(el []byte) bool {
				if s, ok := rawjson.StringValue(el); ok && s != "" {
					ix.tools = append(ix.tools, s)
				}
				return true
			})
		}
	case "data-flow-records", "data-flow-incomplete":
		if _, ok := obj.Str("sessionId"); ok && !obj.Has("agentId") && ix.unsupported == "" {
			ix.unsupported = typ
		}
	case "derived-from":
		if ownSession() && ix.unsupported == "" {
			ix.unsupported = typ
		}
	case "hybrid-organization":
		if o, ok := obj.Str("organizationUuid"); ok && sdkUUID(o) {
			o = string(bytes.ToLower([]byte(o)))
			for _, x := range ix.orgs {
				if x == o {
					return
				}
			}
			ix.orgs = append(ix.orgs, o)
		}
	case "content-replacement":
		if v, ok := obj.Get("replacements"); ok && v[0] == '[' && ownSession() {
			rawjson.EachValue(v, func(el []byte) bool {
				if el[0] == '{' {
					if c, ok := rawjson.Compact(el); ok {
						ix.replacements = append(ix.replacements, c)
					}
				}
				return true
			})
		}
	case "relocated":
		if c, ok := obj.Str("relocatedCwd"); ok && c != "" && ownSession() {
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
func queuedSource(obj rawjson.Object, typ string) string {
	cmd := queuedCommand(obj, typ)
	if cmd == nil {
		return ""
	}
	s, _ := cmd.Str("source_uuid")
	return s
}

// queuedCommand is q$.
func queuedCommand(obj rawjson.Object, typ string) rawjson.Object {
	switch typ {
	case "system":
		if sub, _ := obj.Str("subtype"); sub != "voice_call_talk" {
			return nil
		}
		fold := obj.Object("fold")
		if fold == nil {
			return nil
		}
		return fold.Object("command")
	case "attachment":
		a := obj.Object("attachment")
		if t, _ := a.Str("type"); t == "queued_command" {
			return a
		}
	}
	return nil
}

// compactInfo reads what the cut (UUe, FUe, HUe) and the chain builder
// ($p) need of a compact boundary: p_, Yh, Yj and the relinking.
func (e *forkEntry) compactInfo(obj rawjson.Object) {
	cm := obj.Object("compactMetadata")
	if cm == nil {
		return
	}
	pm, hasPM := cm.Get("preservedMessages")
	ps, hasPS := cm.Get("preservedSegment")
	// p_: preservedMessages ?? preservedSegment, if it has an anchorUuid.
	var p []byte
	switch {
	case hasPM && !bytes.Equal(pm, rawjson.Null):
		p = pm
	case hasPS:
		p = ps
	}
	if po := rawjson.ObjectOf(p); po != nil {
		e.anchor, e.hasAnchor = po.Str("anchorUuid")
	}
	if pmo := rawjson.ObjectOf(pm); pmo != nil {
		if u, ok := pmo.Get("uuids"); ok && u[0] == '[' {
			rawjson.EachValue(u, func(el []byte) bool {
				if s, ok := rawjson.StringValue(el); ok {
					e.preserved = append(e.preserved, s)
				}
				return true
			})
		}
	}
	if pso := rawjson.ObjectOf(ps); pso != nil {
		for _, k := range []string{"headUuid", "tailUuid"} {
			if s, ok := pso.Str(k); ok {
				e.preserved = append(e.preserved, s)
			}
		}
	}
	if d, ok := cm.Get("durationMs"); ok && rawjson.IsZero(d) && e.hasAnchor && e.anchor == e.uuid {
		e.rewind = true
	}
	// $p: compactMetadata?.preservedMessages, if truthy, else
	// preservedSegment. (The SDK throws when a truthy preservedMessages has
	// no uuids array; Fork relinks nothing then.)
	switch {
	case hasPM && rawjson.Truthy(pm):
		pmo := rawjson.ObjectOf(pm)
		u, _ := pmo.Get("uuids")
		if len(u) == 0 || u[0] != '[' {
			return
		}
		all := true
		var uuids []string
		rawjson.EachValue(u, func(el []byte) bool {
			s, ok := rawjson.StringValue(el)
			all = all && ok
			uuids = append(uuids, s)
			return ok
		})
		if all && len(uuids) > 0 {
			e.relinkKind, e.relinkUUIDs = relinkMessages, uuids
			e.relinkAnchor, _ = pmo.Str("anchorUuid")
		}
	case hasPS && rawjson.Truthy(ps):
		pso := rawjson.ObjectOf(ps)
		e.relinkKind = relinkSegment
		e.relinkHead, _ = pso.Str("headUuid")
		e.relinkAnchor, _ = pso.Str("anchorUuid")
		e.relinkTail, _ = pso.Str("tailUuid")
	}
}

// chainInfo records what the chain builder needs of an entry.
func (e *forkEntry) chainInfo(obj rawjson.Object, typ string) {
	msg := obj.Object("message")
	if typ == "assistant" && msg != nil {
		e.msgID, _ = msg.Str("id")
	}
	if c, ok := msg.Get("content"); ok && c[0] == '[' {
		rawjson.EachValue(c, func(el []byte) bool {
			b := rawjson.ObjectOf(el)
			switch t, _ := b.Str("type"); t {
			case "tool_use":
				if id, ok := b.Str("id"); ok && typ == "assistant" {
					e.toolUses = append(e.toolUses, id)
				}
			case "tool_result":
				if id, ok := b.Str("tool_use_id"); ok {
					e.toolResults = append(e.toolResults, id)
				}
				if typ == "user" {
					e.fbUser = true
				}
			}
			return true
		})
	}
	e.sourceTool, _ = obj.Str("sourceToolAssistantUUID")
	if v, ok := obj.Get("agentId"); ok {
		e.agentID = string(v)
	}
	e.sidechain = "false"
	if v, ok := obj.Get("isSidechain"); ok && !bytes.Equal(v, rawjson.Null) {
		e.sidechain = string(v)
	}
	if v, ok := obj.Get("teamName"); ok {
		e.teamName = rawjson.Truthy(v)
	}
	if v, ok := obj.Get("isMeta"); ok {
		e.isMeta = rawjson.Truthy(v)
	}
	if typ == "attachment" {
		t, _ := obj.Object("attachment").Str("type")
		e.briefing = t == "fork_briefing"
	}
	e.timestamp, _ = obj.Str("timestamp")
}

// zj is Zj: a compact boundary a compaction wrote (not a rewind).
func (e *forkEntry) zj() bool { return e.boundary && !e.rewind }
