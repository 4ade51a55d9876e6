package writer

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

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
