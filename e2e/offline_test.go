package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
)

// TestOfflineAppendNeverReplacesFleetRows: machine B appends to a session
// it never saw while PostgreSQL cannot be reached (appends never wait for
// PostgreSQL: it is created here). When PostgreSQL is back, B's copy
// differs from the rows A wrote: B's mirror must not replace them with it
// (the lease came from A, so B first tries to bring A's lines down, and
// that pull refuses a copy that differs), and it says what to do.
func TestOfflineAppendNeverReplacesFleetRows(t *testing.T) {
	pg, dsn := startPostgres(t)
	a := mirrorDaemon(t, dsn, "--machine-id", "A", "--idle-retire", "2s")
	a.start()
	s := mirrorSession("")
	acked := appendN(t, a, s, 1, 3)
	waitMirrored(t, a, 60*time.Second)
	waitRows(t, dsn, s, 3)
	waitLeasesReleased(t, a)

	b := mirrorDaemon(t, dsn, "--machine-id", "B")
	b.start()
	waitMirrored(t, b, 60*time.Second)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	// B never saw s and cannot ask PostgreSQL: s is created here (the
	// look for it, and the lease's, are bounded).
	offline := appendN(t, b, s, 50, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(mirrorStatus(t, b).GetLastError(), "differs from PostgreSQL's copy from line 1 on") {
		if time.Now().After(deadline) {
			t.Fatalf("B's mirror does not say its copy differs from PostgreSQL's: %v", mirrorStatus(t, b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	mirrortest.SameEntries(t, "A's rows after B's offline append", refLoad(t, dsn, s), acked)
	if got := localEntries(t, b, s); len(got) != 1 || got[0] != offline[0] {
		t.Errorf("B's own entry must stay on B: %q", got)
	}
	// And B's next append is refused, saying why, until the copies agree.
	c := b.client()
	defer c.Close()
	if _, err := c.Append(context.Background(), s, mirrorEntry(51)); err == nil || !strings.Contains(err.Error(), "differs from PostgreSQL's copy") {
		t.Errorf("B's append to a copy that differs from the fleet's: %v", err)
	}
	mirrortest.SameEntries(t, "A's rows after B's refused append", refLoad(t, dsn, s), acked)
}
