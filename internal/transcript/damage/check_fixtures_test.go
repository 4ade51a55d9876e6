package damage

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// knownState is what SOURCES.md, written when the fixtures were
// collected, says about one real transcript.
type knownState struct {
	lines, unparseable, dups, unpaired int
	newline                            bool
}

var (
	sourcesFile  = regexp.MustCompile("(?m)^### `([^`]+)`$")
	sourcesLines = regexp.MustCompile(`entries \(non-empty lines\): ([\d,]+); unparseable lines: (\d+); ends with newline: (True|False)`)
	sourcesDups  = regexp.MustCompile(`\(dup uuids: (\d+)\)`)
	sourcesPairs = regexp.MustCompile(`unpaired tool_use: (\d+)`)
)

// knownStates parses SOURCES.md.
func knownStates(t *testing.T) map[string]knownState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, "SOURCES.md"))
	if err != nil {
		t.Fatalf("%v: the real transcripts and their SOURCES.md from /work/shared/fixtures are needed", err)
	}
	states := map[string]knownState{}
	idx := sourcesFile.FindAllSubmatchIndex(data, -1)
	for k, m := range idx {
		name := string(data[m[2]:m[3]])
		end := len(data)
		if k+1 < len(idx) {
			end = idx[k+1][0]
		}
		sec := data[m[1]:end]
		l, d, p := sourcesLines.FindSubmatch(sec), sourcesDups.FindSubmatch(sec), sourcesPairs.FindSubmatch(sec)
		if l == nil || d == nil || p == nil {
			t.Fatalf("SOURCES.md: cannot read the state of %s", name)
		}
		num := func(b []byte) int {
			n, err := strconv.Atoi(strings.ReplaceAll(string(b), ",", ""))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		states[name] = knownState{lines: num(l[1]), unparseable: num(l[2]), newline: string(l[3]) == "True", dups: num(d[1]), unpaired: num(p[1])}
	}
	return states
}

// TestCheckFixtures checks every real transcript against its known state:
// the clean ones are clean, cctrace (a live session copied while a tool
// ran) has exactly one orphaned tool_use in its last line, and the
// TRUNCATED one has its torn last line and the tool_use whose result that
// line held.
func TestCheckFixtures(t *testing.T) {
	states := knownStates(t)
	files, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(files) != len(states) {
		t.Fatalf("%d fixtures but SOURCES.md describes %d", len(files), len(states))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			st, ok := states[name]
			if !ok {
				t.Fatalf("SOURCES.md does not describe %s", name)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Check(bytes.NewReader(data), CheckOptions{SessionID: fileSessionID(data)})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Lines != int64(st.lines) || rep.Malformed != int64(st.unparseable) || rep.Entries != rep.Lines-rep.Malformed {
				t.Errorf("lines %d, entries %d, malformed %d; SOURCES.md: %d lines, %d unparseable", rep.Lines, rep.Entries, rep.Malformed, st.lines, st.unparseable)
			}
			count := map[string]int{}
			for _, p := range rep.Problems {
				count[p.Kind]++
				switch p.Kind {
				case KindOrphanToolUse, KindDuplicateUUID:
				case KindTorn:
					if st.newline || p.Line != rep.Lines {
						t.Errorf("torn line %d, but the file has %d lines and ends with newline: %v", p.Line, rep.Lines, st.newline)
					}
				default:
					t.Errorf("unexpected %s at line %d: %s", p.Kind, p.Line, p.Message)
				}
			}
			torn := 0
			if !st.newline {
				torn = 1
			}
			if count[KindOrphanToolUse] != st.unpaired || count[KindDuplicateUUID] != st.dups || count[KindTorn] != torn {
				t.Errorf("found %v; SOURCES.md says %d unpaired tool_use, %d duplicate uuids, torn last line: %v\n%s",
					count, st.unpaired, st.dups, !st.newline, problemList(rep))
			}
			switch {
			case strings.Contains(name, "cctrace"):
				// The live session's last line is the call still running.
				if p := rep.Problems[0]; p.Kind != KindOrphanToolUse || p.Line != rep.Lines {
					t.Errorf("cctrace: want the orphan on the last line %d, got %s at %d", rep.Lines, p.Kind, p.Line)
				}
			case strings.Contains(name, "TRUNCATED"):
				// The torn line 885 held the result of line 882's call.
				if p := rep.Problems[0]; p.Kind != KindOrphanToolUse || p.Line != 882 {
					t.Errorf("TRUNCATED: want the orphan on line 882, got %s at %d", p.Kind, p.Line)
				}
			}
		})
	}
}

// TestRepairFixtures repairs every real transcript: a clean one comes out
// byte for byte as it went in, with nothing done; a damaged one comes out
// repaired, and a second repair changes nothing.
func TestRepairFixtures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", transcripttest.FixtureDir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			opt := RepairOptions{SessionID: fileSessionID(data)}
			var out bytes.Buffer
			res, err := Repair(bytes.NewReader(data), int64(len(data)), &out, opt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Before.Clean() {
				if res.Changed || len(res.Actions) > 0 || !bytes.Equal(out.Bytes(), data) {
					t.Fatalf("repair changed a clean transcript (%d actions):\n%s", len(res.Actions), actionList(res.Actions))
				}
				return
			}
			assertRepaired(t, out.Bytes(), res, CheckOptions{SessionID: opt.SessionID})
			inserted := 0
			for _, a := range res.Actions {
				if a.Kind == ActionInsertResult {
					inserted++
				}
			}
			orphans := 0
			for _, p := range res.Before.Problems {
				if p.Kind == KindOrphanToolUse {
					orphans++
				}
			}
			if inserted != orphans {
				t.Errorf("inserted %d tool results for %d orphaned tool uses", inserted, orphans)
			}
		})
	}
}

// fileSessionID returns the first sessionId of a transcript.
func fileSessionID(data []byte) string {
	for _, l := range bytes.Split(data, []byte("\n")) {
		if id, ok := rawjson.TopLevelString(l, "sessionId"); ok {
			return id
		}
	}
	return ""
}
