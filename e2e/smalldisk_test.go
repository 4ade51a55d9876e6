package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestSmallDiskOnDefaults: sessiond on its default sizes, with its state
// folder and root on a 64 MiB volume. The log must not reserve the last
// of the disk (the sizes follow the disk: a 4 MiB ballast, 4 MiB
// segments), appends fill it until refused with the disk-full message,
// and after a kill -9 sessiond starts on the full disk and serves every
// acknowledged entry. Once space is freed, every transcript catches up
// without a restart.
func TestSmallDiskOnDefaults(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "64m")
	filler := filepath.Join(disk, "filler")
	// Not diskDaemon, which gives the large-disk sizes: the defaults here.
	d := newDaemon(t, "--idle-compact", "1h", "--idle-retire", "1h")
	d.root, d.state = filepath.Join(disk, "claude"), filepath.Join(disk, "state")
	d.start()
	c := d.client(client.WithRetry(1, 0))
	// Generous: the whole test runs under it, on a machine that may be busy.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetDisk().GetBallastBytes(); got != 4<<20 {
		t.Errorf("the ballast on a 64 MiB disk is %d bytes, want a sixteenth of it (4 MiB)", got)
	}
	if free := freeBytes(t, disk); free < 48<<20 {
		t.Errorf("right after the start only %d bytes of the 64 MiB disk are free: the log reserved too much", free)
	}
	// Another program takes a third of the disk, as it would on a shared
	// volume; sessiond's appends fill the rest.
	writeFiller(t, filler, 20<<20)

	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	// Eight sessions, so each transcript stays far under the room freed
	// at the end: a compaction writes a whole new copy of its transcript.
	sessions := make([]client.Session, 8)
	for i := range sessions {
		sessions[i] = client.Session{Cwd: cwd, ID: uuid.NewString()}
	}
	l := newDiskLedger()
	refused := 0
	for i := 0; refused < 5 && i < 20000; i++ {
		k := fmt.Sprintf("s%d", i)
		if err := l.append(c, sessions[i%len(sessions)], []string{k}, [][]byte{diskEntry(k, i%3 != 0, 8<<10)}); err != nil {
			checkDiskFullError(t, "an append on the full disk", err)
			refused++
		}
	}
	if refused < 5 {
		t.Fatalf("the disk never filled: %d acknowledged", len(l.acked))
	}
	t.Logf("acknowledged %d entries before the disk was full", len(l.acked))
	c.Close()
	d.stop(syscall.SIGKILL, 10*time.Second)

	d.start() // fails the test if sessiond does not start on the full disk
	d.waitReplayed()
	pid := d.Pid()
	c = d.client(client.WithRetry(1, 0))
	defer c.Close()
	for _, s := range sessions {
		seen := l.counts(t, "read through sessiond after a start on the full disk", readViaDaemon(t, c, s))
		l.checkExactlyOnce(t, "read through sessiond after a start on the full disk", s.ID, seen)
	}
	if st, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	} else if len(st.GetRecoveryErrors()) > 0 {
		t.Errorf("a full disk was reported as failed recovery: %q", st.GetRecoveryErrors())
	}

	// Space comes back: every transcript catches up without a restart,
	// with each acknowledged entry exactly once.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetDisk().GetLagSessions() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after space was freed, %d sessions still lag (%d deferred compactions)",
				st.GetDisk().GetLagSessions(), len(st.GetDisk().GetDeferred()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.requireSameProcess(t, pid)
	total := 0
	for _, s := range sessions {
		data, err := os.ReadFile(d.transcript(pk, s.ID))
		if err != nil {
			t.Fatal(err)
		}
		seen := l.counts(t, "canonical file after the catch-up", data)
		l.checkExactlyOnce(t, "canonical file after the catch-up", s.ID, seen)
		total += len(seen)
	}
	if total != len(l.acked) {
		t.Errorf("the transcripts hold %d entries, want the %d acknowledged", total, len(l.acked))
	}
}
