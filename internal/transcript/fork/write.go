package fork

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
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

func (w *forkWriter) run(r io.Reader, ix *forkIndex, title string) (Result, error) {
	if err := w.emitAll(w.recordsBefore(ix)); err != nil {
		return Result{}, err
	}
	sc := transcript.NewLineScanner(r)
	next := 0
	out := w.plan.out
	for n := 0; next < len(out) && sc.Scan(); n++ {
		if n != out[next].line() {
			continue
		}
		line, err := w.rewrite(sc.Line(), &out[next])
		if err != nil {
			return Result{}, err
		}
		if err := w.emit(line); err != nil {
			return Result{}, err
		}
		w.buf = line[:0]
		next++
	}
	if err := sc.Err(); err != nil {
		return Result{}, err
	}
	if next < len(out) {
		return Result{}, errors.New("fork: the source transcript changed between the two passes")
	}
	if err := w.emitAll(w.recordsAfter(ix, title)); err != nil {
		return Result{}, err
	}
	if err := w.w.Flush(); err != nil {
		return Result{}, err
	}
	return Result{Entries: len(out), Lines: w.lines, Title: title}, nil
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
	return rawjson.AppendJSString(b, w.sid)
}

// stamped ends a record that carries a uuid and a timestamp.
func (w *forkWriter) stamped(b []byte) []byte {
	b = rawjson.AppendJSMember(b, "uuid", w.newID())
	b = rawjson.AppendJSMember(b, "timestamp", w.now)
	return append(b, '}')
}

// recordsBefore are the records of the session that the fork carries over
// ahead of its entries.
func (w *forkWriter) recordsBefore(ix *forkIndex) [][]byte {
	var recs [][]byte
	if ix.historySuppressed {
		b := rawjson.AppendJSMember(w.record("history-suppression"), "cause", "fork_inherit")
		recs = append(recs, append(rawjson.AppendJSMember(b, "ts", w.now), '}'))
	}
	for _, o := range ix.orgs {
		recs = append(recs, append(rawjson.AppendJSMember(w.record("hybrid-organization"), "organizationUuid", o), '}'))
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
		recs = append(recs, append(rawjson.AppendJSMember(w.record("atis-latch"), "atis", ix.atis), '}'))
	}
	if ix.toolsSet {
		b := append(w.record("tools-used"), `,"tools":[`...)
		for i, t := range ix.tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = rawjson.AppendJSString(b, t)
		}
		recs = append(recs, append(b, "]}"...))
	}
	if ix.relocated != "" {
		recs = append(recs, append(rawjson.AppendJSMember(w.record("relocated"), "relocatedCwd", ix.relocated), '}'))
	}
	return append(recs, w.stamped(rawjson.AppendJSMember(w.record("custom-title"), "customTitle", title)))
}

// Keys forkSession removes from every entry (Vj, but isSidechain, which it sets to false).
var forkDropKeys = []string{"teamName", "agentName", "sessionKind", "slug", "sourceToolAssistantUUID",
	"summarizedTurnPromptUuids", "droppedPromptUuids", "sentAsUuid", "rowsAheadOfPutBack", "turnAttributionKey"}

// rewrite builds the fork's version of one entry, as
// {...y, ...x, ...w, ...P, ...F, uuid, parentUuid, logicalParentUuid,
// sessionId, timestamp, ...Vj, requestSessionId, forkedFrom}.
func (w *forkWriter) rewrite(raw []byte, o *forkOut) ([]byte, error) {
	line, ok := rawjson.Compact(rawjson.NodeUTF8(trimLeadingControl(raw)))
	var obj rawjson.Object
	var isObj bool
	if ok {
		obj, isObj, ok = rawjson.ParseObject(line)
	}
	if id, _ := obj.Str("uuid"); !ok || !isObj || id != o.e.uuid {
		return nil, errors.New("fork: the source transcript changed between the two passes")
	}
	typ, _ := obj.Str("type")
	sub, _ := obj.Str("subtype")
	reqSession := requestSessionOf(obj, typ) // from the entry as it was

	// x: a refusal fallback is neutralized.
	if typ == "system" && sub == "model_refusal_fallback" {
		obj = obj.Set("neutralizedByFork", rawjson.True)
	}
	if typ == "attachment" {
		obj = w.remapDeferredTools(obj)
	}
	if typ == "system" {
		obj = w.remapCompactMetadata(obj, o.strip)
	}
	obj = w.remapQueuedSource(obj, typ, o.e.source)
	obj = w.setForkLinks(obj, o)
	return w.setForkSession(obj, o, reqSession).AppendTo(w.buf[:0]), nil
}

// remapDeferredTools is w: a deferred-tools record keeps, of its
// announcements, those that name copied entries, under their new uuids.
func (w *forkWriter) remapDeferredTools(obj rawjson.Object) rawjson.Object {
	a := obj.Object("attachment")
	if a == nil {
		return obj
	}
	if t, _ := a.Str("type"); t != "deferred_tools_record" {
		return obj
	}
	v, ok := a.Get("nameOnlyAnnouncements")
	if !ok || v[0] != '[' {
		return obj
	}
	b := []byte{'['}
	rawjson.EachValue(v, func(el []byte) bool {
		if s, ok := rawjson.StringValue(el); ok && w.plan.known[s] != nil {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = rawjson.AppendJSString(b, w.id(s))
		}
		return true
	})
	a = a.Set("nameOnlyAnnouncements", append(b, ']'))
	return obj.Set("attachment", a.AppendTo(nil))
}

