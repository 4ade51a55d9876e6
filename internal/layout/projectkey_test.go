package layout

import (
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/sessiond/sessiond/internal/errdefs"
)

var update = flag.Bool("update", false, "regenerate testdata/projectkeys.json by running node testdata/projectkeys.mjs")

const goldenFile = "testdata/projectkeys.json"

type goldenCase struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	Canonical string `json:"canonical"`
	Hash      int32  `json:"hash"`
	Key       string `json:"key"`
	DarwinKey string `json:"darwinKey"`
}

// runNode runs the generator script with args and returns its stdout.
func runNode(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("node", append([]string{"testdata/projectkeys.mjs"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node testdata/projectkeys.mjs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestProjectKeyGolden compares with keys computed by the SDK's own
// algorithm under node (see testdata/projectkeys.mjs).
func TestProjectKeyGolden(t *testing.T) {
	if *update {
		if err := os.WriteFile(goldenFile, runNode(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", goldenFile, err)
	}

	// The file must keep covering the cases that matter.
	var minHash, negHash bool
	lengths := map[int]bool{}
	for _, c := range doc.Cases {
		minHash = minHash || c.Hash == math.MinInt32
		negHash = negHash || c.Hash < 0 && len(c.Key) > maxProjectKeyPrefix
		lengths[len(c.Canonical)] = true
	}
	if !minHash || !negHash || !lengths[199] || !lengths[200] || !lengths[201] || !lengths[300] {
		t.Errorf("%s lost a case: hash -2^31 %v, negative hash in a long key %v, lengths 199/200/201/300 %v/%v/%v/%v",
			goldenFile, minHash, negHash, lengths[199], lengths[200], lengths[201], lengths[300])
	}

	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			canon, err := canonicalCwd(c.Path, false)
			if err != nil {
				t.Fatalf("canonicalCwd(%q) = %v", c.Path, err)
			}
			if canon != c.Canonical {
				t.Errorf("canonicalCwd(%q) = %q, SDK has %q", c.Path, canon, c.Canonical)
			}
			if h := sdkHash(c.Canonical); h != c.Hash {
				t.Errorf("sdkHash = %d, SDK has %d", h, c.Hash)
			}
			if k := projectKeyOf(c.Canonical); k != c.Key {
				t.Errorf("projectKeyOf =\n  %q\nSDK has\n  %q", k, c.Key)
			}
			darwinCanon, err := canonicalCwd(c.Path, true)
			if err != nil {
				t.Fatal(err)
			}
			if k := projectKeyOf(darwinCanon); k != c.DarwinKey {
				t.Errorf("darwin key =\n  %q\nSDK has\n  %q", k, c.DarwinKey)
			}

			want := c.Key
			if runtime.GOOS == "darwin" {
				want = c.DarwinKey
			}
			got, err := ProjectKeyFromCwd(c.Path)
			if err != nil || got != want {
				t.Errorf("ProjectKeyFromCwd(%q) = %q, %v; want %q", c.Path, got, err, want)
			}
			if err := ValidateProjectKey(got); err != nil {
				t.Errorf("derived key does not validate: %v", err)
			}
		})
	}
}

// TestProjectKeySymlinks checks that the realpath step follows links as
// Node's fs.realpathSync does, and falls back where it fails. When node is
// installed the same folders are also keyed by the script and compared.
func TestProjectKeySymlinks(t *testing.T) {
	dir := t.TempDir()
	realDir := filepath.Join(dir, "real project.dir")
	mustMkdir(t, filepath.Join(realDir, "child"))
	link := filepath.Join(dir, "link")
	if err := os.Symlink(realDir, link); err != nil {
		t.Skipf("cannot create symlinks here: %v", err)
	}
	relLink := filepath.Join(dir, "rel-link")
	mustSymlink(t, "real project.dir/child", relLink)
	dangling := filepath.Join(dir, "dangling")
	mustSymlink(t, filepath.Join(dir, "missing"), dangling)

	// t.TempDir itself may sit behind a link (/tmp -> /private/tmp on macOS).
	realCanon, err := filepath.EvalSymlinks(realDir)
	if err != nil {
		t.Fatal(err)
	}
	nfc := func(s string) string {
		if runtime.GOOS == "darwin" {
			return norm.NFC.String(s)
		}
		return s
	}
	wantReal := projectKeyOf(nfc(realCanon))
	wantChild := projectKeyOf(nfc(filepath.Join(realCanon, "child")))

	cases := []struct{ cwd, want string }{
		{realDir, wantReal},
		{link, wantReal},
		{link + "/", wantReal},
		{link + "/.", wantReal},
		{filepath.Join(link, "child"), wantChild},
		{link + "/child/..", wantReal}, // resolved lexically first, as path.resolve does
		{relLink, wantChild},
		{dangling, projectKeyOf(nfc(dangling))}, // realpath fails: kept as is
		{filepath.Join(link, "missing"), projectKeyOf(nfc(filepath.Join(link, "missing")))}, // idem
	}

	// A link whose target is not UTF-8: Node looks the decoded (U+FFFD)
	// name up and fails, so the SDK keeps the link's own path.
	badTarget := filepath.Join(dir, "d\xe2\x82x")
	badLink := filepath.Join(dir, "bad-link")
	if err := os.Mkdir(badTarget, 0o755); err == nil {
		mustSymlink(t, badTarget, badLink)
		cases = append(cases, struct{ cwd, want string }{badLink, projectKeyOf(nfc(badLink))})
	} else {
		t.Logf("no non-UTF-8 names on this filesystem (%v); skipping that case", err)
	}

	for _, c := range cases {
		got, err := ProjectKeyFromCwd(c.cwd)
		if err != nil || got != c.want {
			t.Errorf("ProjectKeyFromCwd(%q) = %q, %v; want %q", c.cwd, got, err, c.want)
		}
	}

	if _, err := exec.LookPath("node"); err != nil {
		t.Log("node not found; not comparing with the SDK's algorithm on real folders")
		return
	}
	var paths []string
	for _, c := range cases {
		paths = append(paths, c.cwd)
	}
	var fromNode []struct {
		Path string `json:"path"`
		Key  string `json:"key"`
	}
	if err := json.Unmarshal(runNode(t, append([]string{"--paths"}, paths...)...), &fromNode); err != nil {
		t.Fatal(err)
	}
	for i, n := range fromNode {
		if n.Key != cases[i].want {
			t.Errorf("node keys %q as %q; sessiond as %q", n.Path, n.Key, cases[i].want)
		}
	}
}

func TestProjectKeyFromCwdRefuses(t *testing.T) {
	cases := []struct{ cwd, wantErr string }{
		{"", "cwd is empty"},
		{"relative/dir", "is a relative path"},
		{".", "is a relative path"},
		{"./x", "is a relative path"},
		{"~/project", "is a relative path"},
		{"/a\x00b", "contains a NUL byte"},
		{"/a\xffb", "not valid UTF-8"},
	}
	for _, c := range cases {
		key, err := ProjectKeyFromCwd(c.cwd)
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("ProjectKeyFromCwd(%q) = %q, %v; want an ErrInvalidArgument mentioning %q", c.cwd, key, err, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "absolute path") {
			t.Errorf("message %q does not say what is accepted", err)
		}
	}
}

func TestSDKHashEdges(t *testing.T) {
	// Values worked out by hand from h = h*31 + c.
	cases := []struct {
		s    string
		want int32
	}{
		{"", 0},
		{"a", 97},
		{"ab", 97*31 + 98},
		{"\U0001F389", 0xD83C*31 + 0xDF89}, // surrogate pair
		{"\uFFFF", 0xFFFF},
	}
	for _, c := range cases {
		if got := sdkHash(c.s); got != c.want {
			t.Errorf("sdkHash(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
