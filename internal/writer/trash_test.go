package writer

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// deleteFixture writes a session with a subagent transcript and an
// archive mark, all flushed.
func deleteFixture(t *testing.T, c *fstest.CrashFS) {
	m := newCrashManager(t, c, nil)
	mustAppendTo(t, m, kDel, line(kDel, "00000000-0000-4000-8000-000000000001", "main"))
	mustAppendTo(t, m, kDelSub, line(kDelSub, "00000000-0000-4000-8000-000000000002", "sub"))
	if err := m.SetArchived(bg, kDel, true); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
}

// killedDelete returns a delete of kDel by a process killed right after it.
func killedDelete(t *testing.T) func(c *fstest.CrashFS) {
	return func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		m.Trash().Delete(bg, kDel, false)
		abortManager(m)
	}
}

// Delete moves the main transcript and the session folder (its subagents,
// its archive mark) one after the other; a crash between the two must not
// leave the session half in the trash and half in place (Restore would
// refuse: "exists again"), so the moves are recorded in a durable intent
// first and Recover finishes them. The crash comes right after the second
// rename, before any folder sync: a killed process, then a power loss
// during the recovery's own moves would also be covered by
// TestCrashDuringRecovery.
func TestDeleteInterruptedIsFinished(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	doDelete := killedDelete(t)
	at := opIndex(t, c, doDelete, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpSyncDir && strings.Contains(ev.Path, "/trash/") // the first move's target folder
	})
	c.CrashAt(at + 1) // the main transcript is in the trash, the session folder not yet
	doDelete(c)
	for _, mode := range []string{"power loss", "kill -9"} {
		v := c.CrashClone(nil)
		if mode == "kill -9" {
			v = c.KillClone()
		}
		m := newCrashManager(t, v, nil)
		if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
			t.Fatalf("%s: Recover: %v %v", mode, err, rep.Failed)
		}
		closeManager(t, m)
		places := sessionPlaces(v)
		if len(places) != 1 || places[0].trash == "" || !places[0].main || !places[0].sub || !places[0].archived {
			t.Fatalf("%s: after recovery the session is at %v, want whole in the trash", mode, places)
		}
	}
}

// The same interruption by a failing disk: Delete reports it, the session
// refuses writers meanwhile, and a retried Delete finishes the job; a
// failed Restore likewise.
func TestDeleteAndRestoreRetriedAfterFault(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	ff := fstest.NewFaultFS(c)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpRename, Nth: 3, Err: syscall.EIO}) // renames: the intent, the transcript, the session folder
	if _, err := m.Trash().Delete(bg, kDel, false); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("delete with a failing rename: %v", err)
	}
	if _, err := m.Append(bg, kDel, [][]byte{[]byte(`{"type":"user"}`)}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("append to a half-deleted session: %v, want unavailable", err)
	}
	ff.Clear()
	trash, err := m.Trash().Delete(bg, kDel, false)
	if err != nil || trash == "" {
		t.Fatalf("retried delete: %q %v", trash, err)
	}
	if p := sessionPlaces(c); len(p) != 1 || p[0].trash != trash || !p[0].main || !p[0].sub || !p[0].archived {
		t.Fatalf("after the retried delete: %v", p)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRename, Nth: 3, Err: syscall.ENOSPC})
	if err := m.Trash().Restore(bg, kDel); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("restore with a full disk: %v", err)
	}
	ff.Clear()
	if err := m.Trash().Restore(bg, kDel); err != nil {
		t.Fatalf("retried restore: %v", err)
	}
	if p := sessionPlaces(c); len(p) != 1 || p[0].trash != "" || !p[0].main || !p[0].sub || !p[0].archived {
		t.Fatalf("after the retried restore: %v", p)
	}
	mustAppendTo(t, m, kDel, line(kDel, "00000000-0000-4000-8000-000000000003", "after"))
}

// Delete compacts the journals of the subagents before removing them, as it
// does the main one's: entries a subagent writer had not compacted (its
// shutdown compaction failed, or the process died before it) are
// acknowledged, and must be trashed, not deleted.
func TestDeleteCompactsSubagentJournals(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	mustAppendTo(t, m, kDel, line(kDel, "00000000-0000-4000-8000-000000000001", "main"))
	sub := line(kDelSub, "00000000-0000-4000-8000-000000000002", "only in the journal")
	mustAppendTo(t, m, kDelSub, sub)
	abortManager(m) // the subagent's entry stays in its journal
	m = newCrashManager(t, c, nil)
	trash, err := m.Trash().Delete(bg, kDel, false)
	closeManager(t, m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadFile(path.Join(trash, kDel.SessionID, "subagents", "agent-a.jsonl"))
	if err != nil || !strings.Contains(string(b), sub) {
		t.Fatalf("the subagent's acknowledged entry is not in the trash: %q %v", b, err)
	}
}

// Recover syncs an interrupted delete's intent before acting on it: written
// by a process killed before the intents folder was synced, the intent may
// not be durable, and a power loss in the middle of finishing it would take
// the intent away and leave the session split.
func TestRecoverSyncsIntentBeforeActing(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	doDelete := killedDelete(t)
	at := opIndex(t, c, doDelete, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpSyncDir && strings.HasSuffix(ev.Path, "/intents")
	})
	c.CrashAt(at) // the intent renamed into place, its folder not synced
	doDelete(c)
	killed := c.KillClone()
	// The next start finishes the delete, but power goes out right after
	// the first move reached the trash.
	recoverOnce := func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		m.Recover(bg)
		abortManager(m)
	}
	at2 := opIndex(t, killed, recoverOnce, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpSyncDir && strings.Contains(ev.Path, "/trash/")
	})
	killed.CrashAt(at2 + 1)
	recoverOnce(killed)
	v := killed.CrashClone(nil)
	m := newCrashManager(t, v, nil)
	if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	closeManager(t, m)
	if p := sessionPlaces(v); len(p) != 1 || !p[0].main || !p[0].sub || !p[0].archived {
		t.Fatalf("session split after two crashes: %v", p)
	}
}

