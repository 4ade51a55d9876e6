package listing

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// sdkInfo is the SDK's SDKSessionInfo, as the goldens record it.
type sdkInfo struct {
	SessionID   string `json:"sessionId"`
	Summary     string `json:"summary"`
	FileSize    int64  `json:"fileSize"`
	CustomTitle string `json:"customTitle"`
	FirstPrompt string `json:"firstPrompt"`
	GitBranch   string `json:"gitBranch"`
	Cwd         string `json:"cwd"`
	Tag         string `json:"tag"`
	CreatedAt   int64  `json:"createdAt"`
}

type summaryGolden struct {
	SDKVersion string `json:"sdkVersion"`
	SessionID  string `json:"sessionId"`
	Cases      []struct {
		Input     string       `json:"input"`
		SessionID string       `json:"sessionId"`
		Variant   string       `json:"variant"`
		Ops       [][2]*string `json:"ops"`
		Suffix    string       `json:"suffix"`
		Info      *sdkInfo     `json:"info"`
		Listed    bool         `json:"listed"`
		Human     bool         `json:"listedHuman"`
		List      *sdkInfo     `json:"list"`
	} `json:"cases"`
	Meta struct {
		Titles []metaGolden `json:"titles"`
		Tags   []metaGolden `json:"tags"`
	} `json:"meta"`
}

func readSummaryGolden(t *testing.T) *summaryGolden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g summaryGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// infoOf is what the SDK would report for s.
func infoOf(s *Summary, sid string, size int64) *sdkInfo {
	if !s.Listed() {
		return nil
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = "<project>"
	}
	return &sdkInfo{
		SessionID: sid, Summary: s.Display(), FileSize: size, CustomTitle: s.Title, FirstPrompt: s.FirstPrompt,
		GitBranch: s.GitBranch, Cwd: cwd, Tag: s.Tag, CreatedAt: s.CreatedAt,
	}
}

func streamSummary(data []byte) Summary {
	var s Summary
	sc := transcript.NewLineScanner(bytes.NewReader(data))
	for sc.Scan() {
		s.AddLine(sc.Line(), sc.HasNewline())
	}
	return s
}

func headTail(data []byte) (head, tail []byte) {
	if len(data) <= liteWindow {
		return data, nil
	}
	return data[:liteWindow], data[len(data)-liteWindow:]
}

// TestSummaryGoldens compares Summary, streaming and head/tail, with what
// getSessionInfo and listSessions reported for the same file, as it is and
// with renameSession / tagSession lines appended; those appended lines must
// be CustomTitleLine's and TagLine's.
func TestSummaryGoldens(t *testing.T) {
	transcripttest.Goldens(t)
	g := readSummaryGolden(t)
	fixtures, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", transcripttest.FixtureDir)
	}
	covered := map[string]bool{}
	for _, c := range g.Cases {
		covered[strings.TrimPrefix(c.Input, "fixture:")] = true
	}
	for _, f := range fixtures {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no summary golden: run go test -run Golden -update", filepath.Base(f))
		}
	}
	for _, c := range g.Cases {
		t.Run(c.Input+"/"+c.Variant, func(t *testing.T) {
			data := append(transcripttest.GoldenInput(t, c.Input), c.Suffix...)

			// The appended lines are ours.
			var want []byte
			for _, op := range c.Ops {
				switch arg := op[1]; *op[0] {
				case "rename":
					title, err := transcript.NormalizeTitle(*arg)
					if err != nil {
						t.Fatal(err)
					}
					want = append(append(want, transcript.CustomTitleLine(c.SessionID, title)...), '\n')
				case "tag":
					tag := ""
					if arg != nil {
						var err error
						if tag, err = transcript.NormalizeTag(*arg); err != nil {
							t.Fatal(err)
						}
					}
					want = append(append(want, transcript.TagLine(c.SessionID, tag)...), '\n')
				}
			}
			if string(want) != c.Suffix {
				t.Errorf("appended lines:\n%s\nSDK:\n%s", want, c.Suffix)
			}

			if (c.Info != nil) != c.Listed || (c.List != nil) != c.Listed {
				t.Fatalf("golden: getSessionInfo %v, listed %v", c.Info, c.Listed)
			}
			if c.List != nil && *c.List != *c.Info {
				t.Errorf("golden: listSessions %+v, getSessionInfo %+v", *c.List, *c.Info)
			}
			size := int64(len(data))
			s := streamSummary(data)
			if got := infoOf(&s, c.SessionID, size); !equalInfo(got, c.Info) {
				t.Errorf("streaming: %s\nSDK:       %s", showInfo(got), showInfo(c.Info))
			}
			h := summaryFromHeadTail(headTail(data))
			if got := infoOf(&h, c.SessionID, size); !equalInfo(got, c.Info) {
				t.Errorf("head/tail: %s\nSDK:       %s", showInfo(got), showInfo(c.Info))
			}
			for _, x := range []*Summary{&s, &h} {
				if human := x.Listed() && !x.Programmatic; human != c.Human {
					t.Errorf("listed with includeProgrammatic false: %v, SDK %v", human, c.Human)
				}
			}
		})
	}
}

