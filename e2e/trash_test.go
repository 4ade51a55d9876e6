package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/layout"
)

// TestSessionctlTrashRestoreAll: through the real daemon and sessionctl,
// an agent keeps appending while its session is
// deleted twice, so the trash holds two copies and the session exists
// again. sessionctl trash lists both copies (with their entries), status
// shows the trash, and restore --all merges them into the live session:
// every acknowledged entry once, in the order the agent wrote them, the
// parentUuid chain whole again (check finds it broken before).
func TestSessionctlTrashRestoreAll(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--trash-retention", "720h")
	d.start()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	sid := uuid.NewString()
	var want []string
	parent := ""
	batch := func(n int, tag string) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			id := uuid.NewString()
			p := "null"
			if parent != "" {
				p = `"` + parent + `"`
			}
			l := fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":%s,"sessionId":%q,"cwd":%q,"message":{"role":"user","content":"%s %d"}}`, id, p, sid, cwd, tag, i)
			want = append(want, l)
			b.WriteString(l + "\n")
			parent = id
		}
		return b.String()
	}
	run := d.ctlOK
	appendBatch := func(body string) {
		t.Helper()
		if _, errOut, code := d.ctl(body, "append", "--cwd", cwd, "--session", sid); code != 0 {
			t.Fatalf("append: %s", errOut)
		}
	}
	appendBatch(batch(5, "before the first delete"))
	run("moved", "delete", sid)
	appendBatch(batch(4, "between the deletes"))
	run("moved", "delete", sid)
	appendBatch(batch(3, "after the second delete"))
	run("the trash is empty", "trash", "--project", "-no-such-project")
	out := run("(2 copies, 9 entries", "trash", sid)
	if strings.Count(out, sid) != 2 || !strings.Contains(out, pk) {
		t.Fatalf("trash lists:\n%s\nwant both copies of %s in %s", out, sid, pk)
	}
	out = run("", "--json", "trash", "--cwd", cwd)
	// One JSON object per line, each a page of the listing.
	type trashed struct {
		SessionID string `json:"session_id"`
		Entries   uint64
		Bytes     uint64
		DeletedMs int64 `json:"deleted_ms"`
	}
	var listed struct{ Copies []trashed }
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var page struct{ Copies []trashed }
		if err := json.Unmarshal([]byte(l), &page); err != nil {
			t.Fatalf("trash --json: %v\n%s", err, out)
		}
		listed.Copies = append(listed.Copies, page.Copies...)
	}
	if c := listed.Copies; len(c) != 2 || c[0].Entries != 5 || c[1].Entries != 4 || c[0].Bytes == 0 || c[0].DeletedMs > c[1].DeletedMs {
		t.Fatalf("trash --json: %+v, want the copy of 5 entries, then the one of 4", c)
	}
	run("2 deleted copies", "status")
	run("each kept 30 days", "status")
	// The agent's chain starts in the trash: broken until the restore.
	if out, _, code := d.ctl("", "check", sid); code != 1 {
		t.Fatalf("check before the restore: exit %d\n%s; want the broken chain reported", code, out)
	}
	run("2 trashed copies merged into the session, which exists again: 9 entries back, 0 duplicates", "restore", sid, "--all")
	b, err := os.ReadFile(d.transcript(pk, sid))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(string(b), "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("after restore --all the transcript holds\n%s\nwant every acknowledged entry once, in order:\n%s", got, strings.Join(want, "\n"))
	}
	run("clean", "check", sid)
	run("no deleted copy of "+sid, "trash", sid)
	run("0 deleted copies", "status")
	// The session goes on.
	appendBatch(batch(1, "after the restore"))
	run("13", "info", sid)
}

// TestTrashPurgedAtStart: sessiond purges the copies past --trash-retention
// when it starts (then hourly), and keeps the others.
func TestTrashPurgedAtStart(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--trash-retention", "24h")
	old, young := uuid.NewString(), uuid.NewString()
	for sid, stamp := range map[string]string{old: "20200101T000000.000000000Z", young: time.Now().UTC().Format("20060102T150405.000000000Z")} {
		dir := filepath.Join(d.state, "trash", "-p", sid+"-"+stamp)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sid+".jsonl"), []byte(`{"type":"user","uuid":"`+uuid.NewString()+`"}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, code := d.ctl("", "trash")
		if code == 0 && !strings.Contains(out, old) {
			if !strings.Contains(out, young) {
				t.Fatalf("the copy within the retention went too:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy deleted in 2020 is still in the trash:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.ctlOK("1 deleted copy", "status")
	d.ctlOK("each kept 1 day", "status")
}
