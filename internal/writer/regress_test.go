package writer

// Regression tests for the bugs the crash and fault tests found: each
// replays one failing case deterministically, so a change that brings a
// bug back fails here with a plain story, not only somewhere in the
// exhaustive sweeps.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
)

var bg = context.Background()

func mustAppendTo(t *testing.T, m *Manager, k layout.Key, lines ...string) {
	t.Helper()
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	if _, err := m.Append(bg, k, raw); err != nil {
		t.Fatalf("append to %s: %v", k, err)
	}
}

// abortManager stops m as kill -9 would: no shutdown compaction.
func abortManager(m *Manager) { (&world{m: m}).stop() }

// recoverAndRead recovers v with a new Manager, closes it, and returns
// key's canonical file.
func recoverAndRead(t *testing.T, v *fstest.CrashFS, k layout.Key) string {
	t.Helper()
	m := newCrashManager(t, v, nil)
	rep, err := m.Recover(bg)
	if err != nil || len(rep.Failed) > 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	closeManager(t, m)
	b, _ := v.ReadFile(crashLayout.TranscriptPath(k))
	return string(b)
}

// opIndex runs fn on a copy of c and returns the index, as c counts, of
// the first operation match selects.
func opIndex(t *testing.T, c *fstest.CrashFS, fn func(c *fstest.CrashFS), match func(fstest.Event) bool) int64 {
	t.Helper()
	probe := c.KillClone()
	var at int64
	probe.Trace(func(ev fstest.Event) {
		if at == 0 && match(ev) {
			at = ev.N
		}
	})
	fn(probe)
	if at == 0 {
		t.Fatal("the operation to crash at never ran")
	}
	return c.Ops() + at // the copy counts from zero
}

// Bug: a crash during the first journal generation of a session left
// "<sid>.wal.tmp-…" in the journal folder for good: writers sweep only
// their own temps when they open, and without a .wal file recovery never
// opens that session.
func TestRecoverSweepsJournalTemps(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(1, "")
	tmp := crashLayout.JournalPath(k) + ".tmp-0123456789abcdef"
	c.WriteFile(tmp, []byte("half a header"), 0o600)
	m := newCrashManager(t, c, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	if _, err := c.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal temp file still there after Recover: %v", err)
	}
}

// Bug: Recover swept only compaction temps at the top of each project
// folder; an archive mark's temp (in the session folder), a subagent's
// compaction temp (in subagents/), a kept repair copy's temp and an
// intent's temp stayed for good, the first two where listings look.
func TestRecoverSweepsTempsInSessionFolders(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(1, "")
	sess := crashLayout.SessionDir(k)
	temps := []string{
		path.Join(sess, archiveTempPrefix+"abcd1234"),
		path.Join(sess, "subagents", ".agent-a.compact-12345678.tmp"),
		path.Join(crashLayout.StateDir, "repairs", k.ProjectKey, k.SessionID, ".20260101T000000.000000000Z.jsonl.tmp"),
		path.Join(crashLayout.StateDir, "intents", ".6a4c8e2a-0000-4000-8000-000000000000.json.tmp"),
	}
	keep := []string{crashLayout.TranscriptPath(k), path.Join(sess, "archived.json"), path.Join(sess, "subagents", "agent-a.jsonl")}
	for _, p := range append(slices.Clone(temps), keep...) {
		c.WriteFile(p, []byte(`{"type":"user"}`+"\n"), 0o600)
	}
	m := newCrashManager(t, c, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	for _, p := range temps {
		if _, err := c.Stat(p); err == nil {
			t.Errorf("temp file still there after Recover: %s", p)
		}
	}
	for _, p := range keep {
		if _, err := c.Stat(p); err != nil {
			t.Errorf("Recover removed %s: %v", p, err)
		}
	}
}

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

// Bug: Delete moved the main transcript and the session folder (its
// subagents, its archive mark) one after the other; a crash between the
// two left the session half in the trash and half in place, and Restore
// then refused ("exists again"). Now the moves are recorded in a durable
// intent first and Recover finishes them. The crash comes right after
// the second rename, before any folder sync: a killed process, then a
// power loss during the recovery's own moves would also be covered by
// TestCrashDuringRecovery.
func TestDeleteInterruptedIsFinished(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	doDelete := func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		m.Delete(bg, kDel, false)
		abortManager(m)
	}
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
	if _, err := m.Delete(bg, kDel, false); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("delete with a failing rename: %v", err)
	}
	if _, err := m.Append(bg, kDel, [][]byte{[]byte(`{"type":"user"}`)}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("append to a half-deleted session: %v, want unavailable", err)
	}
	ff.Clear()
	trash, err := m.Delete(bg, kDel, false)
	if err != nil || trash == "" {
		t.Fatalf("retried delete: %q %v", trash, err)
	}
	if p := sessionPlaces(c); len(p) != 1 || p[0].trash != trash || !p[0].main || !p[0].sub || !p[0].archived {
		t.Fatalf("after the retried delete: %v", p)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRename, Nth: 3, Err: syscall.ENOSPC})
	if err := m.Restore(bg, kDel); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("restore with a full disk: %v", err)
	}
	ff.Clear()
	if err := m.Restore(bg, kDel); err != nil {
		t.Fatalf("retried restore: %v", err)
	}
	if p := sessionPlaces(c); len(p) != 1 || p[0].trash != "" || !p[0].main || !p[0].sub || !p[0].archived {
		t.Fatalf("after the retried restore: %v", p)
	}
	mustAppendTo(t, m, kDel, line(kDel, "00000000-0000-4000-8000-000000000003", "after"))
}

