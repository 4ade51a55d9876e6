package fork

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

const forkNewSession = "5e551011-aaaa-4bbb-8ccc-000000000000"

// testForkOptions makes deterministic options.
func testForkOptions(sid, upTo, title string) Options {
	n := 0
	return Options{
		SessionID:    sid,
		NewSessionID: forkNewSession,
		UpTo:         upTo,
		Title:        title,
		NewUUID: func() string {
			n++
			return fmt.Sprintf("feedface-0000-4000-8000-%012d", n)
		},
		Now: func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC) },
	}
}

// forkSources are the inputs of the property tests: every fixture and
// synthetic fork input.
func forkSources(t *testing.T) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", transcripttest.FixtureDir)
	}
	synth, _ := filepath.Glob(filepath.Join("testdata", "synthetic", "*.jsonl"))
	srcs := map[string][]byte{}
	for _, f := range append(files, synth...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[filepath.Base(f)] = data
	}
	return srcs
}

// messageIDs lists the uuids of the non-sidechain user and assistant
// entries of src.
func messageIDs(src []byte) []string {
	var ids []string
	for _, l := range bytes.Split(src, []byte("\n")) {
		var e struct {
			Type        string `json:"type"`
			UUID        string `json:"uuid"`
			IsSidechain bool   `json:"isSidechain"`
		}
		if json.Unmarshal(l, &e) == nil && (e.Type == "user" || e.Type == "assistant") && !e.IsSidechain && e.UUID != "" {
			ids = append(ids, e.UUID)
		}
	}
	return ids
}

// Keys a fork edits; every other member of a copied entry must keep its bytes.
var forkEdited = map[string]bool{
	"uuid": true, "parentUuid": true, "logicalParentUuid": true, "sessionId": true, "timestamp": true,
	"isSidechain": true, "requestSessionId": true, "forkedFrom": true, "compactMetadata": true,
	"attachment": true, "fold": true, "neutralizedByFork": true,
}

// TestForkProperties checks, for every input cut in several places, that
// the fork is self-consistent and keeps what it does not edit.
func TestForkProperties(t *testing.T) {
	for name, src := range forkSources(t) {
		ids := messageIDs(src)
		cuts := []string{""}
		switch {
		case len(ids) > 0 && len(src) > 256<<10: // keep the test quick
			cuts = append(cuts, ids[len(ids)/3])
		case len(ids) > 0:
			cuts = append(cuts, ids[0], ids[len(ids)/3], ids[len(ids)-1])
		}
		for _, upTo := range cuts {
			var out bytes.Buffer
			sid := "0f0f0f0f-1111-4222-8333-444444444444"
			res, err := Session(bytes.NewReader(src), &out, testForkOptions(sid, upTo, ""))
			if errors.Is(err, errdefs.ErrInvalidArgument) && len(ids) == 0 {
				continue // nothing to fork
			}
			if err != nil {
				t.Errorf("%s up to %q: %v", name, upTo, err)
				continue
			}
			checkFork(t, name+" up to "+upTo, src, out.Bytes(), res)
		}
	}
}

