package writer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/trash"
)

// An agent may keep appending after its session was deleted: each append
// after a delete recreates the session, so the trash holds several copies
// while the session exists again. Restore must reach them all (refusing, as
// the session exists, or knowing only the newest copy would leave
// acknowledged entries in the trash out of the API's reach): the trash
// lists every copy, and restore --all merges them all into the live
// session, oldest first, every entry once, the agent's chain whole.
func TestRestoreAllMergesEveryCopy(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	e.cfg.Clock = clk
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	sub := k
	sub.Subpath = "subagents/agent-a1"
	// A chain: each entry names the one before as its parent.
	var want []string
	parent := ""
	next := func(text string) string {
		id := uuid.NewString()
		l := string(entry(id, "parentUuid", parent, "text", text))
		parent = id
		want = append(want, l)
		return l
	}
	title := `{"type":"custom-title","customTitle":"t","sessionId":"` + k.SessionID + `"}`
	mustAppendTo(t, m, k, next("a1"), next("a2"), title)
	want = append(want[:2], title)
	mustAppendTo(t, m, sub, string(entry(uuid.NewString(), "text", "sub1")))
	for round, texts := range [][]string{{"b1", "b2"}, {"c1"}} {
		clk.Advance(time.Minute)
		if _, err := m.Trash().Delete(bg, k, false); err != nil {
			t.Fatalf("delete %d: %v", round+1, err)
		}
		// The agent goes on; its SDK resends the title (no uuid) and the
		// last entry it sent before the delete (same uuid): both are in
		// the trash already.
		lines := []string{title, want[len(want)-1]}
		for _, x := range texts {
			lines = append(lines, next(x))
		}
		mustAppendTo(t, m, k, lines...)
	}
	copies, err := m.Trash().List(bg, "", k.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 2 {
		t.Fatalf("trash lists %d copies, want 2: %+v", len(copies), copies)
	}
	for i, c := range copies {
		// The first with the subagent's entry, the second with the two
		// lines resent (the file was new then).
		wantEntries := []uint64{3 + 1, 2 + 2}[i]
		if c.Key.ProjectKey != project || c.Key.Subpath != "" || c.Entries != wantEntries || c.Bytes <= 0 ||
			!c.DeletedAt.Equal(time.Date(2026, 3, 1, 10, i+1, 0, 0, time.UTC)) {
			t.Fatalf("copy %d: %+v, want %d entries deleted at 10:0%d", i, c, wantEntries, i+1)
		}
	}
	if u := m.Trash().Usage(); u.Copies != 2 || u.Bytes != copies[0].Bytes+copies[1].Bytes {
		t.Fatalf("trash usage %+v, want 2 copies of %d bytes", u, copies[0].Bytes+copies[1].Bytes)
	}
	out, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{All: true})
	if err != nil {
		t.Fatalf("restore --all into the session that exists again: %v", err)
	}
	// Back: 3 + 1 of the first copy, 2 of the second; the resent title
	// and entry are dropped from the second copy and from the live file.
	if out.Copies != 2 || !out.Merged || out.Entries != 6 || out.Duplicates != 4 {
		t.Fatalf("restore --all: %+v, want 2 copies merged, 6 entries back, 4 duplicates", out)
	}
	if got := e.canonicalLines(k); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after restore --all the session holds\n%s\nwant every entry once, in order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := e.canonicalLines(sub); len(got) != 1 {
		t.Fatalf("the subagent transcript after restore --all: %q", got)
	}
	if copies, err := m.Trash().List(bg, project, ""); err != nil || len(copies) != 0 {
		t.Fatalf("trash after restore --all: %+v, %v; want it empty", copies, err)
	}
	if u := m.Trash().Usage(); u.Copies != 0 || u.Bytes != 0 {
		t.Fatalf("trash usage after restore --all: %+v", u)
	}
	// The session takes appends again, after the merged entries.
	last := next("d1")
	mustAppendTo(t, m, k, last)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if got := e.canonicalLines(k); got[len(got)-1] != last || len(got) != len(want) {
		t.Fatalf("append after the restore: %d lines, last %q", len(got), got[len(got)-1])
	}
	if err := m.Trash().Restore(bg, k); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore with an empty trash: %v, want not found", err)
	}
}

