package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// The second pass of Fork: it rereads the source, rewrites each entry the
// plan copies (fresh uuids, remapped references, the fork's session id and
// forkedFrom) and writes the metadata records around them.

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
	if err := w.emitAll(w.recordsBefore(ix)); err != nil {
		return ForkResult{}, err
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
	if err := w.emitAll(w.recordsAfter(ix, title)); err != nil {
		return ForkResult{}, err
	}
	if err := w.w.Flush(); err != nil {
		return ForkResult{}, err
	}
	return ForkResult{Entries: len(out), Lines: w.lines, Title: title}, nil
}

func (w *forkWriter) emitAll(lines [][]byte) error {
	for _, l := range lines {
		if err := w.emit(l); err != nil {
			return err
		}
	}
	return nil
}

// record starts a metadata record of the fork, {"type":typ,"sessionId":...,
// for its members to follow.
func (w *forkWriter) record(typ string) []byte {
	b := append([]byte(`{"type":"`), typ...)
	b = append(b, `","sessionId":`...)
	return appendJSString(b, w.sid)
}

// stamped ends a record that carries a uuid and a timestamp.
func (w *forkWriter) stamped(b []byte) []byte {
	b = appendJSMember(b, "uuid", w.newID())
	b = appendJSMember(b, "timestamp", w.now)
	return append(b, '}')
}

// recordsBefore are the records of the session that the fork carries over
// ahead of its entries.
func (w *forkWriter) recordsBefore(ix *forkIndex) [][]byte {
	var recs [][]byte
	if ix.historySuppressed {
		b := appendJSMember(w.record("history-suppression"), "cause", "fork_inherit")
		recs = append(recs, append(appendJSMember(b, "ts", w.now), '}'))
	}
	for _, o := range ix.orgs {
		recs = append(recs, append(appendJSMember(w.record("hybrid-organization"), "organizationUuid", o), '}'))
	}
	return recs
}

// recordsAfter are the records of the session that the fork carries over
// after its entries, then its custom-title. Their uuids are made after
// the entries', as forkSession makes them.
func (w *forkWriter) recordsAfter(ix *forkIndex, title string) [][]byte {
	var recs [][]byte
	if len(ix.replacements) > 0 {
		b := append(w.record("content-replacement"), `,"replacements":[`...)
		for i, r := range ix.replacements {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, r...)
		}
		recs = append(recs, w.stamped(append(b, ']')))
	}
	if ix.atisSet {
		recs = append(recs, append(appendJSMember(w.record("atis-latch"), "atis", ix.atis), '}'))
	}
	if ix.toolsSet {
		b := append(w.record("tools-used"), `,"tools":[`...)
		for i, t := range ix.tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSString(b, t)
		}
		recs = append(recs, append(b, "]}"...))
	}
	if ix.relocated != "" {
		recs = append(recs, append(appendJSMember(w.record("relocated"), "relocatedCwd", ix.relocated), '}'))
	}
	return append(recs, w.stamped(appendJSMember(w.record("custom-title"), "customTitle", title)))
}

// Keys forkSession removes from every entry (Vj, but isSidechain, which it sets to false).
var forkDropKeys = []string{"teamName", "agentName", "sessionKind", "slug", "sourceToolAssistantUUID",
	"summarizedTurnPromptUuids", "droppedPromptUuids", "sentAsUuid", "rowsAheadOfPutBack", "turnAttributionKey"}

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