// remapCompactMetadata is FUe and P (X$): a compact boundary's preserved
// uuids get their new ones, and strip drops the preserved metadata the
// fork cannot keep. The remapped members move to the end of the object,
// as the spread that rewrites them puts them.
func (w *forkWriter) remapCompactMetadata(obj rawjson.Object, strip bool) rawjson.Object {
	cm := obj.Object("compactMetadata")
	if cm == nil {
		return obj
	}
	changed := false
	if strip {
		cm = cm.Del("preservedMessages").Del("preservedSegment").Del("postTokens")
		changed = true
	}
	pm, hasPM := cm.Get("preservedMessages")
	ps, hasPS := cm.Get("preservedSegment")
	if hasPM || hasPS || cm.Has("runningTurnSends") {
		cm = cm.Del("preservedMessages").Del("preservedSegment").Del("runningTurnSends")
		if hasPM {
			cm = cm.Set("preservedMessages", w.remapFields(pm, "anchorUuid", "uuids", "allUuids"))
		}
		if hasPS {
			cm = cm.Set("preservedSegment", w.remapFields(ps, "headUuid", "anchorUuid", "tailUuid"))
		}
		changed = true
	}
	if !changed {
		return obj
	}
	return obj.Set("compactMetadata", cm.AppendTo(nil))
}

// remapQueuedSource is F: a queued command's source_uuid (src), when it
// names a copied entry, gets its new uuid, in the attachment or the fold
// that holds it.
func (w *forkWriter) remapQueuedSource(obj rawjson.Object, typ, src string) rawjson.Object {
	if src == "" || w.plan.known[src] == nil {
		return obj
	}
	nid := rawjson.AppendJSString(nil, w.id(src))
	if typ == "attachment" {
		a := obj.Object("attachment").Set("source_uuid", nid)
		return obj.Set("attachment", a.AppendTo(nil))
	}
	if fold := obj.Object("fold"); fold != nil {
		cmd := fold.Object("command").Set("source_uuid", nid)
		fold = fold.Set("command", cmd.AppendTo(nil))
		return obj.Set("fold", fold.AppendTo(nil))
	}
	return obj
}

// setForkLinks gives the entry its new uuid and parentUuid, and a
// logicalParentUuid that names a copied entry its new uuid (else null).
func (w *forkWriter) setForkLinks(obj rawjson.Object, o *forkOut) rawjson.Object {
	obj = obj.Set("uuid", rawjson.AppendJSString(nil, w.id(o.e.uuid)))
	if o.hasParent {
		obj = obj.Set("parentUuid", rawjson.AppendJSString(nil, w.id(o.parent)))
	} else {
		obj = obj.Set("parentUuid", rawjson.Null)
	}
	if v, ok := obj.Get("logicalParentUuid"); ok && !bytes.Equal(v, rawjson.Null) {
		if s, ok := rawjson.StringValue(v); ok && w.plan.known[s] != nil {
			obj = obj.Set("logicalParentUuid", rawjson.AppendJSString(nil, w.id(s)))
		} else {
			obj = obj.Set("logicalParentUuid", rawjson.Null)
		}
	}
	return obj
}

// setForkSession moves the entry to the fork's session: its sessionId,
// the last entry's timestamp, isSidechain false, without the keys the
// fork drops (Vj), with the requestSessionId reqSession of the entry as
// it was and a forkedFrom naming the source.
func (w *forkWriter) setForkSession(obj rawjson.Object, o *forkOut, reqSession []byte) rawjson.Object {
	obj = obj.Set("sessionId", rawjson.AppendJSString(nil, w.sid))
	if o.last {
		obj = obj.Set("timestamp", rawjson.AppendJSString(nil, w.now))
	}
	obj = obj.Set("isSidechain", rawjson.False)
	for _, k := range forkDropKeys {
		obj = obj.Del(k)
	}
	if reqSession != nil {
		obj = obj.Set("requestSessionId", reqSession)
	} else {
		obj = obj.Del("requestSessionId")
	}
	ff := append([]byte(`{"sessionId":`), rawjson.AppendJSString(nil, w.src)...)
	ff = append(ff, `,"messageUuid":`...)
	ff = rawjson.AppendJSString(ff, o.e.uuid)
	return obj.Set("forkedFrom", append(ff, '}'))
}

// requestSessionOf is $j: for an assistant entry, the first string among
// its requestSessionId, the sessionId of the session it was forked from
// and its sessionId (as raw JSON); nil otherwise.
func requestSessionOf(obj rawjson.Object, typ string) []byte {
	if typ != "assistant" {
		return nil
	}
	if v, ok := obj.Get("requestSessionId"); ok && v[0] == '"' {
		return v
	}
	if ff := obj.Object("forkedFrom"); ff != nil {
		if v, ok := ff.Get("sessionId"); ok && v[0] == '"' {
			return v
		}
	}
	if v, ok := obj.Get("sessionId"); ok && v[0] == '"' {
		return v
	}
	return nil
}

// remapFields is X$'s l: a copy of the object v whose listed members
// (strings, or arrays of them) name copied messages get their new uuids;
// anything that is not an object is kept as it is.
func (w *forkWriter) remapFields(v []byte, keys ...string) []byte {
	o := rawjson.ObjectOf(v)
	if o == nil {
		return v
	}
	remap := func(el []byte) []byte {
		if s, ok := rawjson.StringValue(el); ok && w.plan.message[s] {
			return rawjson.AppendJSString(nil, w.id(s))
		}
		return el
	}
	for _, k := range keys {
		m, ok := o.Get(k)
		if !ok {
			continue
		}
		if m[0] == '[' {
			b := []byte{'['}
			first := true
			rawjson.EachValue(m, func(el []byte) bool {
				if !first {
					b = append(b, ',')
				}
				first = false
				b = append(b, remap(el)...)
				return true
			})
			o = o.Set(k, append(b, ']'))
		} else {
			o = o.Set(k, remap(m))
		}
	}
	return o.AppendTo(nil)
}
