package torture

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestCorpusSlice: any cut of the corpus is valid JSON string content.
func TestCorpusSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := newCorpus(rng, 256<<10)
	for i := 0; i < 1000; i++ {
		n := rng.IntN(2 << 10)
		if i%50 == 0 {
			n = rng.IntN(300 << 10)
		}
		s := c.slice(rng.IntN(len(c.text)), n)
		if !json.Valid([]byte(`"` + s + `"`)) {
			t.Fatalf("slice %d (n=%d) is not valid string content: %.80q", i, n, s)
		}
		if len(s) > n+64 {
			t.Fatalf("slice of %d bytes asked for %d", len(s), n)
		}
	}
	if c.slice(0, 0) != "" {
		t.Fatal("an empty slice is not empty")
	}
}

// TestEntries: every generated entry is one valid JSON object carrying its
// key, within the size limit, with a uuid exactly when asked; the few
// pretty-printed ones hold newlines that compact away.
func TestEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const max = 1 << 20
	g := &entryGen{rng: rng, corpus: newCorpus(rng, 2*max+(64<<10)), max: max}
	pretty := 0
	var sizes []int
	for i := 0; i < 1500; i++ {
		key := "c1-" + string(rune('a'+i%26))
		withUUID := i%4 != 0
		size := entrySize(rng, max)
		line, id := g.entry(key, "sid", "/w/alpha", size, withUUID)
		if len(line) > max {
			t.Fatalf("entry of %d bytes, over the %d limit", len(line), max)
		}
		if !json.Valid(line) || line[0] != '{' {
			t.Fatalf("entry %d is not a JSON object: %.200q", i, line)
		}
		var v struct {
			TK   string `json:"tk"`
			UUID string `json:"uuid"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		if v.TK != key || v.UUID != id || (id != "") != withUUID {
			t.Fatalf("entry %d: tk %q uuid %q (want %q, uuid %v)", i, v.TK, v.UUID, key, withUUID)
		}
		if k, ok := entryKey(line); !ok || k != key {
			t.Fatalf("entryKey found %q, want %q", k, key)
		}
		if bytes.IndexByte(line, '\n') >= 0 {
			pretty++
			var b bytes.Buffer
			if err := json.Compact(&b, line); err != nil || bytes.IndexByte(b.Bytes(), '\n') >= 0 {
				t.Fatalf("a pretty entry does not compact to one line: %v", err)
			}
		}
		sizes = append(sizes, len(line))
	}
	if pretty == 0 {
		t.Error("no pretty-printed entry was generated")
	}
	sort.Ints(sizes)
	if med := sizes[len(sizes)/2]; med > 2048 {
		t.Errorf("median entry is %d bytes; the distribution should be mostly small", med)
	}
	if top := sizes[len(sizes)-1]; top < 256<<10 {
		t.Errorf("largest entry is %d bytes; the tail should reach hundreds of KiB", top)
	}
}

// TestVerifyFindsDamage: the verifier counts torn lines, duplicates, lost
// acknowledged entries, unknown lines and misplaced keys, and accepts an
// ambiguous entry once.
func TestVerifyFindsDamage(t *testing.T) {
	root := t.TempDir()
	l := newLedger()
	a, err := l.addSession(root, "/w/alpha", "11111111-1111-4111-8111-111111111111")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.addSession(root, "/w/alpha", "22222222-2222-4222-8222-222222222222")
	if err != nil {
		t.Fatal(err)
	}
	l.sent([]string{"k1", "k2", "k3", "k4", "lost"}, a, 1)
	l.acked([]string{"k1", "k2", "lost"})
	l.sent([]string{"kb"}, b, 1) // sent to b, found in a
	l.sent([]string{"amb"}, a, 1)
	write := func(s *session, content string) {
		if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a, `{"tk":"k1"}`+"\n"+
		`{"tk":"k2"}`+"\n"+
		`{"tk":"k2"}`+"\n"+ // duplicated
		`{"tk":"never"}`+"\n"+ // unknown
		`{"x":1}`+"\n"+ // no key
		`{"tk":"kb"}`+"\n"+ // misplaced
		`{"tk":"amb"}`+"\n"+ // ambiguous, present once: fine
		`{"tk":"k3"`+"\n"+ // spliced
		`{"tk":"k4"}`) // torn last line
	write(b, "")
	v, err := l.verify()
	if err != nil {
		t.Fatal(err)
	}
	got := [...]uint64{v.lost, v.dup, v.torn, v.unknown, v.misplac}
	want := [...]uint64{1, 1, 2, 2, 1}
	if got != want {
		t.Fatalf("lost, dup, torn, unknown, misplaced = %v, want %v\n%s", got, want, strings.Join(v.problems, "\n"))
	}
	sort.Strings(v.ambiguousPresent)
	if len(v.ambiguousPresent) != 2 || v.ambiguousPresent[0] != "amb" { // and kb, misplaced
		t.Fatalf("ambiguous present: %v", v.ambiguousPresent)
	}

	// A clean file passes; a retired session is no longer read.
	write(a, `{"tk":"k1"}`+"\n"+`{"tk":"k2"}`+"\n"+`{"tk":"lost"}`+"\n")
	if v, err := l.verify(); err != nil || v.lost+v.dup+v.torn+v.unknown+v.misplac != 0 {
		t.Fatalf("clean file: %+v %v", v, err)
	}
	l.retire(a)
	if v, err := l.verify(); err != nil || v.lines != 0 {
		t.Fatalf("retired session still verified: %+v %v", v, err)
	}
}

// TestScanLinesLong: lines longer than the read buffer come back whole.
func TestScanLinesLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.jsonl")
	long := strings.Repeat("x", 9<<20)
	if err := os.WriteFile(path, []byte("a\n"+long+"\nb"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	var nls []bool
	if err := scanLines(path, func(n int, line []byte, nl bool) {
		got = append(got, string(line))
		nls = append(nls, nl)
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "a" || got[1] != long || got[2] != "b" || !nls[0] || !nls[1] || nls[2] {
		t.Fatalf("got %d lines, newlines %v", len(got), nls)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := summarize(ds)
	if s.N != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 {
		t.Fatalf("%+v", s)
	}
	if s := summarize(nil); s.N != 0 {
		t.Fatalf("%+v", s)
	}
	if s := summarize([]time.Duration{7 * time.Millisecond}); s.P50 != 7 || s.P99 != 7 {
		t.Fatalf("%+v", s)
	}
}

// TestConfigDefaults: a missing binary is refused, defaults are filled.
func TestConfigDefaults(t *testing.T) {
	var c Config
	if err := c.setDefaults(); err == nil {
		t.Fatal("no binary accepted")
	}
	c.Sessiond = "/bin/sh"
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Cycles != 20 || c.Clients != 16 || c.MaxEntry != 1<<20 || c.Mode != ModeKill || c.Seed == 0 {
		t.Fatalf("%+v", c)
	}
	c.Mode = "hup"
	if err := c.setDefaults(); err == nil {
		t.Fatal("mode hup accepted")
	}
}
