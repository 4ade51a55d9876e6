// Package transcripttest helps the tests of the transcript packages: the
// real transcripts shared by the whole project (the fixtures), independent
// encoding/json oracles, random JSON entries, and the goldens recorded from
// the official SDK. It imports no transcript package, so that the tests of
// every one of them can use it.
package transcripttest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// FixtureDir holds real transcripts (see SOURCES.md there), shared by the
// whole project rather than copied into testdata/.
var FixtureDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "shared", "fixtures")
}()

// FixtureLine is one line of a fixture, as a LineScanner returns it.
type FixtureLine struct {
	File    string
	Line    []byte
	Off     int64
	Newline bool
}

// FixtureLines reads every line of every fixture. It fails the test when
// the fixtures are missing: a silent skip would let the most realistic test
// stop running unnoticed.
func FixtureLines(t testing.TB) []FixtureLine {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(FixtureDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s (glob error %v): the real transcripts from /work/shared/fixtures are needed", FixtureDir, err)
	}
	var lines []FixtureLine
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); {
			end, next, newline := len(data), len(data), false
			if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
				end, next, newline = off+i, off+i+1, true
			}
			lines = append(lines, FixtureLine{File: filepath.Base(f), Line: bytes.Clone(data[off:end]), Off: int64(off), Newline: newline})
			off = next
		}
	}
	return lines
}
