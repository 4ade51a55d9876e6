package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
)

// TestLogLossIsLoud: entries acknowledged and only in the journal,
// then sessiond killed and its last segment cut to half by someone else.
// sessiond refuses to start over the loss, changing nothing, and says how
// to go on; with --accept-journal-loss it starts, the log says so at error
// level, status shows it, and check --all exits 1 with the count.
func TestLogLossIsLoud(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "1h", "--idle-retire", "1h")
	d.start()
	c := d.client()
	s := client.Session{Cwd: t.TempDir(), ID: uuid.NewString()}
	for i := 0; i < 200; i++ {
		e := fmt.Sprintf(`{"type":"user","uuid":"%s","k":"%d","pad":"%s"}`, uuid.NewString(), i, strings.Repeat("p", 500))
		if _, err := c.Append(context.Background(), s, []byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	d.stop(syscall.SIGKILL, 10*time.Second)
	segs, _ := filepath.Glob(filepath.Join(d.state, "journal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	// The first segment holds the entries (about 110 KiB of them, in
	// space reserved ahead): cut it inside them.
	last := segs[0]
	const cut = 40 << 10
	if err := os.Truncate(last, cut); err != nil {
		t.Fatal(err)
	}

	d.startRefused("lost acknowledged records", "acknowledged entries lost", "--accept-journal-loss")
	if fileSize(t, last) != cut {
		t.Fatal("the refused start changed the cut segment")
	}

	d.args = append(d.args, "--accept-journal-loss")
	d.start()
	if !strings.Contains(d.Log(), `"level":"error"`) || !strings.Contains(d.Log(), "lost acknowledged entries") {
		t.Errorf("the log does not report the loss at error level:\n%s", d.LogTail(50))
	}
	out := d.ctlOK("RECOVERY FAILED", "status")
	if !strings.Contains(out, "acknowledged entries lost") {
		t.Errorf("status does not show the loss:\n%s", out)
	}
	out, _, code := d.ctl("", "check", "--all")
	if code != 1 || !strings.Contains(out, "recovery: ") || !strings.Contains(out, "acknowledged entries lost") {
		t.Errorf("check --all: exit %d, out:\n%s", code, out)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
