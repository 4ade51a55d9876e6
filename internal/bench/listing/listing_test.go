package listing

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/sdkcheck"
)

// TestListingScenario runs the listing scenario at a small scale against a
// real sessiond and the real SDK, with verification: both must list every
// session written, in the same order, with the same metadata. It asserts
// what was measured and verified, never a speed.
func TestListingScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond and node")
	}
	// Fails instead of skipping under CI or SESSIOND_REQUIRE_SDK=1.
	sdk := sdkcheck.Require(t)
	t.Parallel()
	bin := benchtest.Sessiond(t)
	dir := t.TempDir()
	var log strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: dir, Log: &log, Seed: 7, Verify: true, Scale: 0.006, SDKDir: sdk.Dir}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, err := Run(ctx, env)
	if err != nil {
		t.Fatalf("Run: %v\nlog:\n%s", err, log.String())
	}
	const n = 60 // 10,000 * 0.006
	ents, err := os.ReadDir(filepath.Join(dir, "root", "projects"))
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, p := range ents {
		fs, err := filepath.Glob(filepath.Join(dir, "root", "projects", p.Name(), "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		files += len(fs)
	}
	if files != n {
		t.Errorf("%d session files written, want %d", files, n)
	}
	if sc.Table == nil || len(sc.Table.Rows) != 8 {
		t.Fatalf("table %+v", sc.Table)
	}
	for _, r := range sc.Table.Rows {
		if len(r) != len(sc.Table.Columns) {
			t.Errorf("row %q has %d cells, want %d", r, len(r), len(sc.Table.Columns))
		}
		// start -> warm is only bounded when the warm-up ended before
		// the bench looked.
		if ms, err := strconv.ParseFloat(strings.TrimPrefix(r[1], "<= "), 64); err != nil || ms <= 0 {
			t.Errorf("row %q: time %q not measured", r[0], r[1])
		}
	}
	if len(sc.Checks) != 1 || sc.Checks[0].Value <= 0 || sc.Checks[0].Limit != 10 || sc.Checks[0].Unit != "x" {
		t.Errorf("checks %+v", sc.Checks)
	}
	notes := strings.Join(sc.Notes, "\n")
	if !strings.Contains(notes, "Verified:") || !strings.Contains(notes, "60 sessions") {
		t.Errorf("notes do not say what was built and verified:\n%s", notes)
	}
	// At this scale one session is the large one (2-5 MiB), and metadata
	// of several kinds were written.
	if !strings.Contains(notes, "largest 2.") && !strings.Contains(notes, "largest 3.") &&
		!strings.Contains(notes, "largest 4.") && !strings.Contains(notes, "largest 5.") {
		t.Errorf("no multi-MB session:\n%s", notes)
	}
	for _, k := range []string{"custom-title", "first prompt", "last-prompt"} {
		if !strings.Contains(notes, k) {
			t.Errorf("no %s session written:\n%s", k, notes)
		}
	}
}

// TestListingFolder checks the generator: every line of every session is a
// JSON object carrying the session's own id, no uuid repeats within a
// session (copies of a template get fresh ones), and the sizes recorded are
// the files'.
func TestListingFolder(t *testing.T) {
	fixtures, err := findFixtures("")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := loadListTemplates(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	// 4 sessions: the third (n/2) is the large one, made of many copies.
	written, err := buildListFolder(context.Background(), root, 3, 4, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range written {
		b, err := os.ReadFile(w.path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != w.size || len(b) < listMinSize {
			t.Errorf("session %d: %d bytes on disk, %d recorded", i, len(b), w.size)
		}
		if i == 2 && len(b) < 2<<20 {
			t.Errorf("session %d should be the large one: %d bytes", i, len(b))
		}
		uuids := map[string]bool{}
		for ln, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var e struct {
				SessionID *string `json:"sessionId"`
				UUID      string  `json:"uuid"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("session %d line %d: %v", i, ln+1, err)
			}
			if e.SessionID != nil && *e.SessionID != w.sid {
				t.Errorf("session %d line %d: sessionId %s, want %s", i, ln+1, *e.SessionID, w.sid)
			}
			if e.UUID != "" {
				if uuids[e.UUID] {
					t.Errorf("session %d line %d: uuid %s repeats", i, ln+1, e.UUID)
				}
				uuids[e.UUID] = true
			}
		}
	}
}

// TestListingVerifyCatchesMismatch makes sure the verification is not
// vacuous: listings that agree with what was written pass, and one that
// differs in a field, in order or in count is refused.
func TestListingVerifyCatchesMismatch(t *testing.T) {
	fixtures, err := findFixtures("")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := loadListTemplates(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	written, err := buildListFolder(context.Background(), t.TempDir(), 3, 3, ts)
	if err != nil {
		t.Fatal(err)
	}
	lists := func() ([]sdkListInfo, []*sessiondv1.SessionInfo) {
		var sdk []sdkListInfo
		var sd []*sessiondv1.SessionInfo
		for _, w := range written { // newest first, as built
			sdk = append(sdk, sdkListInfo{SessionID: w.sid, Summary: "s " + w.sid, LastModified: w.mtime.UnixMilli(), FileSize: w.size, Cwd: "/x"})
			sd = append(sd, &sessiondv1.SessionInfo{
				Session: &sessiondv1.ResolvedSession{SessionId: w.sid, ProjectKey: w.project},
				Summary: "s " + w.sid, ModifiedMs: w.mtime.UnixMilli(), Bytes: uint64(w.size), Cwd: "/x"})
		}
		return sdk, sd
	}
	sdk, sd := lists()
	if err := verifyListing(written, sdk, sd); err != nil {
		t.Fatalf("agreeing listings refused: %v", err)
	}
	sdk, sd = lists()
	sd[1].Summary = "other"
	if err := verifyListing(written, sdk, sd); err == nil || !strings.Contains(err.Error(), "summary") {
		t.Errorf("a summary mismatch passed: %v", err)
	}
	sdk, sd = lists()
	sdk[0], sdk[1] = sdk[1], sdk[0]
	if err := verifyListing(written, sdk, sd); err == nil {
		t.Error("a different order passed")
	}
	sdk, sd = lists()
	if err := verifyListing(written, sdk[:2], sd); err == nil {
		t.Error("a missing session passed")
	}
	sdk, sd = lists()
	sd[2].Bytes++
	if err := verifyListing(written, sdk, sd); err == nil {
		t.Error("a size mismatch passed")
	}
}