// A purge (delete without trash) crashed at any operation leaves the
// session whole or gone, never half: the intent covers removals too.
func TestPurgeCrashEveryOperation(t *testing.T) {
	points := 0
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		deleteFixture(t, c)
		m := newCrashManager(t, c, nil)
		c.CrashAt(c.Ops() + i)
		_, err := m.Trash().Delete(bg, kDel, true)
		abortManager(m)
		if crashed, _ := c.Crashed(); !crashed {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		points++
		_, ev := c.Crashed()
		for seed := int64(-1); seed < 3; seed++ {
			v := c.CrashClone(nil)
			if seed >= 0 {
				v = c.CrashClone(seedRNG(seed))
			}
			m := newCrashManager(t, v, nil)
			if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
				t.Fatalf("crash at %v: Recover: %v %v", ev, err, rep.Failed)
			}
			closeManager(t, m)
			p := sessionPlaces(v)
			whole := len(p) == 1 && p[0].trash == "" && p[0].main && p[0].sub && p[0].archived
			if len(p) != 0 && !whole {
				t.Fatalf("crash at %v (seed %d): purge left %v", ev, seed, p)
			}
		}
	}
	t.Logf("crash points checked: %d", points)
}

// TestRestoreLoneSubagent: a subagent transcript deleted on its own went
// to the trash with a hint that restore would bring it back, but restore
// refused subpaths and looked only for whole sessions. It now brings it
// back (its sidecar too), and refuses when the transcript exists again.
func TestRestoreLoneSubagent(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	main := newKey()
	sub := main
	sub.Subpath = "subagents/agent-a1"
	mainLine, subLine := string(entry(uuid.NewString())), string(entry(uuid.NewString(), "n", "sub"))
	mustAppendTo(t, m, main, mainLine)
	mustAppendTo(t, m, sub, subLine)
	if _, err := m.FlushAll(bg); err != nil {
		t.Fatal(err)
	}
	meta := strings.TrimSuffix(e.lay.TranscriptPath(sub), ".jsonl") + ".meta.json"
	if err := os.WriteFile(meta, []byte(`{"agentType":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing of it in the trash yet.
	if err := m.Trash().Restore(bg, sub); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "subagents/agent-a1") {
		t.Fatalf("restore before any delete: %v, want not found naming the subagent", err)
	}
	if got, err := m.Trash().Projects(main.SessionID, sub.Subpath); err != nil || len(got) != 0 {
		t.Fatalf("trashed projects before the delete: %v %v", got, err)
	}
	if _, err := m.Trash().Delete(bg, sub, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.lay.TranscriptPath(sub)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("subagent transcript after its delete: %v", err)
	}
	// The whole session is not in the trash: only its subagent is.
	if got, err := m.Trash().Projects(main.SessionID, ""); err != nil || len(got) != 0 {
		t.Fatalf("the main session is reported in the trash of %v (%v)", got, err)
	}
	if got, err := m.Trash().Projects(main.SessionID, sub.Subpath); err != nil || len(got) != 1 || got[0] != project {
		t.Fatalf("trashed projects of the subagent: %v %v, want [%s]", got, err, project)
	}
	if err := m.Trash().Restore(bg, sub); err != nil {
		t.Fatalf("restore of the subagent: %v", err)
	}
	if got := e.canonicalLines(sub); len(got) != 1 || got[0] != subLine {
		t.Fatalf("restored subagent holds %q", got)
	}
	if b, err := os.ReadFile(meta); err != nil || string(b) != `{"agentType":"x"}` {
		t.Fatalf("restored sidecar: %q, %v", b, err)
	}
	if got := e.canonicalLines(main); len(got) != 1 || got[0] != mainLine {
		t.Fatalf("main transcript after the subagent's round trip: %q", got)
	}
	if ents, err := os.ReadDir(filepath.Join(e.lay.StateDir, "trash", project)); err != nil || len(ents) != 0 {
		t.Fatalf("trash after the restore: %v, %v; want it empty", ents, err)
	}
	// Deleted again, then written again: restore merges the trashed
	// entries in front of the new one.
	if _, err := m.Trash().Delete(bg, sub, false); err != nil {
		t.Fatal(err)
	}
	newLine := string(entry(uuid.NewString(), "n", "new"))
	mustAppendTo(t, m, sub, newLine)
	if err := m.Trash().Restore(bg, sub); err != nil {
		t.Fatalf("restore into a subagent written again: %v", err)
	}
	if got := e.canonicalLines(sub); len(got) != 2 || got[0] != subLine || got[1] != newLine {
		t.Fatalf("subagent after the merge holds %q, want the trashed entry then the new one", got)
	}
	// A whole session's restore still ignores lone subagents' entries.
	if err := m.Trash().Restore(bg, main); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore of the main session, never deleted: %v, want not found", err)
	}
}

// An intent left by an interrupted delete that cannot be read at start
// fails the recovery (sessiond must not serve: which session it moves is
// unknown, so none could be kept from writers); the next try finishes it.
func TestIntentUnreadableAtStart(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	doDelete := killedDelete(t)
	at := opIndex(t, c, doDelete, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpSyncDir && strings.HasSuffix(ev.Path, "/intents")
	})
	c.CrashAt(at + 1) // the intent is in place, nothing moved yet
	doDelete(c)
	ff := fstest.NewFaultFS(c.KillClone())
	isIntent := func(p string) bool {
		return strings.Contains(p, "/intents/") && strings.HasSuffix(p, ".json") && !strings.HasPrefix(path.Base(p), ".")
	}
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: isIntent, Err: syscall.EMFILE, Sticky: true})
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	_, err := m.Recover(bg)
	wantUnreadable(t, "recovery with the intent unreadable", err, syscall.EMFILE)
	if len(ff.Fired()) == 0 {
		t.Fatal("the fault never fired")
	}
	ff.Clear()
	if rep, err := m.Recover(bg); err != nil || len(rep.Failed) != 0 {
		t.Fatalf("Recover once the intent reads: %v %v", err, rep.Failed)
	}
	if p := sessionPlaces(ff.Inner().(*fstest.CrashFS)); len(p) != 1 || p[0].trash == "" || !p[0].main || !p[0].sub {
		t.Fatalf("after the recovery the session is at %v, want whole in the trash", p)
	}
}

// A damaged intent (it does not decode, or names paths outside sessiond's
// folders) is a recovery failure left in place for a human; sessiond
// still starts.
func TestIntentDamagedLeftInPlace(t *testing.T) {
	for name, body := range map[string]string{
		"torn":    `{"op":"delete","project_key":`,
		"no key":  `{"op":"delete","project_key":"-p","session_id":"../x","moves":[]}`,
		"outside": `{"op":"delete","project_key":"-p","session_id":"00000001-0000-4000-8000-000000000000","moves":[["/etc/passwd","/tmp/x"]]}`,
	} {
		t.Run(name, func(t *testing.T) {
			c := fstest.NewCrashFS()
			p := filepath.Join(crashLayout.StateDir, "intents", "00000000-0000-4000-8000-00000000000a.json")
			if err := c.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			m := newCrashManager(t, c, nil)
			defer closeManager(t, m)
			rep, err := m.Recover(bg)
			if err != nil || len(rep.Failed) != 1 || !errors.Is(rep.Failed[0], errdefs.ErrCorrupt) {
				t.Fatalf("Recover with a damaged intent: %v %v; want it started, the intent a failure", err, rep.Failed)
			}
			if _, err := c.ReadFile(p); err != nil {
				t.Fatalf("the damaged intent was not left in place: %v", err)
			}
		})
	}
}

// The trash's listings: a restore looks the session's projects up there,
// and an unreadable trash must not answer "not in the trash"; its usage,
// counted short while a folder cannot be listed, is not kept for the
// next minute.
func TestTrashUnreadable(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	ff := fstest.NewFaultFS(c)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	if _, err := m.Trash().Delete(bg, kDel, false); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(crashLayout.StateDir, "trash")
	for _, dir := range []string{root, filepath.Join(root, kDel.ProjectKey)} {
		ff.Inject(fstest.Fault{Op: fstest.OpReadDir, Path: onPath(dir), Err: syscall.EMFILE})
		_, err := m.Trash().Projects(kDel.SessionID, "")
		wantUnreadable(t, "trashed projects with "+dir+" unreadable", err, syscall.EMFILE)
		ff.Clear()
	}
	if got, err := m.Trash().Projects(kDel.SessionID, ""); err != nil || len(got) != 1 || got[0] != kDel.ProjectKey {
		t.Fatalf("trashed projects: %v %v", got, err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpReadDir, Path: onPath(filepath.Join(root, kDel.ProjectKey)), Err: syscall.EIO})
	if u := m.Trash().Usage(); u.Copies != 0 {
		t.Fatalf("usage with the project's trash unreadable: %+v", u)
	}
	ff.Clear()
	if u := m.Trash().Usage(); u.Copies != 1 {
		t.Fatalf("usage once the trash reads again: %+v, want the copy counted", u)
	}
}