// restore without --all brings back only the newest copy, merged into the
// session that exists again; the older copy stays in the trash.
func TestRestoreMergesNewestCopy(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	a, b, c := string(entry(uuid.NewString(), "n", "a")), string(entry(uuid.NewString(), "n", "b")), string(entry(uuid.NewString(), "n", "c"))
	mustAppendTo(t, m, k, a)
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, k, b)
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, k, c) // stays in the journal: the restore compacts it first
	out, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Copies != 1 || !out.Merged || out.Entries != 1 {
		t.Fatalf("restore: %+v", out)
	}
	if got := e.canonicalLines(k); len(got) != 2 || got[0] != b || got[1] != c {
		t.Fatalf("after restore: %q, want b then c", got)
	}
	copies, err := m.Trash().List(bg, project, k.SessionID)
	if err != nil || len(copies) != 1 || copies[0].Entries != 1 {
		t.Fatalf("trash after restoring the newest copy: %+v %v; want the older one left", copies, err)
	}
}

// A restore cut short by a failing disk is finished by the next restore
// of the session, even one asking for more (--all): the interrupted
// restore's copy first, then the older ones, each entry once, in order.
func TestRestoreFinishedByRetryWithAll(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	k := kMerge
	a, b, x := line(k, "00000000-0000-4000-8000-0000000000a1", "a"), line(k, "00000000-0000-4000-8000-0000000000b1", "b"), line(k, "00000000-0000-4000-8000-0000000000c1", "c")
	for _, l := range []string{a, b} {
		mustAppendTo(t, m, k, l)
		if _, err := m.Trash().Delete(bg, k, false); err != nil {
			t.Fatal(err)
		}
	}
	mustAppendTo(t, m, k, x)
	if _, err := m.Flush(bg, k); err != nil { // the only compaction left is the merge's
		t.Fatal(err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRename, Path: func(p string) bool { return strings.Contains(p, ".compact-") && strings.Contains(p, "/projects/") }, Err: syscall.EIO})
	if _, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{}); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("restore with a failing rename: %v, want an i/o error", err)
	}
	if len(ff.Fired()) == 0 {
		t.Fatal("the fault never fired: the merge renamed nothing")
	}
	if _, err := m.Append(bg, k, [][]byte{[]byte(line(k, "", "meanwhile"))}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("append to a session half restored: %v, want unavailable", err)
	}
	ff.Clear()
	out, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{All: true})
	if err != nil || out.Copies != 1 || !out.Merged {
		t.Fatalf("retried restore --all: %+v, %v; want the older copy merged after the interrupted restore", out, err)
	}
	got, _ := c.ReadFile(crashLayout.TranscriptPath(k))
	if string(got) != a+"\n"+b+"\n"+x+"\n" {
		t.Fatalf("after the retried restore:\n%s\nwant a, b, c", got)
	}
	if p := mergePlaces(c, k); len(p) != 1 {
		t.Fatalf("copies left in the trash: %v", p)
	}
	// Once more with a single copy: the retried --all finds none left,
	// and says the restore is done (not "nothing in the trash").
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	y := line(k, "00000000-0000-4000-8000-0000000000d1", "d")
	mustAppendTo(t, m, k, y)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRename, Path: func(p string) bool { return strings.Contains(p, ".compact-") && strings.Contains(p, "/projects/") }, Err: syscall.EIO})
	if _, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{}); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("restore with a failing rename: %v, want an i/o error", err)
	}
	ff.Clear()
	if out, err := m.Trash().RestoreCopies(bg, k, trash.RestoreOptions{All: true}); err != nil || out.Copies != 1 {
		t.Fatalf("retried restore --all of the only copy: %+v, %v", out, err)
	}
	if got, _ := c.ReadFile(crashLayout.TranscriptPath(k)); string(got) != a+"\n"+b+"\n"+x+"\n"+y+"\n" {
		t.Fatalf("after the second retried restore:\n%s", got)
	}
}