// Bug: Delete compacted the main journal before removing it but removed
// the folder of subagent journals as it was, with whatever entries a
// subagent writer had not compacted (its shutdown compaction failed, or
// the process died before it): acknowledged entries deleted, not trashed.
func TestDeleteCompactsSubagentJournals(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	mustAppendTo(t, m, kDel, line(kDel, "00000000-0000-4000-8000-000000000001", "main"))
	sub := line(kDelSub, "00000000-0000-4000-8000-000000000002", "only in the journal")
	mustAppendTo(t, m, kDelSub, sub)
	abortManager(m) // the subagent's entry stays in its journal
	m = newCrashManager(t, c, nil)
	trash, err := m.Delete(bg, kDel, false)
	closeManager(t, m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadFile(path.Join(trash, kDel.SessionID, "subagents", "agent-a.jsonl"))
	if err != nil || !strings.Contains(string(b), sub) {
		t.Fatalf("the subagent's acknowledged entry is not in the trash: %q %v", b, err)
	}
}

// Bug: a process killed between a compaction's rename and its folder sync
// left the new canonical file in the page cache only. Recovery saw it,
// found the compaction marker matching, and replaced the journal (the only
// durable copy of the entries) with a new generation; a power loss then
// took the rename back and the entries with it. Now recovery syncs the
// file and its folder before dropping the journal.
func TestRecoverMakesCompactionRenameDurable(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(3, "")
	entry := line(k, "00000000-0000-4000-8000-000000000001", "acked")
	work := func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		if _, err := m.Append(bg, k, [][]byte{[]byte(entry)}); err == nil {
			m.Flush(bg, k)
		}
		abortManager(m)
	}
	at := opIndex(t, c, work, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpRename && ev.Path == crashLayout.TranscriptPath(k)
	})
	c.CrashAt(at + 1) // renamed, folder not synced
	work(c)
	killed := c.KillClone()
	m := newCrashManager(t, killed, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	abortManager(m)
	if got := recoverAndRead(t, killed.CrashClone(nil), k); !strings.Contains(got, entry) {
		t.Fatalf("power loss after recovery lost the acknowledged entry; file: %q", got)
	}
}

// Bug: an interrupted delete's intent, written by a process killed before
// the intents folder was synced, was acted on by the next start before it
// was durable; a power loss in the middle of finishing it took the intent
// away and left the session split. Now Recover syncs intents first.
func TestRecoverSyncsIntentBeforeActing(t *testing.T) {
	c := fstest.NewCrashFS()
	deleteFixture(t, c)
	doDelete := func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		m.Delete(bg, kDel, false)
		abortManager(m)
	}
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

// Bug: a folder whose creation was not made durable (the sync of its
// parent failed) was trusted forever after because it existed: the next
// MkdirAll returned at once, and everything written below it was lost
// with it at a power loss. Seen here on the journal folder.
func TestFailedFolderSyncIsRedone(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	k := fixedKey(1, "")
	ff.Inject(fstest.Fault{Op: fstest.OpSyncDir, Err: syscall.EIO}) // the first folder made
	m := newCrashManager(t, ff, nil)
	if _, err := m.Append(bg, k, [][]byte{[]byte(line(k, "", "lost, and said so"))}); !errors.Is(err, errdefs.ErrIO) {
		t.Fatalf("append with a failing folder sync: %v", err)
	}
	acked := line(k, "00000000-0000-4000-8000-000000000001", "acked")
	mustAppendTo(t, m, k, acked)
	abortManager(m)
	if got := recoverAndRead(t, c.CrashClone(nil), k); !strings.Contains(got, acked) {
		t.Fatalf("power loss lost an acknowledged entry: %q", got)
	}
}

