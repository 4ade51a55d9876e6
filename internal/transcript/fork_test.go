package transcript

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// -update regenerates the goldens. Other golden tests of the package share
// the flag, so it is defined here only when no other file defines it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "regenerate the goldens in testdata/")
	}
}

var regenerate sync.Once

// goldens regenerates the SDK goldens in testdata/fork and testdata/summary
// (node testdata/gen.mjs, which runs the official SDK) once per run when
// -update is given.
func goldens(t *testing.T) {
	t.Helper()
	if f := flag.Lookup("update"); f == nil || f.Value.String() != "true" {
		return
	}
	regenerate.Do(func() {
		cmd := exec.Command("node", filepath.Join("testdata", "gen.mjs"), fixtureDir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node testdata/gen.mjs: %v", err)
		}
	})
}

// goldenInput reads a golden case's input: "fixture:<name>" in the shared
// fixtures, "synthetic:<name>" in testdata/<kind>/synthetic.
func goldenInput(t *testing.T, kind, input string) []byte {
	t.Helper()
	var p string
	switch {
	case strings.HasPrefix(input, "fixture:"):
		p = filepath.Join(fixtureDir, strings.TrimPrefix(input, "fixture:"))
	case strings.HasPrefix(input, "synthetic:"):
		p = filepath.Join("testdata", kind, "synthetic", strings.TrimPrefix(input, "synthetic:"))
	default:
		t.Fatalf("golden input %q", input)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("golden input %s: %v (the real transcripts from /work/shared/fixtures are needed)", input, err)
	}
	return data
}

type forkGolden struct {
	SDKVersion string `json:"sdkVersion"`
	FixedTime  string `json:"fixedTime"`
	Cases      []struct {
		Input     string `json:"input"`
		SessionID string `json:"sessionId"`
		Name      string `json:"name"`
		Opts      struct {
			UpTo  string `json:"upToMessageId"`
			Title string `json:"title"`
		} `json:"opts"`
		Error string `json:"error"`
		Lines []struct {
			H string                     `json:"h"`
			N int                        `json:"n"`
			K string                     `json:"k"`
			F map[string]json.RawMessage `json:"f"`
		} `json:"lines"`
	} `json:"cases"`
}

