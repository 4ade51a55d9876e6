package damage

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/sessiond/sessiond/internal/rawjson"
)

// Repair's second pass: the fixed lines again, with the planned chain
// repairs applied to them.

// write runs the second pass: the same pieces, with the chain repairs
// applied, to w.
func (p *repairPlan) write(src io.ReaderAt, size int64, w io.Writer) error {
	var werr error
	put := func(b []byte) {
		if werr == nil {
			if _, werr = w.Write(b); werr == nil {
				_, werr = w.Write([]byte{'\n'})
			}
		}
	}
	var k int32
	f := &fixer{}
	err := eachPiece(src, size, f, func(pc outPiece) {
		defer func() { k++ }()
		if first, dup := p.dupOf[k]; dup {
			p.act(pc.line, ActionDropDuplicate, fmt.Sprintf("its uuid is already used by line %d, which is kept", first), pc.data, nil)
			return
		}
		ni := p.pieceNode[k]
		if ni < 0 {
			put(pc.data)
			return
		}
		n := &p.g.nodes[ni]
		if p.dropped[ni] {
			p.act(pc.line, ActionDrop, "the line held only tool_result blocks that answer no tool_use of the turn before it", pc.data, nil)
			return
		}
		out := pc.data
		if elems, ok := p.strays[ni]; ok {
			next := removeContent(out, elems)
			p.act(pc.line, ActionNeutraliseBlock, fmt.Sprintf("removed %d tool_result block(s) that answer no tool_use of the turn before", len(elems)), out, next)
			out = next
		}
		if r, ok := p.reparent[ni]; ok {
			next := setParent(out, r.uuid)
			to := r.uuid
			if to == "" {
				to = "null (it becomes a root)"
			}
			from := n.parentID
			if from == "" {
				from = "null"
			}
			p.act(pc.line, ActionRepointParent, fmt.Sprintf("parentUuid %s -> %s: %s", from, to, r.why), out, next)
			out = next
		}
		if h, ok := p.holders[ni]; ok {
			*h = captureHolder(out)
		}
		put(out)
		for _, s := range p.inserts[k] {
			b := p.syntheticLine(s)
			p.act(pc.line, ActionInsertResult, fmt.Sprintf("tool_use %s (line %d) had no tool_result: inserted an error result saying it was lost", s.toolID, p.g.nodes[s.holder].line), nil, b)
			put(b)
		}
	})
	if err != nil {
		return err
	}
	return werr
}

func (p *repairPlan) act(line int64, kind, detail string, before, after []byte) {
	p.actions = append(p.actions, Action{Line: line, Kind: kind, Detail: detail, Before: cutForDisplay(before), After: cutForDisplay(after)})
}

// setParent returns line with its top-level parentUuid set to uuid (null
// when ""). Only that value changes.
func setParent(line []byte, uuid string) []byte {
	m, ok := rawjson.LastMember(line, rawjson.SkipWS(line, 0), "parentUuid")
	if !ok {
		return line // a root without the key stays a root
	}
	v := []byte("null")
	if uuid != "" {
		v = rawjson.AppendString(nil, uuid)
	}
	return rawjson.ReplaceSpan(line, m.Val, v)
}

// removeContent returns line without the given elements of its
// message.content array. Only those elements (and their separators) go.
func removeContent(line []byte, elems []int) []byte {
	msg, ok := rawjson.LastMember(line, rawjson.SkipWS(line, 0), "message")
	if !ok || line[msg.Val.Start] != '{' {
		return line
	}
	content, ok := rawjson.LastMember(line, msg.Val.Start, "content")
	if !ok || line[content.Val.Start] != '[' {
		return line
	}
	var spans []rawjson.Span
	rawjson.EachElement(line, content.Val.Start, func(_ int, s rawjson.Span) bool {
		spans = append(spans, s)
		return true
	})
	drop := make([]bool, len(spans))
	for _, e := range elems {
		if e < len(drop) {
			drop[e] = true
		}
	}
	return rawjson.RemoveElements(line, spans, drop)
}

// copiedKeys are the fields a synthetic tool_result takes from its
// assistant entry, in the order the CLI writes them on tool_result lines.
var copiedKeys = []string{"isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch", "agentId", "slug", "teamName", "agentName"}

func captureHolder(line []byte) resultHolder {
	h := resultHolder{values: map[string][]byte{}}
	rawjson.EachMember(line, rawjson.SkipWS(line, 0), func(m rawjson.Member) bool {
		key, _ := rawjson.StringAt(line, m.Key)
		switch key {
		case "uuid":
			h.uuid, _ = rawjson.StringAt(line, m.Val)
		case "timestamp":
			if line[m.Val.Start] == '"' {
				h.values[key] = bytes.Clone(line[m.Val.Start:m.Val.End])
			}
		default:
			for _, k := range copiedKeys {
				if k == key {
					h.values[key] = bytes.Clone(line[m.Val.Start:m.Val.End])
				}
			}
		}
		return true
	})
	return h
}

// syntheticLine builds the tool_result line for s, shaped like the error
// results the CLI writes (key order included), so readers and the API
// take it as one of their own.
func (p *repairPlan) syntheticLine(s syntheticResult) []byte {
	h := p.holders[s.holder]
	b := []byte(`{"parentUuid":`)
	b = rawjson.AppendString(b, s.parent)
	for _, k := range copiedKeys {
		v := h.values[k]
		switch {
		case v != nil:
		case k == "isSidechain":
			v = []byte("false")
		case k == "userType":
			v = []byte(`"external"`)
		case k == "sessionId" && p.opt.SessionID != "":
			v = rawjson.AppendString(nil, p.opt.SessionID)
		default:
			continue
		}
		b = append(b, ',')
		b = rawjson.AppendString(b, k)
		b = append(b, ':')
		b = append(b, v...)
	}
	b = append(b, `,"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":`...)
	b = rawjson.AppendString(b, LostResultMessage)
	b = append(b, `,"is_error":true,"tool_use_id":`...)
	b = rawjson.AppendString(b, s.toolID)
	b = append(b, `}]},"uuid":`...)
	b = rawjson.AppendString(b, s.uuid)
	b = append(b, `,"timestamp":`...)
	if ts := h.values["timestamp"]; ts != nil {
		// The assistant's time: the transcript stays in time order,
		// which readers sort side branches by.
		b = append(b, ts...)
	} else {
		now := time.Now
		if p.opt.Now != nil {
			now = p.opt.Now
		}
		b = rawjson.AppendString(b, now().UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	b = append(b, `,"toolUseResult":`...)
	b = rawjson.AppendString(b, "Error: "+LostResultMessage)
	b = append(b, `,"sourceToolAssistantUUID":`...)
	b = rawjson.AppendString(b, h.uuid)
	return append(b, '}')
}
