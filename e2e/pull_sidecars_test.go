package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
)

// waitSidecarRows waits until PostgreSQL holds want as s's sidecars.
func waitSidecarRows(t *testing.T, dsn string, s client.Session, want map[string]string) {
	t.Helper()
	mirrortest.WaitSidecars(t, dsn, mirror.DefaultTable, layout.Key{ProjectKey: s.ProjectKey, SessionID: s.ID}, want, "sidecars of "+s.ID)
}

// listLine is the line of a sessionctl list output naming sid, "" for none.
func listLine(out, sid string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, sid) {
			return l
		}
	}
	return ""
}

// TestMirrorPullSidecars: the session sidecars travel with the session.
// A archives one session; another gets a custom-title.json written into
// its folder by hand while A is down (as the official tools write it),
// which A's scan at start mirrors. B's fleet listing marks the first
// archived and --exclude-archived leaves it out; B pulls both and has
// both files byte for byte, and its local listing leaves the archived
// one out too and shows the other's title. A mark on B that differs from
// PostgreSQL's (the session identical) is replaced when PostgreSQL's is
// newer and kept when it is older.
func TestMirrorPullSidecars(t *testing.T) {
	t.Parallel()
	_, dsn := startPostgres(t)
	a := mirrorDaemon(t, dsn, "--machine-id", "A", "--idle-retire", "2s")
	a.start()
	waitMirrored(t, a, 60*time.Second) // connected: the tables exist
	ca := a.client()
	defer ca.Close()
	ctx := context.Background()
	archived, titled := mirrorSession(""), mirrorSession("")
	for _, s := range []client.Session{archived, titled} {
		if _, err := ca.Append(ctx, s, mirrorEntry(1), mirrorEntry(2)); err != nil {
			t.Fatal(err)
		}
	}
	a.ctlOK("archived", "archive", "--project", mirrorProject, archived.ID)
	markPath := filepath.Join(a.root, "projects", mirrorProject, archived.ID, "archived.json")
	mark := string(readFile(t, markPath))
	waitSidecarRows(t, dsn, archived, map[string]string{"archived.json": mark})
	waitMirrored(t, a, 60*time.Second)

	// While A is down, the title file is written by hand.
	ca.Close()
	a.stop(syscall.SIGTERM, 30*time.Second)
	title := `{"customTitle":"Named by the CLI"}`
	titleDir := filepath.Join(a.root, "projects", mirrorProject, titled.ID)
	if err := os.MkdirAll(titleDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(titleDir, "custom-title.json"), []byte(title), 0o600); err != nil {
		t.Fatal(err)
	}
	a.start()
	waitSidecarRows(t, dsn, titled, map[string]string{"custom-title.json": title})

	b := mirrorDaemon(t, dsn, "--machine-id", "B")
	b.start()
	fleet := b.ctlOK(archived.ID, "list", "--fleet", "--project", mirrorProject)
	if l := listLine(fleet, archived.ID); !strings.Contains(l, "[archived]") {
		t.Errorf("B's fleet listing does not mark the archived session:\n%s", fleet)
	}
	if l := listLine(fleet, titled.ID); !strings.Contains(l, "Named by the CLI") || strings.Contains(l, "archived") {
		t.Errorf("B's fleet listing of the titled session: %q\n%s", l, fleet)
	}
	fleet = b.ctlOK(titled.ID, "list", "--fleet", "--project", mirrorProject, "--exclude-archived")
	if strings.Contains(fleet, archived.ID) {
		t.Errorf("B's fleet listing with --exclude-archived lists the archived session:\n%s", fleet)
	}

	out := b.ctlOK("archived.json: pulled", "pull", "--project", mirrorProject, archived.ID)
	if got := string(readFile(t, filepath.Join(b.root, "projects", mirrorProject, archived.ID, "archived.json"))); got != mark {
		t.Errorf("B's archived.json %q, want A's %q (pull said:\n%s)", got, mark, out)
	}
	b.ctlOK("custom-title.json: pulled", "pull", "--project", mirrorProject, titled.ID)
	if got := string(readFile(t, filepath.Join(b.root, "projects", mirrorProject, titled.ID, "custom-title.json"))); got != title {
		t.Errorf("B's custom-title.json %q, want A's %q", got, title)
	}
	local := b.ctlOK(titled.ID, "list", "--project", mirrorProject, "--exclude-archived")
	if strings.Contains(local, archived.ID) {
		t.Errorf("B's local listing with --exclude-archived lists the archived session it pulled:\n%s", local)
	}
	if l := listLine(local, titled.ID); !strings.Contains(l, "Named by the CLI") {
		t.Errorf("B's local listing of the pulled title: %q", l)
	}
	if l := listLine(b.ctlOK(archived.ID, "list", "--project", mirrorProject), archived.ID); !strings.Contains(l, "[archived]") {
		t.Errorf("B's local listing does not mark the pulled session archived: %q", l)
	}
	// Pulled again: nothing to write.
	b.ctlOK("archived.json: identical", "pull", "--project", mirrorProject, archived.ID)
	// The session identical here, a mark here that differs: PostgreSQL's
	// replaces it when it is newer, and is left alone when it is older.
	bMark := filepath.Join(b.root, "projects", mirrorProject, archived.ID, "archived.json")
	other := `{"archived":false,"at":"2000-01-01T00:00:00.000Z"}`
	for _, c := range []struct {
		mtime  time.Time
		action string
		want   string
	}{
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), "archived.json: replaced", mark},
		{time.Now().Add(time.Hour), "archived.json: kept", other},
	} {
		// B's mirror done first: the pull before wrote the mark here, and
		// a turn that ran after the hand edit below would push the edit
		// to PostgreSQL (lawfully: B's local change), leaving nothing for
		// the pull to decide. The mirror is not told of a hand edit.
		waitMirrored(t, b, 60*time.Second)
		if err := os.WriteFile(bMark, []byte(other), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bMark, c.mtime, c.mtime); err != nil {
			t.Fatal(err)
		}
		b.ctlOK(c.action, "pull", "--project", mirrorProject, archived.ID)
		if got := string(readFile(t, bMark)); got != c.want {
			t.Errorf("after %q: B's archived.json %q, want %q", c.action, got, c.want)
		}
	}
}