// Bug: after a failed journal sync (Linux marks the pages clean: readable,
// never written), the reopened writer took the failed batch for
// committed and appended after it; a power loss left a hole followed by
// valid records, recovery quarantined the journal as corrupt, and every
// acknowledged entry in it was lost. Now the failed write is cut, at once
// or, if the disk refuses, by the next writer before it appends.
func TestJournalSyncFailureThenPowerLoss(t *testing.T) {
	for _, cutFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("immediate cut fails %v", cutFails), func(t *testing.T) {
			c := fstest.NewCrashFS()
			ff := fstest.NewFaultFS(c)
			k := fixedKey(1, "")
			m := newCrashManager(t, ff, nil)
			first := line(k, "00000000-0000-4000-8000-000000000001", "first")
			mustAppendTo(t, m, k, first)
			wal := func(p string) bool { return p == crashLayout.JournalPath(k) }
			ff.Inject(fstest.Fault{Op: fstest.OpSync, Path: wal, Err: syscall.EIO, LoseUnsynced: true})
			if cutFails {
				ff.Inject(fstest.Fault{Op: fstest.OpTruncate, Path: wal, Err: syscall.EIO})
			}
			if _, err := m.Append(bg, k, [][]byte{[]byte(line(k, "", "failed"))}); !errors.Is(err, errdefs.ErrIO) {
				t.Fatalf("append with a failing sync: %v", err)
			}
			ff.Clear()
			third := line(k, "00000000-0000-4000-8000-000000000003", "third")
			mustAppendTo(t, m, k, third)
			abortManager(m)
			v := c.CrashClone(nil)
			got := recoverAndRead(t, v, k)
			if !strings.Contains(got, first) || !strings.Contains(got, third) {
				t.Fatalf("acknowledged entries lost after the power loss: %q", got)
			}
			if probs := checkTemps(v); len(probs) > 0 {
				t.Fatal(probs)
			}
		})
	}
}

// Bug: errors of a failing disk reached callers without their kind, or
// with a wrong one: a fork whose temp file could not be written or whose
// source could not be read (no kind: the server answers Unknown), a flush
// of a session whose file could not be looked at (not found), a restore
// that could not look for an existing session (already exists).
func TestDiskErrorsKeepTheirKind(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	mustAppendTo(t, m, kSrc, line(kSrc, "00000000-0000-4000-8000-000000000001", "s1"))
	if _, err := m.Flush(bg, kSrc); err != nil {
		t.Fatal(err)
	}
	isTmp := func(p string) bool { return strings.HasSuffix(p, ".tmp") }
	ff.Inject(fstest.Fault{Op: fstest.OpWrite, Path: isTmp, Err: syscall.ENOSPC})
	if _, err := m.Fork(bg, kSrc, "", "", kFork.SessionID); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Errorf("fork onto a full disk: %v, want no space", err)
	}
	ff.Clear()
	ff.CountReads(true)
	canon := func(p string) bool { return p == crashLayout.TranscriptPath(kSrc) }
	ff.Inject(fstest.Fault{Op: fstest.OpRead, Path: canon, Err: syscall.EIO})
	if _, err := m.Fork(bg, kSrc, "", "", "6a4c8e2a-0000-4000-8000-000000000009"); !errors.Is(err, errdefs.ErrIO) {
		t.Errorf("fork of an unreadable source: %v, want i/o error", err)
	}
	ff.Clear()
	// A session with no live writer, whose file cannot be looked at.
	k := fixedKey(9, "")
	c.WriteFile(crashLayout.TranscriptPath(k), []byte(line(k, "", "x")+"\n"), 0o600)
	ff.Inject(fstest.Fault{Op: fstest.OpStat, Err: syscall.EIO, Sticky: true})
	if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrIO) {
		t.Errorf("flush with a failing lstat: %v, want i/o error", err)
	}
	if err := m.Restore(bg, kDel); errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("restore with a failing lstat: %v, must not claim the session exists", err)
	}
	ff.Clear()
}

