package journal

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
)

var update = flag.Bool("update", false, "rewrite the golden journals in testdata/ from the current encoder")

// The golden journals pin the on-disk format: if the encoder changes a
// single byte, journals written by released versions may no longer open.
// A deliberate format change bumps headerVersion and keeps a reader for the
// old one.
var (
	goldenHeader = Header{
		Generation: 0x5e551011d0000001,
		ProjectKey: "-home-ada-src-sessiond",
		SessionID:  "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
		Subpath:    "subagents/agent-a2898e3",
		BaseSize:   18231,
		BaseTail:   0x600dcafe,
	}
	goldenBatches = [][]string{
		{`{"type":"user","uuid":"u1","message":{"content":"héllo <&>"}}`, `{"type":"assistant","uuid":"a1","parentUuid":"u1"}`},
		{`{"type":"custom-title","customTitle":"golden"}`},
		{""},
		{},
		{"raw \x00 bytes \xff are opaque"},
	}
	goldenMarker = Marker{Size: 18601, Tail: 0x0ddba11}
)

// writeGoldens writes basic.wal (three appends and a marker) and torn.wal
// (basic.wal plus a cut-off fourth append) into dir.
func writeGoldens(t *testing.T, dir string) {
	t.Helper()
	basic := filepath.Join(dir, "basic.wal")
	j := mustCreate(t, fsys.OS, basic, goldenHeader)
	mustAppend(t, j, goldenBatches[0], goldenBatches[1])
	mustAppend(t, j, goldenBatches[2], goldenBatches[3])
	mustAppend(t, j, goldenBatches[4])
	if err := j.MarkCompacted(goldenMarker); err != nil {
		t.Fatal(err)
	}
	end := j.Size()
	mustAppend(t, j, []string{`{"type":"user","uuid":"u2"}`, `{"never":"committed"}`})
	mustClose(t, j)
	data := readFile(t, basic)
	writeFile(t, filepath.Join(dir, "torn.wal"), data[:len(data)-5])
	writeFile(t, basic, data[:end])
}

func TestGolden(t *testing.T) {
	dir := t.TempDir()
	writeGoldens(t, dir)
	for _, name := range []string{"basic.wal", "torn.wal"} {
		got := readFile(t, filepath.Join(dir, name))
		golden := filepath.Join("testdata", name)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if want := readFile(t, golden); !bytes.Equal(got, want) {
			t.Errorf("%s: encoder output differs from the golden file (%d vs %d bytes); if the format change is deliberate, run go test ./internal/journal -update",
				name, len(got), len(want))
		}
	}
}

func TestGoldenOpens(t *testing.T) {
	basicSize := int64(len(readFile(t, filepath.Join("testdata", "basic.wal"))))
	for _, name := range []string{"basic.wal", "torn.wal"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name)
			data := readFile(t, filepath.Join("testdata", name))
			writeFile(t, path, data)
			j, rec := openExpect(t, path, goldenBatches)
			defer j.Close()
			if rec.Header != goldenHeader {
				t.Errorf("header %+v, want %+v", rec.Header, goldenHeader)
			}
			if rec.Compacted == nil || *rec.Compacted != goldenMarker {
				t.Errorf("marker %v, want %+v", rec.Compacted, goldenMarker)
			}
			if rec.End != basicSize || rec.TruncatedBytes != int64(len(data))-basicSize {
				t.Errorf("End %d TruncatedBytes %d, want %d and %d", rec.End, rec.TruncatedBytes, basicSize, int64(len(data))-basicSize)
			}
			if name == "torn.wal" && rec.TruncatedBytes == 0 {
				t.Error("torn.wal has no torn tail")
			}
		})
	}
}
