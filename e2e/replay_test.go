package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// TestReplayAfterKillServesAndSurvivesSIGTERM: after a kill -9, sessiond
// serves the journaled entries at once (reads and listings see them while
// the replay into the files runs); a SIGTERM in the middle of that replay
// exits cleanly; the next start finishes it, and every file then holds
// every acknowledged entry exactly once.
func TestReplayAfterKillServesAndSurvivesSIGTERM(t *testing.T) {
	t.Parallel()
	// No compaction before the kill: everything is in the journals.
	d := newDaemon(t, "--idle-compact", "1h", "--idle-retire", "1h", "--min-compact-bytes", "1099511627776")
	d.start()
	c := d.client()
	ctx := context.Background()
	const project = "-e2e-replay"
	const sessions = 40
	want := map[string][]string{}
	for i := 0; i < sessions; i++ {
		sid := uuid.NewString()
		var batch [][]byte
		for n := 0; n < 30; n++ {
			line := fmt.Sprintf(`{"type":"user","uuid":%q,"sessionId":%q,"message":{"role":"user","content":"%s"}}`,
				uuid.NewString(), sid, strings.Repeat("r", 2000+n))
			batch = append(batch, []byte(line))
			want[sid] = append(want[sid], line)
		}
		if _, err := c.Append(ctx, client.Session{ProjectKey: project, ID: sid}, batch...); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	d.stop(syscall.SIGKILL, 10*time.Second)

	// Restart and, as soon as it serves, read every session through it and
	// stop it with SIGTERM while the replay may still run.
	d.start()
	c = d.client()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetReplayPending() + st.GetRecoveredSessions(); got != sessions {
		t.Fatalf("status: %d pending + %d replayed, want %d journaled sessions", st.GetReplayPending(), st.GetRecoveredSessions(), sessions)
	}
	for sid, lines := range want {
		var got [][]byte
		err := c.Read(ctx, client.Session{ProjectKey: project, ID: sid}, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
			got = append(got, e.GetData())
			return nil
		})
		if err != nil || len(got) != len(lines) {
			t.Fatalf("read %s while replaying: %d entries (%v), want %d", sid, len(got), err, len(lines))
		}
		for i := range got {
			if string(got[i]) != lines[i] {
				t.Fatalf("read %s while replaying: entry %d differs", sid, i)
			}
		}
	}
	c.Close()
	if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM during the replay: exit %d\n%s", code, d.LogTail(logTail))
	}

	// The next start replays what is left; then the files are whole.
	d.start()
	c = d.client()
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetReplayPending() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d sessions to replay", st.GetReplayPending())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, _, code := d.ctl("", "status")
	if code != 0 || strings.Contains(out, "replaying") || strings.Contains(out, "RECOVERY FAILED") {
		t.Fatalf("sessionctl status after the replay (exit %d):\n%s", code, out)
	}
	for sid, lines := range want {
		b, err := os.ReadFile(d.transcript(project, sid))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); got != strings.Join(lines, "\n")+"\n" {
			t.Fatalf("%s: the file holds %d lines, want the %d acknowledged ones exactly once", sid, strings.Count(got, "\n"), len(lines))
		}
	}
}