// Bug (same class as the rename above): journaled entries that another
// program had also written to the canonical file (same uuid) were dropped
// as duplicates and the journal then dropped, trusting lines that program
// may never have synced; a power loss took them away. Now the file is
// synced first, at open and at compaction.
func TestForeignLinesSyncedBeforeJournalDropped(t *testing.T) {
	for _, when := range []string{"at open", "at compaction"} {
		t.Run(when, func(t *testing.T) {
			c := fstest.NewCrashFS()
			k := fixedKey(3, "")
			m := newCrashManager(t, c, nil)
			mustAppendTo(t, m, k, line(k, "00000000-0000-4000-8000-000000000001", "first"))
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			dup := line(k, "00000000-0000-4000-8000-000000000002", "sent both ways")
			mustAppendTo(t, m, k, dup)
			foreign := func(fs fsys.FS) {
				f, err := fs.OpenFile(crashLayout.TranscriptPath(k), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Write([]byte(dup + "\n")) // never synced
				f.Close()
			}
			var last *fstest.CrashFS
			if when == "at open" {
				abortManager(m)
				foreign(c)
				last = c.KillClone()
				m = newCrashManager(t, last, nil)
				if _, err := m.Recover(bg); err != nil {
					t.Fatal(err)
				}
			} else {
				foreign(c)
				if _, err := m.Flush(bg, k); err != nil {
					t.Fatal(err)
				}
				last = c
			}
			closeManager(t, m)
			if got := recoverAndRead(t, last.CrashClone(nil), k); !strings.Contains(got, dup) {
				t.Fatalf("power loss lost an acknowledged entry: %q", got)
			}
		})
	}
}

// Performance bug: every compaction allocated a 1 MiB write buffer and
// every journal open a 256 KiB read window, however small the session:
// garbage that dominated the CPU profile of many small sessions.
func TestSmallCompactionAllocatesLittle(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	mustAppendTo(t, m, k, line(k, "", "warm up"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const rounds = 20
	for i := 0; i < rounds; i++ {
		mustAppendTo(t, m, k, line(k, "", fmt.Sprint(i)))
		if _, err := m.Flush(bg, k); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / rounds; per > 256<<10 {
		t.Fatalf("an append and flush of a tiny session allocates %d KiB", per>>10)
	}
}

// Bug: finishing an interrupted move compares the two copies of a file
// that both exist; a failed read was taken for different content, so the
// session was left "for a human to merge" instead of failing with the
// disk's error and being finished on the next try.
func TestSameContentReadErrorIsNoConflict(t *testing.T) {
	c := fstest.NewCrashFS()
	c.WriteFile("/a", []byte("same"), 0o600)
	c.WriteFile("/b", []byte("same"), 0o600)
	ff := fstest.NewFaultFS(c)
	ff.CountReads(true)
	if same, err := sameContent(ff, "/a", "/b"); !same || err != nil {
		t.Fatalf("same files: %v %v", same, err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpRead, Path: func(p string) bool { return p == "/b" }, Err: syscall.EIO})
	if same, err := sameContent(ff, "/a", "/b"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("with a failing read: same %v, err %v; want the read error", same, err)
	}
}

// A purge (delete without trash) crashed at any operation leaves the
// session whole or gone, never half: the intent covers removals too.
func TestPurgeCrashEveryOperation(t *testing.T) {
	points := 0
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		deleteFixture(t, c)
		c.CrashAt(c.Ops() + i)
		m := newCrashManager(t, c, nil)
		_, err := m.Delete(bg, kDel, true)
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

// Bug (CI, TestHostileDescriptorExhaustion): a daemon out of descriptors
// refused a new session's first append after journal.Create had renamed
// the journal into place (its folder sync or its reopen failed), and the
// header-only journal stayed. Every listing then opened a writer for that
// session, needing more descriptors, and the listing failed with
// ResourceExhausted. Now a refused first append leaves nothing behind,
// whichever descriptor-taking operation failed.
func TestRefusedFirstAppendLeavesNoJournal(t *testing.T) {
	k := fixedKey(1, "")
	jdir := path.Dir(crashLayout.JournalPath(k))
	for _, op := range []fstest.Op{fstest.OpOpen, fstest.OpSyncDir} {
		for n := int64(1); ; n++ {
			c := fstest.NewCrashFS()
			ff := fstest.NewFaultFS(c)
			m := newCrashManager(t, ff, nil)
			ff.Inject(fstest.Fault{Op: op, Nth: n, Err: syscall.EMFILE})
			first := line(k, "00000000-0000-4000-8000-000000000001", "first try")
			_, err := m.Append(bg, k, [][]byte{[]byte(first)})
			fired := ff.Fired()
			ff.Clear()
			if len(fired) == 0 {
				closeManager(t, m)
				if n == 1 {
					t.Fatalf("the first append makes no %v at all", op)
				}
				break
			}
			where := fmt.Sprintf("EMFILE at %v", fired[0])
			want := first
			if err != nil {
				if !errors.Is(err, syscall.EMFILE) {
					t.Fatalf("%s: the append failed with %v, which hides the errno the server maps to ResourceExhausted", where, err)
				}
				ents, _ := c.ReadDir(jdir)
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), k.SessionID) {
						t.Fatalf("%s: the refused append left %s in the journal folder:\n%s", where, e.Name(), c.Dump())
					}
				}
				if infos, _, err := m.List(bg, ListOptions{}); err != nil || len(infos) != 0 {
					t.Fatalf("%s: listing after the refused append: %v %v; want no session", where, infos, err)
				}
				want = line(k, "00000000-0000-4000-8000-000000000002", "second try")
				mustAppendTo(t, m, k, want)
			}
			abortManager(m)
			if got := recoverAndRead(t, c.CrashClone(nil), k); got != want+"\n" {
				t.Fatalf("%s (append error %v): after a power loss the transcript is %q, want the acknowledged entry alone", where, err, got)
			}
		}
	}
}

// A compaction that finds every journaled entry already written to the
// transcript by another program starts a new journal generation. When
// that journal.Create failed after renaming the new journal over the old
// one, the writer kept its handle on the old, now unlinked, journal and
// acknowledged the next append through it: a power loss lost it. Now the
// failure fails the writer, which reopens from disk.
func TestFailedNewGenerationAfterForeignLinesReopens(t *testing.T) {
	for _, op := range []fstest.Op{fstest.OpSyncDir, fstest.OpOpen} {
		t.Run(op.String(), func(t *testing.T) {
			c := fstest.NewCrashFS()
			ff := fstest.NewFaultFS(c)
			k := fixedKey(4, "")
			m := newCrashManager(t, ff, nil)
			mustAppendTo(t, m, k, line(k, "00000000-0000-4000-8000-000000000001", "first"))
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			dup := line(k, "00000000-0000-4000-8000-000000000002", "sent both ways")
			mustAppendTo(t, m, k, dup)
			f, err := c.OpenFile(crashLayout.TranscriptPath(k), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte(dup + "\n"))
			f.Sync()
			f.Close()
			// The new generation's folder sync, or its reopen: both come
			// after the rename.
			wal := func(p string) bool {
				return p == crashLayout.JournalPath(k) || p == path.Dir(crashLayout.JournalPath(k))
			}
			ff.Inject(fstest.Fault{Op: op, Path: wal, Err: syscall.EIO})
			if _, err := m.Flush(bg, k); !errors.Is(err, errdefs.ErrIO) {
				t.Fatalf("flush with a failing new journal: %v (faults %v)", err, ff.Fired())
			}
			ff.Clear()
			after := line(k, "00000000-0000-4000-8000-000000000003", "after the failure")
			mustAppendTo(t, m, k, after)
			abortManager(m)
			got := recoverAndRead(t, c.CrashClone(nil), k)
			if !strings.Contains(got, after) || strings.Count(got, dup) != 1 {
				t.Fatalf("after a power loss the transcript is %q; want the entry acknowledged after the failure, and the shared one once", got)
			}
		})
	}
}

// The fallback discardNewJournal's comment promises: when the removal of a
// refused first append's journal fails too, the header-only journal stays,
// lists as nothing, and the next writer to open the session drops it.
func TestRefusedFirstAppendJournalDroppedLater(t *testing.T) {
	c := fstest.NewCrashFS()
	ff := fstest.NewFaultFS(c)
	k := fixedKey(5, "")
	wal := crashLayout.JournalPath(k)
	m := newCrashManager(t, ff, nil)
	// The folder sync after the rename fails, and so does the removal.
	ff.Inject(fstest.Fault{Op: fstest.OpSyncDir, Path: func(p string) bool { return p == path.Dir(wal) }, Err: syscall.EMFILE, Sticky: true})
	ff.Inject(fstest.Fault{Op: fstest.OpRemove, Path: func(p string) bool { return p == wal }, Err: syscall.EIO})
	if _, err := m.Append(bg, k, [][]byte{[]byte(line(k, "", "refused"))}); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("append with a failing folder sync: %v", err)
	}
	ff.Clear()
	if _, err := c.Lstat(wal); err != nil {
		t.Fatalf("the failed removal should have left the journal: %v", err)
	}
	closeManager(t, m)
	m = newCrashManager(t, ff, nil)
	if infos, _, err := m.List(bg, ListOptions{}); err != nil || len(infos) != 0 {
		t.Fatalf("listing with the leftover journal: %v %v; want no session", infos, err)
	}
	closeManager(t, m)
	if _, err := c.Lstat(wal); err == nil {
		t.Fatalf("the writer that opened the leftover journal did not drop it:\n%s", c.Dump())
	}
}

// TestRetiringFlushRetiresAtOnce: recovery's replay flushes each session
// with retire set, so that the writers it opens do not hold their files
// until the idle retirement. The caller's own reference to the writer used
// to be released only after it queued the flush, so a writer that ran the
// flush first saw itself still referenced and stayed (CI caught
// TestCheckJournalsServesBeforeReplay with one writer left). The flush
// must find the writer gone every time.
func TestRetiringFlushRetiresAtOnce(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	k := newKey()
	// The caller is slow to go on after queueing (as a loaded machine
	// makes it): the writer runs the flush first.
	slow := func() { time.Sleep(20 * time.Millisecond) }
	testHookQueued.Store(&slow)
	defer testHookQueued.Store(nil)
	for i := range 20 {
		if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString(), "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.flush(ctx, k, retireIfDone); err != nil {
			t.Fatal(err)
		}
		if m.IsActive(k) {
			t.Fatalf("round %d: the writer is still active after a retiring flush", i)
		}
	}
}