func equalInfo(a, b *sdkInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func showInfo(i *sdkInfo) string {
	if i == nil {
		return "not listed"
	}
	b, _ := json.Marshal(i)
	return string(b)
}

// TestSummaryStreamingMatchesHeadTail checks, on every input cut after
// many of its lines, that the streaming Summary is exactly the lite
// reader's view of the file so far: head and tail windows included.
func TestSummaryStreamingMatchesHeadTail(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s", transcripttest.FixtureDir)
	}
	synth, _ := filepath.Glob(filepath.Join("testdata", "synthetic", "*.jsonl"))
	fsynth, _ := filepath.Glob(filepath.Join("..", "fork", "testdata", "synthetic", "*.jsonl"))
	synth = append(synth, fsynth...)
	for _, f := range append(files, synth...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s Summary
		sc := transcript.NewLineScanner(bytes.NewReader(data))
		n := 0
		for sc.Scan() {
			s.AddLine(sc.Line(), sc.HasNewline())
			n++
			end := sc.Offset() + int64(len(sc.Line()))
			if sc.HasNewline() {
				end++
			}
			every := 7
			if len(data) > 512<<10 {
				every = 31 // keep the test quick
			}
			if n > 40 && n%every != 0 && end != int64(len(data)) {
				continue
			}
			want := summaryFromHeadTail(headTail(data[:end]))
			if !sameSummary(&s, &want) {
				t.Fatalf("%s after line %d (%d bytes):\nstreaming %+v\nhead/tail %+v", filepath.Base(f), n, end, s.fields(), want.fields())
			}
		}
	}
}

func (s *Summary) fields() string {
	return fmt.Sprintf("title=%q custom=%q ai=%q last=%q hint=%q first=%q branch=%q cwd=%q tag=%q created=%d side=%v prog=%v display=%q fork=%q",
		s.Title, s.CustomTitle, s.AITitle, s.LastPrompt, s.SummaryHint, s.FirstPrompt, s.GitBranch, s.Cwd, s.Tag, s.CreatedAt,
		s.IsSidechain, s.Programmatic, s.Display(), s.ForkTitle())
}

func sameSummary(a, b *Summary) bool { return a.fields() == b.fields() }

