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
	t.Parallel()
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

// TestPullBehindTakesOverOnce: B's copy of a session is behind A's rows,
// among them a line with no uuid (a title). `sessionctl pull` on B appends
// the rest, which takes the lease over from A: the takeover's own
// catch-up and the pull must not both append the rest (a line without a
// uuid is not recognised as one already stored).
func TestPullBehindTakesOverOnce(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	a, b := twoMachines(t, dsn)
	s := mirrorSession("")
	appendN(t, a, s, 1, 2)
	waitRows(t, dsn, s, 2)
	b.ctlOK("main: pulled", "pull", "--project", s.ProjectKey, s.ID)
	waitLeasesReleased(t, b)
	ca := a.client()
	defer ca.Close()
	if _, err := ca.Rename(context.Background(), s, "Renamed on A"); err != nil {
		t.Fatal(err)
	}
	appendN(t, a, s, 3, 1)
	waitRows(t, dsn, s, 4)
	want := localEntries(t, a, s)
	waitLeasesReleased(t, a)
	b.ctlOK("main: appended (4 entries)", "pull", "--project", s.ProjectKey, s.ID)
	if got := localEntries(t, b, s); len(got) != len(want) || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("B's copy after pulling the rest: %d entries\n%s\nwant A's %d:\n%s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	waitMirrored(t, b, 60*time.Second)
	mirrortest.SameEntries(t, "rows after B's pull", refLoad(t, dsn, s), want)
}
