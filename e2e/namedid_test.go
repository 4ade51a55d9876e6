package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// TestNamedSessionIDs: a session id that is not a UUID but a safe name, as
// the SDKs' conformance kits use ("sess", "s1", "main"), is stored and
// served like any other: its transcript is <project>/<id>.jsonl, a second
// project keeps a session of the same id apart, entries whose uuid is not
// a UUID ("a") are deduplicated as UUIDs are, sessionctl resolves the whole
// id, lists it with a note that Claude Code will not, and deletes and
// restores it.
func TestNamedSessionIDs(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "1h")
	d.start()
	c := d.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sess := client.Session{ProjectKey: "proj", ID: "sess"}
	other := client.Session{ProjectKey: "other-proj", ID: "sess"}
	sub := client.Session{ProjectKey: "proj", ID: "sess", Subpath: "subagents/agent-1"}
	if _, err := c.Append(ctx, sess, []byte(`{"type":"x","uuid":"b","n":1}`), []byte(`{"type":"x","uuid":"a","n":2}`)); err != nil {
		t.Fatal(err)
	}
	// "a" again: already stored, so not stored twice.
	if _, err := c.Append(ctx, sess, []byte(`{"type":"x","uuid":"a","n":2}`), []byte(`{"type":"x","uuid":"c","n":3}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, other, []byte(`{"type":"x","from":"other"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, sub, []byte(`{"type":"x","uuid":"s","n":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []client.Session{sess, sub} {
		if _, err := c.Flush(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(d.transcript("proj", "sess"))
	if err != nil {
		t.Fatalf("no transcript proj/sess.jsonl: %v", err)
	}
	if got, want := string(data), `{"type":"x","uuid":"b","n":1}`+"\n"+`{"type":"x","uuid":"a","n":2}`+"\n"+`{"type":"x","uuid":"c","n":3}`+"\n"; got != want {
		t.Errorf("proj/sess.jsonl holds\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(d.root, "projects", "proj", "sess", "subagents", "agent-1.jsonl")); err != nil {
		t.Errorf("the subagent transcript is not in the session folder: %v", err)
	}
	n := 0
	if err := c.Read(ctx, other, client.ReadOptions{}, func(*sessiondv1.Entry) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("other-proj/sess: %d entries, %v; want its own 1", n, err)
	}
	subs, err := c.Subkeys(ctx, sess)
	if err != nil || len(subs) != 1 || subs[0] != "subagents/agent-1" {
		t.Errorf("subkeys of proj/sess = %v, %v", subs, err)
	}
	infos, err := c.List(ctx, "", "proj")
	if err != nil || len(infos) != 1 || infos[0].GetSession().GetSessionId() != "sess" {
		t.Errorf("list proj = %v, %v; want sess alone", infos, err)
	}

	// sessionctl: the whole id, not taken for a prefix; the list's note.
	out := d.ctlOK("", "show", "sess", "--project", "proj")
	if strings.Count(out, "\n") != 3 {
		t.Errorf("sessionctl show sess: %q", out)
	}
	out = d.ctlOK("", "list", "--project", "proj")
	if !strings.Contains(out, "sess") || !strings.Contains(out, "not a UUID*") || !strings.Contains(out, "Claude Code and the SDKs' disk readers") {
		t.Errorf("sessionctl list does not say Claude Code will not list sess:\n%s", out)
	}

	// Delete and restore.
	if _, err := c.Delete(ctx, sess, false); err != nil {
		t.Fatalf("delete proj/sess: %v", err)
	}
	if _, err := os.Stat(d.transcript("proj", "sess")); !os.IsNotExist(err) {
		t.Fatalf("proj/sess.jsonl is still there after the delete (%v)", err)
	}
	if _, err := c.Restore(ctx, sess); err != nil {
		t.Fatalf("restore proj/sess: %v", err)
	}
	if data, err := os.ReadFile(d.transcript("proj", "sess")); err != nil || strings.Count(string(data), "\n") != 3 {
		t.Errorf("after the restore proj/sess.jsonl holds %q, %v", data, err)
	}
}
