package writer

import (
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// restoreState replaces the state folder of to with from's, as a backup
// restored with the daemon stopped does.
func restoreState(t *testing.T, from, to *fstest.CrashFS) {
	t.Helper()
	if err := fsys.RemoveAll(to, crashLayout.StateDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range from.Walk(crashLayout.StateDir) {
		if strings.HasSuffix(p, "/") {
			if err := fsys.MkdirAll(to, strings.TrimSuffix(p, "/"), 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := from.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestoredStateFolderStoresNothingTwice: the state folder is backed up
// while entries are only in the journal; sessiond then compacts them and
// takes more; the backup is restored with sessiond stopped. The restored
// log's entries are already in the transcript after the content they
// followed, so they are not appended again, those without a uuid
// included; what came after stays.
func TestRestoredStateFolderStoresNothingTwice(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(1, "")
	m := newCrashManager(t, c, nil)
	first := []string{`{"type":"user","k":"no-uuid-1"}`, `{"type":"user","uuid":"aaaaaaaa-0000-4000-8000-000000000001","k":"with-uuid"}`}
	if _, err := m.Append(bg, k, lineBytes(first...)); err != nil {
		t.Fatal(err)
	}
	abortManager(m) // killed: the entries are in the journal only
	backup := c.KillClone()

	m = newCrashManager(t, c, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(bg, k, lineBytes(`{"type":"user","k":"no-uuid-2"}`)); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m) // compacts all three into the transcript

	restoreState(t, backup, c)
	m = newCrashManager(t, c, nil)
	if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	closeManager(t, m)
	b, _ := c.ReadFile(crashLayout.TranscriptPath(k))
	want := strings.Join(append(first, `{"type":"user","k":"no-uuid-2"}`), "\n") + "\n"
	if string(b) != want {
		t.Fatalf("transcript after the restore:\n%s\nwant:\n%s", b, want)
	}
}

// TestForeignAppendAfterBaseStillReplayed: the check above must not take
// another program's lines after the base for the logged entries: when
// they differ, the logged entries follow them as before.
func TestForeignAppendAfterBaseStillReplayed(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(2, "")
	m := newCrashManager(t, c, nil)
	if _, err := m.Append(bg, k, lineBytes(`{"type":"user","k":"logged"}`)); err != nil {
		t.Fatal(err)
	}
	abortManager(m)
	if err := c.WriteFile(crashLayout.TranscriptPath(k), []byte(`{"type":"user","k":"foreign"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := recoverAndRead(t, c, k)
	if want := `{"type":"user","k":"foreign"}` + "\n" + `{"type":"user","k":"logged"}` + "\n"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
}

func lineBytes(lines ...string) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = []byte(l)
	}
	return out
}