func readForkGolden(t *testing.T) *forkGolden {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "fork", "goldens.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g forkGolden
	if err := json.NewDecoder(zr).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// uuidAt reports whether a UUID (8-4-4-4-12 hex digits, either case)
// starts at b[i], as /[0-9a-fA-F]{8}-...-[0-9a-fA-F]{12}/ would match there.
func uuidAt(b []byte, i int) bool {
	if i+36 > len(b) {
		return false
	}
	for j, c := range b[i : i+36] {
		switch j {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// eachUUID calls fn with the start of each UUID in b, leftmost first and
// not overlapping, as a global regular expression search finds them.
func eachUUID(b []byte, fn func(i int)) {
	for i := 0; i+36 <= len(b); {
		if uuidAt(b, i) {
			fn(i)
			i += 36
			continue
		}
		i++
	}
}

// normalizeFork renames the uuids of out that src does not have to
// <new-N>, in order of first appearance, as gen.mjs does.
func normalizeFork(out, src []byte) []byte {
	known := map[string]bool{}
	eachUUID(src, func(i int) { known[string(src[i:i+36])] = true })
	names := map[string]string{}
	var b []byte
	last := 0
	eachUUID(out, func(i int) {
		m := string(out[i : i+36])
		if known[m] {
			return
		}
		n, ok := names[m]
		if !ok {
			n = fmt.Sprintf("<new-%d>", len(names)+1)
			names[m] = n
		}
		b = append(append(b, out[last:i]...), n...)
		last = i + 36
	})
	return append(b, out[last:]...)
}

const forkNewSession = "5e551011-aaaa-4bbb-8ccc-000000000000"

// testForkOptions makes deterministic options.
func testForkOptions(sid, upTo, title string) ForkOptions {
	n := 0
	return ForkOptions{
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

// TestForkGoldens compares Fork with what the SDK's forkSession wrote for
// the same input and options, line by line, byte for byte once the new
// uuids are renamed in order of appearance.
func TestForkGoldens(t *testing.T) {
	goldens(t)
	g := readForkGolden(t)
	if g.FixedTime != "2030-01-02T03:04:05.678Z" {
		t.Fatalf("goldens made with fixed time %s", g.FixedTime)
	}
	fixtures, _ := filepath.Glob(filepath.Join(fixtureDir, "*.jsonl"))
	covered := map[string]bool{}
	for _, c := range g.Cases {
		covered[strings.TrimPrefix(c.Input, "fixture:")] = true
	}
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", fixtureDir)
	}
	for _, f := range fixtures {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no fork golden: run go test -run Golden -update", filepath.Base(f))
		}
	}
	for _, c := range g.Cases {
		t.Run(c.Input+"/"+c.Name, func(t *testing.T) {
			src := goldenInput(t, "fork", c.Input)
			var out bytes.Buffer
			res, err := Fork(bytes.NewReader(src), &out, testForkOptions(c.SessionID, c.Opts.UpTo, c.Opts.Title))
			if c.Error != "" {
				want := errdefs.ErrInvalidArgument
				if strings.Contains(c.Error, "not found") {
					want = errdefs.ErrNotFound
				}
				if !errors.Is(err, want) {
					t.Fatalf("SDK: %s; Fork: %v (want an error wrapping %v)", c.Error, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fork: %v", err)
			}
			norm := normalizeFork(out.Bytes(), src)
			lines := bytes.Split(bytes.TrimSuffix(norm, []byte("\n")), []byte("\n"))
			if len(lines) != len(c.Lines) || res.Lines != len(lines) {
				t.Errorf("%d lines (result says %d), SDK wrote %d", len(lines), res.Lines, len(c.Lines))
			}
			bad := 0
			for i := 0; i < len(lines) && i < len(c.Lines); i++ {
				sum := sha256.Sum256(lines[i])
				if hex.EncodeToString(sum[:]) == c.Lines[i].H {
					continue
				}
				// Fork keeps values as they were written where the SDK
				// re-spells them (JSON.parse + JSON.stringify).
				if canon, err := jsCanonical(lines[i]); err == nil {
					if sum := sha256.Sum256(canon); hex.EncodeToString(sum[:]) == c.Lines[i].H {
						t.Logf("line %d differs from the SDK's only in the spelling of values kept as written: %.300s", i+1, lines[i])
						continue
					}
				}
				if bad++; bad > 3 {
					t.Errorf("... and more")
					break
				}
				obj, _, _ := jsParseObject(lines[i])
				var keys []string
				for _, m := range obj {
					keys = append(keys, m.key)
				}
				var diffs []string
				for k, v := range c.Lines[i].F {
					got, _ := obj.get(k)
					var want bytes.Buffer
					json.Compact(&want, v)
					if !bytes.Equal(got, want.Bytes()) {
						diffs = append(diffs, fmt.Sprintf("%s: got %s, SDK %s", k, got, v))
					}
				}
				t.Errorf("line %d differs (%d bytes, SDK %d)\nkeys: %s\nSDK:  %s\nfields: %s\nline: %.600s",
					i+1, len(lines[i]), c.Lines[i].N, strings.Join(keys, ","), c.Lines[i].K, strings.Join(diffs, "; "), lines[i])
			}
			var title string
			json.Unmarshal(c.Lines[len(c.Lines)-1].F["customTitle"], &title)
			if res.Title != title {
				t.Errorf("title %q, SDK %q", res.Title, title)
			}
		})
	}
}

// forkSources are the inputs of the property tests: every fixture and
// synthetic fork input.
func forkSources(t *testing.T) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", fixtureDir)
	}
	synth, _ := filepath.Glob(filepath.Join("testdata", "fork", "synthetic", "*.jsonl"))
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
			res, err := Fork(bytes.NewReader(src), &out, testForkOptions(sid, upTo, ""))
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
func checkFork(t *testing.T, what string, src, out []byte, res ForkResult) {
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

func utf8Valid(b []byte) bool { return bytes.Equal(nodeUTF8(b), b) }

// jsCanonical re-spells a JSON text as JSON.stringify(JSON.parse(text))
// would (key order kept): strings and numbers re-encoded.
func jsCanonical(text []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var b []byte
	var enc func() error
	enc = func() error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Delim:
			b = append(b, byte(v))
			close := byte(']')
			if v == '{' {
				close = '}'
			}
			for first := true; d.More(); first = false {
				if !first {
					b = append(b, ',')
				}
				if v == '{' {
					k, err := d.Token()
					if err != nil {
						return err
					}
					b = appendJSString(b, k.(string))
					b = append(b, ':')
				}
				if err := enc(); err != nil {
					return err
				}
			}
			if _, err := d.Token(); err != nil {
				return err
			}
			b = append(b, close)
		case string:
			b = appendJSString(b, v)
		case json.Number:
			b = append(b, jsNumber(string(v))...)
		case bool:
			b = strconv.AppendBool(b, v)
		case nil:
			b = append(b, "null"...)
		}
		return nil
	}
	err := enc()
	return b, err
}

// jsNumber formats a JSON number as JavaScript's Number.prototype.toString.
func jsNumber(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && math.IsInf(f, 0) {
		return "null"
	}
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±xx
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	n, k := x+1, len(digits)
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	es := "+"
	if n-1 < 0 {
		es = "-"
	}
	m := digits[:1]
	if k > 1 {
		m += "." + digits[1:]
	}
	return sign + m + "e" + es + strconv.Itoa(abs(n-1))
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestForkReaders checks that Fork reads the same from a seekable reader at
// an offset and from a reader that cannot seek.
func TestForkReaders(t *testing.T) {
	src := forkSources(t)["marot__spotter__tool_heavy.jsonl"]
	sid := "d6e0bada-1959-4000-8000-000000000000"
	var want bytes.Buffer
	if _, err := Fork(bytes.NewReader(src), &want, testForkOptions(sid, "", "")); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := Fork(struct{ io.Reader }{bytes.NewReader(src)}, &got, testForkOptions(sid, "", "")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("a reader that cannot seek forks differently")
	}
	r := bytes.NewReader(append([]byte("skipped prefix\n"), src...))
	r.Seek(int64(len("skipped prefix\n")), io.SeekStart)
	got.Reset()
	if _, err := Fork(r, &got, testForkOptions(sid, "", "")); err != nil {
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
		opt  func(*ForkOptions)
		want error
	}{
		{"bad source id", src, func(o *ForkOptions) { o.SessionID = "nope" }, errdefs.ErrInvalidArgument},
		{"bad new id", src, func(o *ForkOptions) { o.NewSessionID = "" }, errdefs.ErrInvalidArgument},
		{"title with newline", src, func(o *ForkOptions) { o.Title = "two\nlines" }, errdefs.ErrInvalidArgument},
		{"title too long", src, func(o *ForkOptions) { o.Title = strings.Repeat("é", MaxTitleLength+1) }, errdefs.ErrInvalidArgument},
		{"unknown upTo", src, func(o *ForkOptions) { o.UpTo = "nope" }, errdefs.ErrNotFound},
		{"empty", nil, func(o *ForkOptions) {}, errdefs.ErrInvalidArgument},
		{"only progress", []byte(`{"type":"progress","uuid":"p"}` + "\n"), func(o *ForkOptions) {}, errdefs.ErrInvalidArgument},
		{"data flow", append(bytes.Clone(src), `{"type":"data-flow-records","v":1,"sessionId":"x","records":[]}`+"\n"...), func(o *ForkOptions) {}, errdefs.ErrInvalidArgument},
		{"derived from", append(bytes.Clone(src), `{"type":"derived-from","v":1,"sessionId":"`+sid+`","sessions":[]}`+"\n"...), func(o *ForkOptions) {}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		opt := testForkOptions(sid, "", "")
		tt.opt(&opt)
		var out bytes.Buffer
		_, err := Fork(bytes.NewReader(tt.src), &out, opt)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", tt.name, out.Len())
		}
	}
	// A sub-agent's derived-from record is another session's: no error.
	other := append(bytes.Clone(src), `{"type":"derived-from","v":1,"sessionId":"9e9e9e9e-5555-4666-8777-888888888888","sessions":[]}`+"\n"...)
	if _, err := Fork(bytes.NewReader(other), io.Discard, testForkOptions(sid, "", "")); err != nil {
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
		res, err := Fork(strings.NewReader(tt.src), io.Discard, opt)
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
	if files, _ := filepath.Glob(filepath.Join("testdata", "fork", "synthetic", "*.jsonl")); len(files) > 0 {
		for _, p := range files {
			if data, err := os.ReadFile(p); err == nil && len(data) < 16<<10 {
				f.Add(data, "")
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, upTo string) {
		var out bytes.Buffer
		opt := testForkOptions("0f0f0f0f-1111-4222-8333-444444444444", upTo, "")
		res, err := Fork(bytes.NewReader(src), &out, opt)
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

// TestForkRandomGoldens compares Fork, and Summary, with forkSession and
// getSessionInfo on the small random transcripts of testdata/fork/random.json.gz.
func TestForkRandomGoldens(t *testing.T) {
	goldens(t)
	f, err := os.Open(filepath.Join("testdata", "fork", "random.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Text string `json:"text"`
			Opts struct {
				UpTo  string `json:"upToMessageId"`
				Title string `json:"title"`
			} `json:"opts"`
			Fork  string   `json:"fork"`
			Error string   `json:"error"`
			Info  *sdkInfo `json:"info"`
		} `json:"cases"`
	}
	if err := json.NewDecoder(zr).Decode(&g); err != nil {
		t.Fatal(err)
	}
	const sid = "0f0f0f0f-1111-4222-8333-444444444444"
	for i, c := range g.Cases {
		src := []byte(c.Text)
		var out bytes.Buffer
		_, err := Fork(bytes.NewReader(src), &out, testForkOptions(sid, c.Opts.UpTo, c.Opts.Title))
		switch {
		case c.Error != "" && err == nil:
			t.Errorf("case %d: the SDK failed (%s), Fork did not", i, c.Error)
		case c.Error == "" && err != nil:
			t.Errorf("case %d: %v", i, err)
		case c.Error == "":
			got := normalizeFork(out.Bytes(), src)
			want := renumberNew(nullDangling([]byte(c.Fork)))
			if !bytes.Equal(got, want) {
				t.Errorf("case %d (up to %q):\n got %s\nwant %s\ninput:\n%s", i, c.Opts.UpTo, got, want, src)
			}
		}
		s := streamSummary(src)
		if got := infoOf(&s, sid, int64(len(src))); !equalInfo(got, c.Info) {
			t.Errorf("case %d: summary %s\n SDK %s", i, showInfo(got), showInfo(c.Info))
		}
	}
}

// renumberNew renames the <new-N> placeholders of a normalized fork in
// order of first appearance again (after nullDangling removed some).
func renumberNew(b []byte) []byte {
	names := map[string]string{}
	return newRe.ReplaceAllFunc(b, func(m []byte) []byte {
		n, ok := names[string(m)]
		if !ok {
			n = fmt.Sprintf("<new-%d>", len(names)+1)
			names[string(m)] = n
		}
		return []byte(n)
	})
}

var newRe = regexp.MustCompile(`<new-[0-9]+>`)

// nullDangling sets to null the parentUuids of a fork that name no entry
// of it: where a chain of progress entries loops, the SDK points an entry at
// a progress entry it does not copy, and Fork writes null (see Fork).
func nullDangling(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
	ids := map[string]bool{}
	for _, l := range lines {
		o, _, _ := jsParseObject(l)
		if id, ok := o.str("uuid"); ok {
			ids[id] = true
		}
	}
	var b []byte
	for _, l := range lines {
		o, _, _ := jsParseObject(l)
		if p, ok := o.str("parentUuid"); ok && !ids[p] {
			l = o.set("parentUuid", litNull).appendTo(nil)
		}
		b = append(append(b, l...), '\n')
	}
	return b
}

func BenchmarkFork(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(fixtureDir, "jimmc414__cctrace__main.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Fork(bytes.NewReader(src), io.Discard, testForkOptions("132b2f66-ee5f-4000-8000-000000000000", "", "")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSummaryAdd(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(fixtureDir, "jimmc414__cctrace__main.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		streamSummary(src)
	}
}

// BenchmarkSummaryAddTail is what every append past the head window costs
// the listing summary: the lines of a real transcript fed over and over
// to a summary already past its first 64 KiB.
func BenchmarkSummaryAddTail(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(fixtureDir, "jimmc414__cctrace__main.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(src, []byte("\n")), []byte("\n"))
	var s Summary
	for n := 0; n < 2*liteWindow; {
		for _, l := range lines {
			s.Add(l)
			n += len(l) + 1
		}
	}
	var size int64
	for _, l := range lines {
		size += int64(len(l)) + 1
	}
	b.SetBytes(size / int64(len(lines)))
	i := 0
	for b.Loop() {
		s.Add(lines[i])
		if i++; i == len(lines) {
			i = 0
		}
	}
}