// TestSummaryWindows exercises the window edges on made-up files.
func TestSummaryWindows(t *testing.T) {
	sid := "0f0f0f0f-1111-4222-8333-444444444444"
	prompt := `{"type":"user","uuid":"u1","timestamp":"2026-01-01T00:00:00Z","gitBranch":"main","cwd":"/w","message":{"role":"user","content":"hello"}}`
	filler := func(n int) string {
		return `{"type":"assistant","uuid":"f","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", n) + `"}]}}`
	}
	title := string(transcript.CustomTitleLine(sid, "Named"))
	tests := []struct {
		name  string
		lines []string
		check func(s *Summary) string
	}{
		{"title at the end", []string{prompt, title}, func(s *Summary) string { return s.Title }},
		{"title pushed out of the tail", []string{prompt, filler(70000), title, filler(70000)}, func(s *Summary) string { return s.Title + "|" + s.Display() }},
		{"title in the head", []string{prompt, title, filler(70000), filler(70000)}, func(s *Summary) string { return s.Title }},
		{"tag cleared", []string{prompt, string(transcript.TagLine(sid, "a")), string(transcript.TagLine(sid, ""))}, func(s *Summary) string { return "[" + s.Tag + "]" }},
		{"tag pushed out", []string{prompt, string(transcript.TagLine(sid, "a")), filler(70000)}, func(s *Summary) string { return "[" + s.Tag + "]" }},
		{"prompt beyond the head", []string{filler(70000), prompt}, func(s *Summary) string { return fmt.Sprint(s.FirstPrompt, "|", s.Listed()) }},
	}
	want := []string{"Named", "|hello", "Named", "[]", "[]", "|false"}
	for i, tt := range tests {
		data := []byte(strings.Join(tt.lines, "\n") + "\n")
		s := streamSummary(data)
		if got := tt.check(&s); got != want[i] {
			t.Errorf("%s: %q, want %q", tt.name, got, want[i])
		}
		h := summaryFromHeadTail(headTail(data))
		if got := tt.check(&h); got != want[i] {
			t.Errorf("%s (head/tail): %q, want %q", tt.name, got, want[i])
		}
	}
}

func TestSummarySidecar(t *testing.T) {
	data := []byte(`{"type":"user","uuid":"u1","message":{"role":"user","content":"hello"}}` + "\n" +
		`{"type":"custom-title","customTitle":"Head","sessionId":"s"}` + "\n" + strings.Repeat(`{"type":"x","pad":"`+strings.Repeat("y", 1000)+`"}`+"\n", 140))
	s := streamSummary(data)
	if s.Title != "Head" {
		t.Fatalf("title %q", s.Title)
	}
	s.SetSidecarTitle(ParseTitleSidecar([]byte(`{"customTitle":"  From\tsidecar\u200b!  ","other":1}`)))
	if s.Title != "From sidecar !" || s.Display() != "From sidecar !" {
		t.Errorf("with sidecar: %q / %q", s.Title, s.Display())
	}
	for _, bad := range []string{``, `[]`, `{"customTitle":3}`, `{"customTitle":null}`, `{"CustomTitle":"x"}`} {
		if got := ParseTitleSidecar([]byte(bad)); got != "" {
			t.Errorf("ParseTitleSidecar(%s) = %q", bad, got)
		}
	}
	if got := ParseTitleSidecar([]byte(`{"customTitle":"` + strings.Repeat("é", 300) + `"}`)); got != strings.Repeat("é", 200) {
		t.Errorf("long sidecar title: %d runes", len([]rune(got)))
	}
}