// checkFork checks a fork's output against its source.
func checkFork(t *testing.T, what string, src, out []byte, res Result) {
	t.Helper()
	source := map[string]map[string]json.RawMessage{}
	for _, l := range bytes.Split(src, []byte("\n")) {
		l = bytes.TrimLeft(l, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\v\f\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
		var m map[string]json.RawMessage
		var id string
		if json.Unmarshal(l, &m) == nil && json.Unmarshal(m["uuid"], &id) == nil && utf8Valid(l) {
			source[id] = m
		}
	}
	lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
	if len(lines) != res.Lines {
		t.Errorf("%s: %d lines, result says %d", what, len(lines), res.Lines)
	}
	uuids := map[string]bool{}
	type entry struct {
		m      map[string]json.RawMessage
		parent json.RawMessage
	}
	var entries []entry
	for i, l := range lines {
		if !json.Valid(l) {
			t.Fatalf("%s: line %d is not valid JSON: %.300s", what, i+1, l)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: line %d: %v", what, i+1, err)
		}
		var typ, id string
		json.Unmarshal(m["type"], &typ)
		json.Unmarshal(m["uuid"], &id)
		if _, ok := m["forkedFrom"]; !ok {
			continue // a metadata record
		}
		if typ == "progress" {
			t.Errorf("%s: line %d is a progress entry", what, i+1)
		}
		if string(m["isSidechain"]) != "false" {
			t.Errorf("%s: line %d has isSidechain %s", what, i+1, m["isSidechain"])
		}
		if string(m["sessionId"]) != `"`+forkNewSession+`"` {
			t.Errorf("%s: line %d has sessionId %s", what, i+1, m["sessionId"])
		}
		for _, k := range forkDropKeys {
			if _, ok := m[k]; ok {
				t.Errorf("%s: line %d still has %s", what, i+1, k)
			}
		}
		uuids[id] = true
		entries = append(entries, entry{m, m["parentUuid"]})

		var from struct {
			MessageUUID string `json:"messageUuid"`
		}
		json.Unmarshal(m["forkedFrom"], &from)
		orig, ok := source[from.MessageUUID]
		if !ok {
			continue // a line with invalid UTF-8, compared by the goldens
		}
		if s := orig["isSidechain"]; s != nil && string(s) == "true" {
			t.Errorf("%s: line %d copies a sidechain entry", what, i+1)
		}
		for k, v := range orig {
			if forkEdited[k] || stringIn(forkDropKeys, k) {
				continue
			}
			var c bytes.Buffer
			json.Compact(&c, v)
			if !bytes.Equal(m[k], c.Bytes()) {
				t.Errorf("%s: line %d: %s changed from %.200s to %.200s", what, i+1, k, c.Bytes(), m[k])
			}
		}
	}
	if len(entries) != res.Entries {
		t.Errorf("%s: %d entries, result says %d", what, len(entries), res.Entries)
	}
	for i, e := range entries {
		var p *string
		if err := json.Unmarshal(e.parent, &p); err != nil {
			t.Errorf("%s: entry %d: parentUuid %s", what, i+1, e.parent)
		} else if p != nil && !uuids[*p] {
			t.Errorf("%s: entry %d: parentUuid %s is not in the fork", what, i+1, *p)
		}
	}
	last := lines[len(lines)-1]
	if !bytes.HasPrefix(last, []byte(`{"type":"custom-title","sessionId":"`+forkNewSession+`","customTitle":`)) {
		t.Errorf("%s: last line %.200s is not the fork's custom-title", what, last)
	}
}

func utf8Valid(b []byte) bool { return bytes.Equal(rawjson.NodeUTF8(b), b) }

// TestForkReaders checks that Fork reads the same from a seekable reader at
// an offset and from a reader that cannot seek.
func TestForkReaders(t *testing.T) {
	src := forkSources(t)["marot__spotter__tool_heavy.jsonl"]
	sid := "d6e0bada-1959-4000-8000-000000000000"
	var want bytes.Buffer
	if _, err := Session(bytes.NewReader(src), &want, testForkOptions(sid, "", "")); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := Session(struct{ io.Reader }{bytes.NewReader(src)}, &got, testForkOptions(sid, "", "")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("a reader that cannot seek forks differently")
	}
	r := bytes.NewReader(append([]byte("skipped prefix\n"), src...))
	r.Seek(int64(len("skipped prefix\n")), io.SeekStart)
	got.Reset()
	if _, err := Session(r, &got, testForkOptions(sid, "", "")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("a reader at an offset forks differently")
	}
}

func TestForkErrors(t *testing.T) {
	src := []byte(`{"type":"user","uuid":"00000000-0000-4000-8000-000000000001","parentUuid":null,"message":{"role":"user","content":"hi"}}` + "\n")
	sid := "0f0f0f0f-1111-4222-8333-444444444444"
	tests := []struct {
		name string
		src  []byte
		opt  func(*Options)
		want error
	}{
		{"bad source id", src, func(o *Options) { o.SessionID = "nope" }, errdefs.ErrInvalidArgument},
		{"bad new id", src, func(o *Options) { o.NewSessionID = "" }, errdefs.ErrInvalidArgument},
		{"title with newline", src, func(o *Options) { o.Title = "two\nlines" }, errdefs.ErrInvalidArgument},
		{"title too long", src, func(o *Options) { o.Title = strings.Repeat("é", transcript.MaxTitleLength+1) }, errdefs.ErrInvalidArgument},
		{"unknown upTo", src, func(o *Options) { o.UpTo = "nope" }, errdefs.ErrNotFound},
		{"empty", nil, func(o *Options) {}, errdefs.ErrInvalidArgument},
		{"only progress", []byte(`{"type":"progress","uuid":"p"}` + "\n"), func(o *Options) {}, errdefs.ErrInvalidArgument},
		{"data flow", append(bytes.Clone(src), `{"type":"data-flow-records","v":1,"sessionId":"x","records":[]}`+"\n"...), func(o *Options) {}, errdefs.ErrInvalidArgument},
		{"derived from", append(bytes.Clone(src), `{"type":"derived-from","v":1,"sessionId":"`+sid+`","sessions":[]}`+"\n"...), func(o *Options) {}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		opt := testForkOptions(sid, "", "")
		tt.opt(&opt)
		var out bytes.Buffer
		_, err := Session(bytes.NewReader(tt.src), &out, opt)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", tt.name, out.Len())
		}
	}
	// A sub-agent's derived-from record is another session's: no error.
	other := append(bytes.Clone(src), `{"type":"derived-from","v":1,"sessionId":"9e9e9e9e-5555-4666-8777-888888888888","sessions":[]}`+"\n"...)
	if _, err := Session(bytes.NewReader(other), io.Discard, testForkOptions(sid, "", "")); err != nil {
		t.Errorf("derived-from of another session: %v", err)
	}
}

// TestForkTitle checks the titles a fork gets.
func TestForkTitle(t *testing.T) {
	sid := "0f0f0f0f-1111-4222-8333-444444444444"
	entry := `{"type":"user","uuid":"00000000-0000-4000-8000-000000000001","parentUuid":null,"message":{"role":"user","content":"the prompt"}}` + "\n"
	tests := []struct {
		name, src, title, sidecar, want string
	}{
		{"first prompt", entry, "", "", "the prompt (fork)"},
		{"explicit", entry, "  Mine  ", "", "Mine"},
		{"custom title", entry + `{"type":"custom-title","customTitle":"Named","sessionId":"x"}` + "\n", "", "", "Named (fork)"},
		{"ai title", entry + `{"type":"ai-title","aiTitle":"AI","sessionId":"x"}` + "\n", "", "", "AI (fork)"},
		{"sidecar", entry, "", "From sidecar", "From sidecar (fork)"},
		{"tail title beats sidecar", entry + `{"type":"custom-title","customTitle":"Named","sessionId":"x"}` + "\n", "", "Sidecar", "Named (fork)"},
		{"empty tail title", entry + `{"type":"custom-title","customTitle":"","sessionId":"x"}` + "\n" + `{"type":"ai-title","aiTitle":"AI","sessionId":"x"}` + "\n", "", "Sidecar", "AI (fork)"},
		{"no prompt", `{"type":"assistant","uuid":"a","parentUuid":null,"message":{"content":[]}}` + "\n", "", "", "Forked session (fork)"},
	}
	for _, tt := range tests {
		opt := testForkOptions(sid, "", tt.title)
		opt.SidecarTitle = tt.sidecar
		res, err := Session(strings.NewReader(tt.src), io.Discard, opt)
		if err != nil || res.Title != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, res.Title, err, tt.want)
		}
	}
}