// TestListingRetiresWritersItOpens: the walks over every session (a
// listing, Info, FlushAll, CheckAll) meet journals left behind by writers
// whose last compaction failed. They opened a writer for each and left it
// to the idle retirement, so a daemon with a few hundred such sessions ran
// out of file descriptors on its next listing
// (TestHostileDescriptorExhaustion failed in CI). Each writer opened only
// for the walk now moves its journal into the file and retires; a writer
// someone was already using stays; the next listing opens none.
func TestListingRetiresWritersItOpens(t *testing.T) {
	for _, tc := range []struct {
		name string
		walk func(m *Manager, keys []layout.Key) error
	}{
		{"List", func(m *Manager, _ []layout.Key) error { _, _, err := m.List(bg, ListOptions{}); return err }},
		{"Info", func(m *Manager, keys []layout.Key) error {
			for _, k := range keys {
				if _, err := m.Info(bg, k); err != nil {
					return err
				}
			}
			return nil
		}},
		{"FlushAll", func(m *Manager, _ []layout.Key) error { _, err := m.FlushAll(bg); return err }},
		{"CheckAll", func(m *Manager, _ []layout.Key) error { _, err := m.CheckAll(bg, project); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			keys := make([]layout.Key, 20)
			want := map[layout.Key][]string{}
			for i := range keys {
				keys[i] = newKey()
				if i%2 == 1 {
					// Half have a transcript already, the journal a tail.
					first := string(entry(uuid.NewString(), "i", fmt.Sprint(i), "n", "0"))
					mustAppendTo(t, m, keys[i], first)
					if _, err := m.Flush(bg, keys[i]); err != nil {
						t.Fatal(err)
					}
					want[keys[i]] = append(want[keys[i]], first)
				}
				l := string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
				mustAppendTo(t, m, keys[i], l)
				want[keys[i]] = append(want[keys[i]], l)
			}
			crash(t, m) // the journals stay, nothing compacted them
			m = e.manager()
			defer closeManager(t, m)
			live := newKey()
			mustAppendTo(t, m, live, string(entry(uuid.NewString())))

			if err := tc.walk(m, keys); err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.ActiveSessions != 1 || !m.IsActive(live) {
				t.Fatalf("after the walk %d writers are open (want only the one in use before it, still open: %v)", st.ActiveSessions, m.IsActive(live))
			}
			for _, k := range keys {
				if got := e.canonicalLines(k); strings.Join(got, "\n") != strings.Join(want[k], "\n") {
					t.Fatalf("%s on disk: %q, want %q", k, got, want[k])
				}
				if _, err := os.Stat(e.lay.JournalPath(k)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("journal of %s after its writer retired: %v, want none", k, err)
				}
			}
			infos, _, err := m.List(bg, ListOptions{})
			if err != nil || len(infos) != len(keys)+1 {
				t.Fatalf("listing after the walk: %d sessions, %v", len(infos), err)
			}
			for _, in := range infos {
				if in.Key != live && (in.Entries != uint64(len(want[in.Key])) || in.Pending != 0) {
					t.Fatalf("%s listed with %d entries, %d pending; want %d, 0", in.Key, in.Entries, in.Pending, len(want[in.Key]))
				}
			}
			if n := m.Stats().ActiveSessions; n != 1 {
				t.Fatalf("the listing after the walk left %d writers open, want 1", n)
			}
		})
	}
}