// FuzzSummaryWindows shrinks the lite reader's windows to a few bytes and
// checks that the streaming Summary sees, after every line, exactly what the
// head/tail reader sees in the windows of the file so far.
func FuzzSummaryWindows(f *testing.F) {
	sid := "0f0f0f0f-1111-4222-8333-444444444444"
	f.Add([]byte(`{"type":"user","timestamp":"2026-01-01T00:00:00Z","gitBranch":"main","cwd":"/w","message":{"content":"hi"}}`+"\n"+
		string(transcript.CustomTitleLine(sid, "T"))+"\n"+`{"type":"ai-title","aiTitle":"A"}`+"\n"+string(transcript.TagLine(sid, "x"))+"\n"), uint8(40))
	f.Add([]byte(`{"gitBranch":"a\`+"\n"+`"gitBranch":"b"}`+"\n"+`{"type":"user","gitBranch":"c`), uint8(10))
	f.Add([]byte(`{"type":"assistant","x":"torn{"type":"custom-title","customTitle":"S"}`+"\n"+`{"type": "tag", "tag": "t"}`), uint8(20))
	f.Add([]byte(`{"type":"relocated","relocatedCwd":"/r"}`+"\n"+`{"lastPrompt":"p","summary":"s"}`+"\n"+`{"type":"user","message":{"content":[{"type":"text","text":"<command-name>/x</command-name>"},{"type":"image"}]}}`), uint8(0))
	// The tail window starts inside a damaged line, just after the '[': the
	// object it then starts with parses, where the whole line yields nothing
	// (the record follows a '[' and is not taken as appended).
	f.Add([]byte(`[{"type":"tag","tag":"0"}`+"\n"), uint8(17))
	f.Add([]byte(`{"type":"user"}`+"\n"+`x{"type":"tag","tag":"1","n":{"type":"tag","tag":"2"}}`+"\n"+`{"a":1}`+"\n"), uint8(54))
	// The tail window starts after the only "tag": of a damaged line, whose
	// appended record spells its key "tag" :, so the window's part has no
	// pattern to find.
	f.Add([]byte(`{"type":"user"}`+"\n"+`"tag": x{"type":"tag","tag" :"v"}`+"\n"), uint8(22))
	// The tail window starts in the whitespace before a JSON line's object.
	f.Add([]byte(`   {"type":"tag","tag":"0"}`), uint8(17))
	if data, err := os.ReadFile(filepath.Join("testdata", "synthetic", "torn-splice.jsonl")); err == nil {
		f.Add(data, uint8(100))
	}
	f.Fuzz(func(t *testing.T, data []byte, w uint8) {
		old := liteWindow
		liteWindow = 8 + int(w)
		defer func() { liteWindow = old }()
		var s Summary
		sc := transcript.NewLineScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			s.AddLine(sc.Line(), sc.HasNewline())
			end := sc.Offset() + int64(len(sc.Line()))
			if sc.HasNewline() {
				end++
			}
			want := summaryFromHeadTail(headTail(data[:end]))
			if !sameSummary(&s, &want) && !gitBranchDiverges(&s, &want, data[:end]) {
				t.Fatalf("window %d, after line %d (%d bytes):\nstreaming %s\nhead/tail %s", liteWindow, n, end, s.fields(), want.fields())
			}
		}
	})
}

// gitBranchDiverges reports the one difference Summary documents: the
// SDK's scan for "gitBranch" values starting inside a value that a scan of
// the whole file read (only possible in damaged lines) finds an occurrence
// the whole-file scan does not.
func gitBranchDiverges(s, want *Summary, data []byte) bool {
	a, b := *s, *want
	a.GitBranch, b.GitBranch = "", ""
	a.parts.gitTail, b.parts.gitTail = "", ""
	if !sameSummary(&a, &b) || len(data) <= liteWindow {
		return false
	}
	start := len(data) - liteWindow
	got, _ := scGitBranch.lastOf(data[start:])
	whole, best := "", -1
	for _, p := range scGitBranch.pats {
		for i := 0; i <= len(data); {
			o := bytes.Index(data[i:], p)
			if o < 0 {
				break
			}
			o += i
			e := textValueEnd(data, o+len(p))
			if e < 0 {
				break
			}
			if o >= start && o > best {
				best, whole = o, textValue(data[o+len(p):e])
			}
			i = e + 1
		}
	}
	return got != whole
}

// TestSummaryExpectAtLeast checks that a summary told the file's size up
// front skips lines and still ends exactly where the lite reader's view of
// the whole file is, for every fixture, at the real window and at a small
// one (which makes nearly every line skippable), and with a promise below
// the real size.
func TestSummaryExpectAtLeast(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s", transcripttest.FixtureDir)
	}
	synth, _ := filepath.Glob(filepath.Join("testdata", "synthetic", "*.jsonl"))
	fsynth, _ := filepath.Glob(filepath.Join("..", "fork", "testdata", "synthetic", "*.jsonl"))
	synth = append(synth, fsynth...)
	files = append(files, synth...)
	old := liteWindow
	defer func() { liteWindow = old }()
	for _, window := range []int{old, 4096} {
		liteWindow = window
		skipped := 0
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := summaryFromHeadTail(headTail(data))
			for _, promise := range []int64{int64(len(data)), int64(len(data)) / 2} {
				var s Summary
				s.ExpectAtLeast(promise)
				sc := transcript.NewLineScanner(bytes.NewReader(data))
				for sc.Scan() {
					s.AddLine(sc.Line(), sc.HasNewline())
				}
				if !sameSummary(&s, &want) {
					t.Fatalf("window %d, %s, promised %d of %d bytes:\nskipping  %+v\nhead/tail %+v",
						window, filepath.Base(f), promise, len(data), s.fields(), want.fields())
				}
				skipped += s.st.skipped
			}
		}
		if skipped == 0 {
			t.Errorf("window %d: no line of %d files was skipped", window, len(files))
		}
	}
}

