package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestForeignTruncatingSave: with the real daemon and sessionctl, a tool loads a transcript sessiond writes
// and saves its copy back with open("w"), shorter, plus lines of its own,
// and the daemon restarts. check must exit 1 naming every acknowledged
// entry the copy lacks, status must list the transcript, repair must put
// them back (from the journal's retained segments) and check is
// clean after: every acknowledged entry once, in the order acknowledged,
// and the tool's lines kept.
func TestForeignTruncatingSave(t *testing.T) {
	t.Parallel()
	// Small segments, so the entries lie in segments the log has let go
	// (retained) by the time of the repair, not only in live ones.
	d := newDaemon(t, "--journal-segment-size", "16384")
	d.start()
	c := d.client()
	defer c.Close()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	sid := uuid.NewString()
	s := client.Session{Cwd: cwd, ID: sid}
	path := filepath.Join(d.root, "projects", pk, sid+".jsonl")
	ctx := context.Background()

	const n = 60
	var acked []string
	var ids []string
	parent := "null"
	pad := strings.Repeat("w", 700)
	for i := 0; i < n; i++ {
		id := uuid.NewString()
		l := fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":%s,"sessionId":%q,"cwd":%q,"message":{"role":"user","content":"turn %d %s"}}`, id, parent, sid, cwd, i, pad)
		if _, err := c.Append(ctx, s, []byte(l)); err != nil {
			t.Fatal(err)
		}
		acked, ids = append(acked, l), append(ids, id)
		parent = fmt.Sprintf("%q", id)
		if i%10 == 9 {
			if _, err := c.Flush(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The tool's stale copy: what it loaded earlier, plus its own lines.
	const kept = 37
	f1, f2 := uuid.NewString(), uuid.NewString()
	foreign := []string{
		fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":%q,"sessionId":%q,"message":{"role":"user","content":"the tool's turn"}}`, f1, ids[kept-1], sid),
		fmt.Sprintf(`{"type":"assistant","uuid":%q,"parentUuid":%q,"sessionId":%q,"message":{"role":"assistant","content":"the tool's answer"}}`, f2, f1, sid),
	}
	saved := strings.Join(append(append([]string(nil), acked[:kept]...), foreign...), "\n") + "\n"
	if err := os.WriteFile(path, []byte(saved), 0o600); err != nil { // open("w"): truncate, write
		t.Fatal(err)
	}
	if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("sessiond exited %d", code)
	}
	d.start()

	out, errOut, code := d.ctl("", "check", sid)
	if code != 1 || !strings.Contains(out, "acknowledged_missing") {
		t.Fatalf("check after the truncating save: exit %d, want 1 with acknowledged_missing\n%s%s", code, out, errOut)
	}
	for _, id := range ids[kept:] {
		if !strings.Contains(out, id) {
			t.Fatalf("check does not name the missing entry %s:\n%s", id, out)
		}
	}
	for _, id := range ids[:kept] {
		if strings.Contains(out, id) && !strings.Contains(out, "dangling") {
			t.Fatalf("check names %s, which the file holds:\n%s", id, out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("%d entries", n-kept)) {
		t.Fatalf("check does not say how many are missing (%d):\n%s", n-kept, out)
	}
	st, _, _ := d.ctl("", "status")
	if !strings.Contains(st, "ENTRIES MISSING") || !strings.Contains(st, path) || !strings.Contains(st, fmt.Sprintf("%d entries", n-kept)) {
		t.Fatalf("status does not list the transcript:\n%s", st)
	}
	var js struct {
		JournalRetention struct {
			RetainedSegments int `json:"retained_segments"`
		} `json:"journal_retention"`
	}
	if out, _, _ := d.ctl("", "status", "--json"); json.Unmarshal([]byte(out), &js) != nil || js.JournalRetention.RetainedSegments == 0 {
		t.Fatalf("status --json shows no retained segment (the repair below would read only live ones):\n%s", out)
	}

	out, errOut, code = d.ctl("", "repair", sid)
	if code != 0 || !strings.Contains(out, "restore_acknowledged") {
		t.Fatalf("repair: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := d.ctl("", "check", sid); code != 0 {
		t.Fatalf("check after repair: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines(b) {
		got = append(got, string(l))
	}
	want := append(append([]string(nil), acked...), foreign...)
	if !slices.Equal(got, want) {
		t.Fatalf("after repair the transcript has %d lines, want the %d acknowledged once each in order, then the tool's 2:\n%s", len(got), n, b)
	}
	if st, _, _ := d.ctl("", "status"); strings.Contains(st, "ENTRIES MISSING") {
		t.Fatalf("status still lists missing entries after repair:\n%s", st)
	}
	// The repaired file's original (the tool's save) is kept.
	if !bytes.Contains([]byte(out), []byte("original is kept at")) {
		t.Fatalf("repair does not say where the original is kept:\n%s", out)
	}
	d.stop(syscall.SIGTERM, 30*time.Second)
}