// TestListingRetiresWhenCompactionFails: out of descriptors (the case
// the walks' retirement is for), the compaction of a left-behind journal
// fails. The writer retires all the same, the journal keeps the entries,
// the listing counts them as pending, and the next listing opens no
// writer; once descriptors are back, FlushAll moves them.
func TestListingRetiresWhenCompactionFails(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	keys := make([]layout.Key, 10)
	want := map[layout.Key]string{}
	for i := range keys {
		keys[i] = newKey()
		want[keys[i]] = string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
		mustAppendTo(t, m, keys[i], want[keys[i]])
	}
	crash(t, m)
	ff := fstest.NewFaultFS(fsys.OS)
	e.fs = ff
	m = e.manager()
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Sticky: true, Err: syscall.EMFILE,
		Path: func(p string) bool { return strings.Contains(p, ".compact-") }})
	for round := range 2 {
		infos, _, err := m.List(bg, ListOptions{})
		if err != nil || len(infos) != len(keys) {
			t.Fatalf("round %d: listing %d sessions, %v", round, len(infos), err)
		}
		for _, in := range infos {
			if in.Entries != 1 || in.Pending != 1 {
				t.Fatalf("round %d: %s listed with %d entries, %d pending; want 1, 1", round, in.Key, in.Entries, in.Pending)
			}
		}
		if n := m.Stats().ActiveSessions; n != 0 {
			t.Fatalf("round %d: %d writers left open when compaction failed", round, n)
		}
	}
	for _, k := range keys {
		if _, err := os.Stat(e.lay.TranscriptPath(k)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: a transcript appeared though every compaction failed: %v", k, err)
		}
	}
	ff.Clear()
	if _, err := m.FlushAll(bg); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got := e.canonicalLines(k); len(got) != 1 || got[0] != want[k] {
			t.Fatalf("%s after FlushAll: %q, want its one entry", k, got)
		}
	}
	if n := m.Stats().ActiveSessions; n != 0 {
		t.Fatalf("FlushAll left %d writers open", n)
	}
}