// TestSummaryExpectAtLeastTornValue: a malformed line (starting in the
// head window, so it is searched) leaves a git branch value open; the line
// after it, where the value ends, is searched too, as in a scan without
// the promise, and only then do lines get skipped.
func TestSummaryExpectAtLeastTornValue(t *testing.T) {
	old := liteWindow
	liteWindow = 256
	defer func() { liteWindow = old }()
	filler := `{"type":"assistant","uuid":"f","message":{"content":"` + strings.Repeat("x", 300) + `"}}`
	short := `{"type":"user","message":{"content":"` + strings.Repeat("s", 150) + `"}}`
	lines := []string{short, `{"gitBranch":"open` + strings.Repeat("y", 100), filler, filler, filler, filler}
	data := []byte(strings.Join(lines, "\n") + "\n")
	var plain, hinted Summary
	hinted.ExpectAtLeast(int64(len(data)))
	sc := transcript.NewLineScanner(bytes.NewReader(data))
	for sc.Scan() {
		plain.AddLine(sc.Line(), true)
		hinted.AddLine(sc.Line(), true)
	}
	if !sameSummary(&plain, &hinted) {
		t.Fatalf("with the promise %+v\nwithout      %+v", hinted.fields(), plain.fields())
	}
	// Not skipped: the first two (the head window holds their starts), the
	// one that closes the open value, the last one (tail window).
	if hinted.st.skipped != len(lines)-4 {
		t.Fatalf("skipped %d of %d lines, want %d", hinted.st.skipped, len(lines), len(lines)-4)
	}
}

// TestTailKeysIn checks the one-pass key finder against a search per
// pattern, on every line of the fixtures and on lines made to sit on its
// edges.
func TestTailKeysIn(t *testing.T) {
	lines := [][]byte{
		[]byte(`"tag":`), []byte(`x"tag":`), []byte(`""tag":`), []byte(`"xtag":"`), []byte(`tag":`), []byte(`"tag"`),
		[]byte(`{"gitBranch":"`), []byte(`{"gitBranch": "`), []byte(`{"gitBranch":  "`), []byte(`"gitBranch":`),
		[]byte(`"entrypoint":"x","entrypoint": "y"`), []byte(`::"summary"::"summary":`), []byte(`:`), nil,
	}
	fixtures, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s", transcripttest.FixtureDir)
	}
	for _, f := range fixtures {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(data, []byte("\n"))...)
	}
	for _, line := range lines {
		var want uint16
		for _, k := range tailKeys {
			if bytes.Contains(line, []byte(`"`+k+`":`)) {
				want |= tailKeyBit(k)
			}
		}
		for _, f := range []*textField{scGitBranch, scEntrypoint} {
			key := strings.TrimSuffix(strings.TrimPrefix(string(f.pats[0]), `"`), `":"`)
			for i, p := range f.pats {
				if bytes.Contains(line, p) {
					want |= textPatBit(key, i)
				}
			}
		}
		if got := tailKeysIn(line); got != want {
			t.Fatalf("tailKeysIn(%.200q) = %012b, want %012b", line, got, want)
		}
	}
}

