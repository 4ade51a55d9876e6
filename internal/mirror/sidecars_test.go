package mirror

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/mirror/mirrortest"
)

// localSidecars reads k's session's sidecar files here, by name.
func (e *env) localSidecars(k layout.Key) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, name := range []string{"archived.json", "custom-title.json"} {
		b, err := os.ReadFile(filepath.Join(e.lay.SessionDir(k), name))
		if err == nil {
			out[name] = string(b)
		} else if !os.IsNotExist(err) {
			e.t.Fatal(err)
		}
	}
	return out
}

func sidecarRows(t *testing.T, dsn string, k layout.Key) map[string]string {
	return mirrortest.Sidecars(t, dsn, DefaultTable, k)
}

func waitSidecars(t *testing.T, dsn string, k layout.Key, want map[string]string, what string) {
	t.Helper()
	mirrortest.WaitSidecars(t, dsn, DefaultTable, k, want, what)
}

// statusSaysSidecars waits until Status alone (what sessionctl status
// shows) says the mirror is caught up, then wants k's rows to be want
// already: a sidecar written but not pushed yet must not look caught up.
func (e *env) statusSaysSidecars(dsn string, k layout.Key, want map[string]string, what string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := e.mr.Status()
		if st.Connected && st.EntriesBehind == 0 && st.Unchecked == 0 && !st.Listing {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: mirror not caught up after 20s: %+v", what, st)
		}
		time.Sleep(time.Millisecond)
	}
	if got := sidecarRows(e.t, dsn, k); !reflect.DeepEqual(got, want) {
		e.t.Fatalf("%s: the status says caught up, and PostgreSQL holds %q, want %q", what, got, want)
	}
}

// TestMirrorSidecars: a session's archive mark reaches sessiond_sidecars
// byte for byte when it is set, and again when it is cleared; a title
// file written by hand while sessiond was down, and an archive mark
// removed meanwhile, are found by the scan at start; a delete takes the
// rows away and a restore brings them back. A database made by an
// earlier sessiond (no sessiond_sidecars) gets the table.
func TestMirrorSidecars(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	k := newKey("")
	e.append(k, line(1, ""))
	e.waitCaughtUp(20 * time.Second)
	if got := sidecarRows(t, dsn, k); len(got) != 0 {
		t.Fatalf("sidecar rows before any sidecar: %q", got)
	}

	if err := e.m.SetArchived(bg, k, true); err != nil {
		t.Fatal(err)
	}
	marked := e.localSidecars(k)
	if len(marked) != 1 {
		t.Fatalf("local sidecars after archiving: %q", marked)
	}
	e.statusSaysSidecars(dsn, k, marked, "archived")
	if err := e.m.SetArchived(bg, k, false); err != nil {
		t.Fatal(err)
	}
	cleared := e.localSidecars(k)
	if reflect.DeepEqual(cleared, marked) {
		t.Fatalf("unarchiving did not change the mark: %q", cleared)
	}
	e.statusSaysSidecars(dsn, k, cleared, "unarchived")

	// While sessiond is down: the official tools write a title file
	// (spacing and all), the archive mark is removed.
	e.stop()
	title := "{ \"customTitle\" : \"Named by hand\" }\n"
	if err := os.WriteFile(filepath.Join(e.lay.SessionDir(k), "custom-title.json"), []byte(title), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.lay.SessionDir(k), "archived.json")); err != nil {
		t.Fatal(err)
	}
	// And the database loses sessiond_sidecars, as one made by a
	// sessiond before it had one.
	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(bg, "DROP TABLE sessiond_sidecars"); err != nil {
		t.Fatal(err)
	}
	c.Close(bg)
	e.start()
	e.waitCaughtUp(20 * time.Second)
	waitSidecars(t, dsn, k, map[string]string{"custom-title.json": title}, "after the scan at start")

	if _, err := e.m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	waitSidecars(t, dsn, k, map[string]string{}, "after the delete")
	e.waitCaughtUp(20 * time.Second)
	if err := e.m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	waitSidecars(t, dsn, k, map[string]string{"custom-title.json": title}, "after the restore")
}

// TestMirrorSidecarFenced: archiving a session another machine holds is
// refused, as an append is. A machine whose lease was taken over (it was
// paused past its expiry) and that then archives the session writes no
// sidecar row: the fence aborts its transaction, and it is fenced. The
// holder's archive mark does reach PostgreSQL.
func TestMirrorSidecarFenced(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ttl := 30 * time.Second
	dsn, _, cb, a, b := clockedMachines(t, t0, ttl)
	k := newKey("")
	a.append(k, line(1, ""))
	// The row in PostgreSQL first: the mirror may hear of the append
	// after it returns, and a write of A's after B's takeover would fence
	// A before the archive below.
	for deadline := time.Now().Add(30 * time.Second); len(load(t, dsn, k)) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("A's row never reached PostgreSQL")
		}
	}
	a.waitCaughtUp(30 * time.Second)
	if l := leaseRow(t, dsn, k); l.Holder != "machine-A" {
		t.Fatalf("lease %+v, want A's", l)
	}
	// B may not archive it while A holds it: refused, nothing written.
	a.copyTo(b, k)
	wantLeased(t, b.m.SetArchived(bg, k, true), "machine-A", t0.Add(ttl), false)
	if got := b.localSidecars(k); len(got) != 0 {
		t.Fatalf("B's refused archive wrote %q", got)
	}
	// A is paused (its clock stands still); past the expiry B takes over.
	cb.Advance(ttl + time.Second)
	b.append(k, line(2, ""))
	b.waitCaughtUp(30 * time.Second)
	if l := leaseRow(t, dsn, k); l.Holder != "machine-B" {
		t.Fatalf("lease %+v, want B's", l)
	}
	// A wakes up and archives the session: its view says it holds the
	// lease, so only the fence stops it.
	if err := a.m.SetArchived(bg, k, true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(a.mr.Status().Fenced) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("A's mirror was not fenced: %+v", a.mr.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := sidecarRows(t, dsn, k); len(got) != 0 {
		t.Fatalf("a fenced machine wrote sidecar rows: %q", got)
	}
	// The holder's does.
	if err := b.m.SetArchived(bg, k, true); err != nil {
		t.Fatal(err)
	}
	waitSidecars(t, dsn, k, b.localSidecars(k), "B's archive mark")
}

// TestStatusCountsSidecarInFlight: while an archive mark is written here
// and not in PostgreSQL yet (the mirror's insert waits on a lock another
// connection holds), Status counts the session unchecked, so neither
// sessionctl status nor a script waiting on it takes the mirror for
// caught up; once the lock goes, it is, with the mark in PostgreSQL.
func TestStatusCountsSidecarInFlight(t *testing.T) {
	dsn := database(t)
	e := newEnv(t, dsn, nil)
	k := newKey("")
	e.append(k, line(1, ""))
	e.waitCaughtUp(20 * time.Second)

	c, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	tx, err := c.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg) //nolint:errcheck // released below; this is for a Fatal before
	if _, err := tx.Exec(bg, "LOCK TABLE sessiond_sidecars IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetArchived(bg, k, true); err != nil {
		t.Fatal(err)
	}
	marked := e.localSidecars(k)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := c.QueryRow(bg, `SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation
WHERE r.relname = 'sessiond_sidecars' AND NOT l.granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mirror never tried to write the archive mark")
		}
	}
	if st := e.mr.Status(); st.Unchecked == 0 {
		t.Errorf("the mark is not in PostgreSQL yet, and Status counts nothing unchecked: %+v", st)
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	e.statusSaysSidecars(dsn, k, marked, "after the lock")
}