// TestListingDropsEmptyLeftBehindJournals: a journal with no entry and no
// transcript (a refused first append whose journal could not be removed)
// is not a session: a walk skips it, and the writer it opened retires and
// removes the journal instead of holding it open.
func TestListingDropsEmptyLeftBehindJournals(t *testing.T) {
	for _, walk := range []string{"List", "Info", "FlushAll", "CheckAll"} {
		t.Run(walk, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			defer closeManager(t, m)
			keys := make([]layout.Key, 5)
			for i := range keys {
				keys[i] = newKey()
				p := e.lay.JournalPath(keys[i])
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				j, err := journal.Create(fsys.OS, p, journal.Header{ProjectKey: keys[i].ProjectKey, SessionID: keys[i].SessionID}, m.logs.opt)
				if err != nil {
					t.Fatal(err)
				}
				j.Close()
			}
			switch walk {
			case "List":
				if infos, _, err := m.List(bg, ListOptions{}); err != nil || len(infos) != 0 {
					t.Fatalf("listing: %d sessions, %v; want none", len(infos), err)
				}
			case "Info":
				for _, k := range keys {
					if _, err := m.Info(bg, k); !errdefs.Is(err, errdefs.ErrNotFound) {
						t.Fatalf("info of %s: %v, want not found", k, err)
					}
				}
			case "FlushAll":
				if res, err := m.FlushAll(bg); err != nil || len(res) != 0 {
					t.Fatalf("FlushAll: %v, %v; want nothing flushed", res, err)
				}
			case "CheckAll":
				if res, err := m.CheckAll(bg, project); err != nil || len(res) != 0 {
					t.Fatalf("CheckAll: %v, %v; want nothing checked", res, err)
				}
			}
			if n := m.Stats().ActiveSessions; n != 0 {
				t.Fatalf("%d writers left open for empty journals", n)
			}
			for _, k := range keys {
				if _, err := os.Stat(e.lay.JournalPath(k)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("empty journal of %s still there: %v", k, err)
				}
			}
		})
	}
}