// TestHeadKeysIn checks the head window's one-pass key finder against a
// search per key, on every line of the fixtures and on lines made to sit
// on its edges.
func TestHeadKeysIn(t *testing.T) {
	lines := [][]byte{
		[]byte(`"cwd":`), []byte(`x"cwd":`), []byte(`""cwd":`), []byte(`"xcwd":"`), []byte(`cwd":`), []byte(`"cwd"`),
		[]byte(`{"type":"user","type":`), []byte(`"isSidechain": true`), []byte(`::"timestamp"::"timestamp":`), []byte(`:`), nil,
		[]byte(`{"parentUuid":null,"sessionKind":"x","entrypoint":"cli","gitBranch":"m","aiTitle":"a","customTitle":"c"}`),
	}
	fixtures, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s", transcripttest.FixtureDir)
	}
	for _, f := range fixtures {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(data, []byte("\n"))...)
	}
	seen := uint16(0)
	for _, line := range lines {
		var want uint16
		for b, k := range headKeys {
			if bytes.Contains(line, []byte(`"`+k+`":`)) {
				want |= 1 << b
			}
		}
		if got := headKeysIn(line); got != want {
			t.Fatalf("headKeysIn(%.200q) = %010b, want %010b", line, got, want)
		}
		seen |= want
	}
	if seen != 1<<len(headKeys)-1 {
		t.Fatalf("the lines hold only keys %010b: every key must be tried", seen)
	}
}

// BenchmarkSummaryAddHead is what every append inside a transcript's first
// 64 KiB costs the listing summary: the lines of a real transcript fed to
// a new summary until its head window is full, over and over.
func BenchmarkSummaryAddHead(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, "jimmc414__cctrace__main.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(src, []byte("\n")), []byte("\n"))
	var s Summary
	var n, total, fed int
	i := 0
	for b.Loop() {
		if n >= liteWindow {
			s, n = Summary{}, 0
		}
		s.Add(lines[i])
		n += len(lines[i]) + 1
		total += len(lines[i]) + 1
		fed++
		if i++; i == len(lines) {
			i = 0
		}
	}
	b.SetBytes(int64(total / max(fed, 1)))
}

func BenchmarkSummaryAdd(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, "jimmc414__cctrace__main.jsonl"))
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
	src, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, "jimmc414__cctrace__main.jsonl"))
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

// TestSummaryRandomGoldens compares Summary with getSessionInfo on the small
// random transcripts the fork goldens were recorded on (gen.mjs records both
// in one pass over them).
func TestSummaryRandomGoldens(t *testing.T) {
	transcripttest.Goldens(t)
	var g struct {
		Cases []struct {
			Text string   `json:"text"`
			Info *sdkInfo `json:"info"`
		} `json:"cases"`
	}
	f, err := os.Open(filepath.Join("..", "fork", "testdata", "random.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(&g); err != nil {
		t.Fatal(err)
	}
	const sid = "0f0f0f0f-1111-4222-8333-444444444444"
	for i, c := range g.Cases {
		src := []byte(c.Text)
		s := streamSummary(src)
		if got := infoOf(&s, sid, int64(len(src))); !equalInfo(got, c.Info) {
			t.Errorf("case %d: summary %s\n SDK %s", i, showInfo(got), showInfo(c.Info))
		}
	}
}