// The trash keeps a copy for the retention, then purges it: at start and
// then every hour (RunTrashPurge), on the injected clock.
func TestTrashPurgedAfterRetention(t *testing.T) {
	e := newEnv(t)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	e.cfg.Clock = clk
	m := e.manager()
	defer closeManager(t, m)
	if got := m.Config().TrashRetention; got != 30*24*time.Hour {
		t.Fatalf("default retention %v, want 30 days", got)
	}
	old, young := newKey(), newKey()
	mustAppendTo(t, m, old, string(entry(uuid.NewString())))
	mustAppendTo(t, m, young, string(entry(uuid.NewString())))
	if _, err := m.Trash().Delete(bg, old, false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * 24 * time.Hour)
	if _, err := m.Trash().Delete(bg, young, false); err != nil {
		t.Fatal(err)
	}
	// What a purge killed midway left behind goes too.
	leftover := filepath.Join(e.lay.StateDir, "trash", project, ".purge-x", "y") // the name a purge gives a copy as it starts
	if err := os.MkdirAll(leftover, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	stopped := make(chan struct{})
	go func() { defer close(stopped); m.Trash().RunPurge(ctx) }()
	defer func() { cancel(); <-stopped }()
	// The first pass runs at once, then one every hour.
	waitTrash := func(copies int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := m.Trash().List(bg, "", "")
			if err == nil && len(got) == copies {
				if _, err := os.Stat(filepath.Dir(leftover)); !os.IsNotExist(err) {
					t.Fatalf("the leftover of an interrupted purge is still there: %v", err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("trash holds %d copies (%v), want %d", len(got), err, copies)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitArmed := func() {
		t.Helper()
		wctx, wcancel := context.WithTimeout(bg, 10*time.Second)
		defer wcancel()
		if err := clk.WaitArmed(wctx, 1); err != nil {
			t.Fatal("the purge loop armed no timer")
		}
	}
	waitArmed()
	waitTrash(2)
	// 30 days after the first delete, less a second: both stay.
	clk.Advance(20*24*time.Hour - time.Second)
	waitArmed()
	waitTrash(2)
	// Past it: the next hourly pass takes the old copy only.
	clk.Advance(time.Hour)
	waitArmed()
	waitTrash(1)
	got, _ := m.Trash().List(bg, "", "")
	if got[0].Key.SessionID != young.SessionID {
		t.Fatalf("the purge took the young copy: %+v", got)
	}
	if u := m.Trash().Usage(); u.Copies != 1 || u.Retention != 30*24*time.Hour {
		t.Fatalf("trash usage after the purge: %+v", u)
	}
	if err := m.Trash().Restore(bg, old); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore of a purged copy: %v, want not found", err)
	}
}

// A rewrite (compaction, repair, restore) keeps a transcript's mode and
// owner (the owner only where the daemon may: as root): a root daemon must
// not turn a nobody 0644 file into a root 0600 one.
func TestRewriteKeepsModeAndOwner(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	p := e.lay.TranscriptPath(k)
	root := os.Geteuid() == 0
	const nobody = 65534
	give := func() {
		t.Helper()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		if root {
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(after string) {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("after %s the transcript is %v, want -rw-r--r--", after, fi.Mode().Perm())
		}
		if st := fi.Sys().(*syscall.Stat_t); root && (st.Uid != nobody || st.Gid != nobody) {
			t.Fatalf("after %s the transcript belongs to %d:%d, want %d:%d", after, st.Uid, st.Gid, nobody, nobody)
		}
	}
	mustAppendTo(t, m, k, string(entry(uuid.NewString())))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	give()
	mustAppendTo(t, m, k, string(entry(uuid.NewString())))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	check("compaction")
	// Damage for repair to mend: a line another program tore.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"user","uu`)
	f.Close()
	if o, err := m.Repairs().Repair(bg, k, false); err != nil || !o.Result.Changed {
		t.Fatalf("repair: %+v %v", o, err)
	}
	check("repair")
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, k, string(entry(uuid.NewString())))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	give()
	if err := m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	check("restore")
	if n := len(e.canonicalLines(k)); n != 3 {
		t.Fatalf("after the restore: %d lines, want the two kept by repair and the new one", n)
	}
}

// A restore that would have to drop a trashed folder or transcript (a
// file where the copy has a folder, a link where the transcript goes)
// refuses, touching nothing, instead of dropping it with the trash.
func TestRestoreRefusesWhatItCannotMerge(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	sub := k
	sub.Subpath = "subagents/agent-a1"
	mustAppendTo(t, m, k, string(entry(uuid.NewString())))
	mustAppendTo(t, m, sub, string(entry(uuid.NewString())))
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	dir := e.lay.SessionDir(k)
	if err := os.WriteFile(dir, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Trash().Restore(bg, k); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("restore over a file where the session folder goes: %v, want already exists naming %s", err, dir)
	}
	os.Remove(dir)
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere.jsonl"), e.lay.TranscriptPath(k)); err != nil {
		t.Fatal(err)
	}
	if err := m.Trash().Restore(bg, k); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("restore over a link where the transcript goes: %v, want already exists", err)
	}
	os.Remove(e.lay.TranscriptPath(k))
	if copies, err := m.Trash().List(bg, project, k.SessionID); err != nil || len(copies) != 1 || copies[0].Entries != 2 {
		t.Fatalf("the trash after the refusals: %+v, %v; want the copy whole", copies, err)
	}
	if err := m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	if n := len(e.canonicalLines(sub)); n != 1 {
		t.Fatalf("the subagent after the restore: %d lines", n)
	}
}