// TestWalksRaceAppends: listings and FlushAll, which open and retire
// writers of left-behind journals, run in loops while appends, Info and
// their own writers' retirements race them: every acknowledged entry is
// in its transcript exactly once.
func TestWalksRaceAppends(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	keys := make([]layout.Key, 8)
	want := map[layout.Key][]string{}
	for i := range keys {
		keys[i] = newKey()
		l := string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
		mustAppendTo(t, m, keys[i], l)
		want[keys[i]] = append(want[keys[i]], l)
	}
	crash(t, m)
	m = e.manager()
	stop := make(chan struct{})
	var walkers, writers sync.WaitGroup
	for w := range 2 {
		walkers.Add(1)
		go func() {
			defer walkers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if w == 0 {
					_, _, err = m.List(bg, ListOptions{})
				} else {
					_, err = m.FlushAll(bg)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	for i, k := range keys {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for n := range 40 {
				l := string(entry(uuid.NewString(), "i", fmt.Sprint(i), "n", fmt.Sprint(n)))
				if _, err := m.Append(bg, k, [][]byte{[]byte(l)}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[k] = append(want[k], l)
				mu.Unlock()
				if n%7 == 0 {
					if _, err := m.Info(bg, k); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	walkers.Wait()
	closeManager(t, m)
	for _, k := range keys {
		got := e.canonicalLines(k)
		slices.Sort(got)
		w := slices.Clone(want[k])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("%s holds %d lines, want its %d acknowledged entries once each", k, len(got), len(w))
		}
	}
}

// TestReadKeepsModifiedTime: a writer opened to read a session (show,
// check, info) published it as modified at time 0 until its next append,
// so the listing put it last and --continue picked an older session.
func TestReadKeepsModifiedTime(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	old, recent := newKey(), newKey()
	mustAppendTo(t, m, old, string(entry(uuid.NewString())))
	mustAppendTo(t, m, recent, string(entry(uuid.NewString())))
	closeManager(t, m)
	then := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	if err := os.Chtimes(e.lay.TranscriptPath(old), then, then); err != nil {
		t.Fatal(err)
	}
	m = e.manager()
	defer closeManager(t, m)
	// The writer opens for the read and stays (a live writer, as after
	// show or tail).
	if err := m.Read(bg, recent, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !m.IsActive(recent) {
		t.Fatal("the read opened no writer: the test proves nothing")
	}
	infos, _, err := m.List(bg, ListOptions{})
	if err != nil || len(infos) != 2 {
		t.Fatalf("listing: %d sessions, %v", len(infos), err)
	}
	if infos[0].Key != recent || infos[1].Key != old {
		t.Fatalf("listed %s then %s; want the recently written one first", infos[0].Key, infos[1].Key)
	}
	fi, err := os.Stat(e.lay.TranscriptPath(recent))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infos[0].ModifiedMs, fi.ModTime().UnixMilli(); got != want {
		t.Fatalf("the session being read is listed as modified at %d, want its file's %d", got, want)
	}
	if got := infos[1].ModifiedMs; got != then.UnixMilli() {
		t.Fatalf("the old session is listed as modified at %d, want %d", got, then.UnixMilli())
	}
	if cont, _, err := m.List(bg, ListOptions{Continue: true}); err != nil || len(cont) != 1 || cont[0].Key != recent {
		t.Fatalf("--continue picks %v (%v), want %s", cont, err, recent)
	}
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
	if err := m.Restore(bg, sub); !errdefs.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "subagents/agent-a1") {
		t.Fatalf("restore before any delete: %v, want not found naming the subagent", err)
	}
	if got := m.TrashedProjects(main.SessionID, sub.Subpath); len(got) != 0 {
		t.Fatalf("trashed projects before the delete: %v", got)
	}
	if _, err := m.Delete(bg, sub, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.lay.TranscriptPath(sub)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("subagent transcript after its delete: %v", err)
	}
	// The whole session is not in the trash: only its subagent is.
	if got := m.TrashedProjects(main.SessionID, ""); len(got) != 0 {
		t.Fatalf("the main session is reported in the trash of %v", got)
	}
	if got := m.TrashedProjects(main.SessionID, sub.Subpath); len(got) != 1 || got[0] != project {
		t.Fatalf("trashed projects of the subagent: %v, want [%s]", got, project)
	}
	if err := m.Restore(bg, sub); err != nil {
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
	// Deleted again, then written again: restore refuses to overwrite.
	if _, err := m.Delete(bg, sub, false); err != nil {
		t.Fatal(err)
	}
	mustAppendTo(t, m, sub, string(entry(uuid.NewString(), "n", "new")))
	if err := m.Restore(bg, sub); !errdefs.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("restore over a subagent written again: %v, want already exists", err)
	}
	// A whole session's restore still ignores lone subagents' entries.
	if err := m.Restore(bg, main); !errdefs.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore of the main session, never deleted: %v, want not found", err)
	}
}