// FuzzFork forks arbitrary JSONL: it must not panic, and a fork it writes
// must be valid JSON lines whose parentUuids resolve within it.
func FuzzFork(f *testing.F) {
	f.Add([]byte(`{"type":"user","uuid":"a","parentUuid":null,"message":{"content":"hi"}}`+"\n"+`{"type":"progress","uuid":"p","parentUuid":"a"}`+"\n"+`{"type":"assistant","uuid":"b","parentUuid":"p"}`), "")
	f.Add([]byte(`{"type":"user","uuid":"a","parentUuid":"b"}`+"\n"+`{"type":"progress","uuid":"b","parentUuid":"c"}`+"\n"+`{"type":"progress","uuid":"c","parentUuid":"b"}`), "a")
	f.Add([]byte(`{"type":"system","subtype":"compact_boundary","uuid":"s","logicalParentUuid":"a","compactMetadata":{"preservedSegment":{"headUuid":"a","anchorUuid":"s","tailUuid":"a"},"durationMs":0}}`+"\n"+`{"type":"user","uuid":"a","parentUuid":"s","isSidechain":0}`), "s")
	f.Add([]byte(`{"type":"attachment","uuid":"q","attachment":{"type":"queued_command","source_uuid":"q"}}`+"\n"+`{"type":"user","uuid":"q","uuid":"r"}`+"\n\x01 {\"type\":\"user\",\"uuid\":\"z\"}\r"), "q")
	if files, _ := filepath.Glob(filepath.Join("testdata", "synthetic", "*.jsonl")); len(files) > 0 {
		for _, p := range files {
			if data, err := os.ReadFile(p); err == nil && len(data) < 16<<10 {
				f.Add(data, "")
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, upTo string) {
		var out bytes.Buffer
		opt := testForkOptions("0f0f0f0f-1111-4222-8333-444444444444", upTo, "")
		res, err := Session(bytes.NewReader(src), &out, opt)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
		if len(lines) != res.Lines {
			t.Fatalf("%d lines, result says %d", len(lines), res.Lines)
		}
		ids := map[string]bool{}
		var parents []json.RawMessage
		for i, l := range lines {
			if !json.Valid(l) || !utf8Valid(l) {
				t.Fatalf("line %d is not valid JSON: %q", i+1, l)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			if _, ok := m["forkedFrom"]; !ok {
				continue
			}
			var id string
			json.Unmarshal(m["uuid"], &id)
			ids[id] = true
			parents = append(parents, m["parentUuid"])
		}
		for _, p := range parents {
			var s *string
			if err := json.Unmarshal(p, &s); err != nil {
				t.Fatalf("parentUuid %s", p)
			}
			if s != nil && !ids[*s] {
				t.Fatalf("parentUuid %s does not resolve", *s)
			}
		}
	})
}

func BenchmarkFork(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, "jimmc414__cctrace__main.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Session(bytes.NewReader(src), io.Discard, testForkOptions("132b2f66-ee5f-4000-8000-000000000000", "", "")); err != nil {
			b.Fatal(err)
		}
	}
}
