package fork

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// Fork against the SDK's forkSession: the goldens recorded from real and
// synthetic transcripts and from small random ones, compared line by line
// once the fresh uuids are renamed in order of appearance.

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
	var g forkGolden
	readGzipJSON(t, filepath.Join("testdata", "goldens.json.gz"), &g)
	return &g
}

// readGzipJSON decodes the gzipped JSON file at path into v.
func readGzipJSON(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// uuidAt reports whether a UUID (8-4-4-4-12 hex digits, either case)
// starts at b[i], as /[0-9a-fA-F]{8}-...-[0-9a-fA-F]{12}/ would match there.
func uuidAt(b []byte, i int) bool {
	return i+36 <= len(b) && sdkUUID(string(b[i:i+36]))
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

// TestForkGoldens compares Fork with what the SDK's forkSession wrote for
// the same input and options, line by line, byte for byte once the new
// uuids are renamed in order of appearance.
func TestForkGoldens(t *testing.T) {
	transcripttest.Goldens(t)
	g := readForkGolden(t)
	if g.FixedTime != "2030-01-02T03:04:05.678Z" {
		t.Fatalf("goldens made with fixed time %s", g.FixedTime)
	}
	fixtures, _ := filepath.Glob(filepath.Join(transcripttest.FixtureDir, "*.jsonl"))
	covered := map[string]bool{}
	for _, c := range g.Cases {
		covered[strings.TrimPrefix(c.Input, "fixture:")] = true
	}
	if len(fixtures) == 0 {
		t.Fatalf("no fixtures in %s: the real transcripts from /work/shared/fixtures are needed", transcripttest.FixtureDir)
	}
	for _, f := range fixtures {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no fork golden: run go test -run Golden -update", filepath.Base(f))
		}
	}
	for _, c := range g.Cases {
		t.Run(c.Input+"/"+c.Name, func(t *testing.T) {
			src := transcripttest.GoldenInput(t, c.Input)
			var out bytes.Buffer
			res, err := Session(bytes.NewReader(src), &out, testForkOptions(c.SessionID, c.Opts.UpTo, c.Opts.Title))
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
				obj, _, _ := rawjson.ParseObject(lines[i])
				var keys []string
				for _, m := range obj {
					keys = append(keys, m.Key)
				}
				var diffs []string
				for k, v := range c.Lines[i].F {
					got, _ := obj.Get(k)
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
					b = rawjson.AppendJSString(b, k.(string))
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
			b = rawjson.AppendJSString(b, v)
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

// TestForkRandomGoldens compares Fork with forkSession on the small random
// transcripts of testdata/random.json.gz (listing's tests compare Summary
// with getSessionInfo on the same transcripts).
func TestForkRandomGoldens(t *testing.T) {
	transcripttest.Goldens(t)
	var g struct {
		Cases []struct {
			Text string `json:"text"`
			Opts struct {
				UpTo  string `json:"upToMessageId"`
				Title string `json:"title"`
			} `json:"opts"`
			Fork  string `json:"fork"`
			Error string `json:"error"`
		} `json:"cases"`
	}
	readGzipJSON(t, filepath.Join("testdata", "random.json.gz"), &g)
	const sid = "0f0f0f0f-1111-4222-8333-444444444444"
	for i, c := range g.Cases {
		src := []byte(c.Text)
		var out bytes.Buffer
		_, err := Session(bytes.NewReader(src), &out, testForkOptions(sid, c.Opts.UpTo, c.Opts.Title))
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
		o, _, _ := rawjson.ParseObject(l)
		if id, ok := o.Str("uuid"); ok {
			ids[id] = true
		}
	}
	var b []byte
	for _, l := range lines {
		o, _, _ := rawjson.ParseObject(l)
		if p, ok := o.Str("parentUuid"); ok && !ids[p] {
			l = o.Set("parentUuid", rawjson.Null).AppendTo(nil)
		}
		b = append(append(b, l...), '\n')
	}
	return b
}
