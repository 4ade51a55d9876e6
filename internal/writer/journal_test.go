package writer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// After a failed journal sync (Linux marks the pages clean: readable, never
// written), the reopened writer must not take the failed batch for
// committed and append after it: a power loss would leave a hole followed
// by valid records, recovery would quarantine the journal as corrupt, and
// every acknowledged entry in it would be lost. The failed write is cut, at
// once or, if the disk refuses, by the next writer before it appends.
func TestJournalSyncFailureThenPowerLoss(t *testing.T) {
	for _, cutFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("immediate cut fails %v", cutFails), func(t *testing.T) {
			c := fstest.NewCrashFS()
			ff := fstest.NewFaultFS(c)
			k := fixedKey(1, "")
			m := newCrashManager(t, ff, nil)
			first := line(k, "00000000-0000-4000-8000-000000000001", "first")
			mustAppendTo(t, m, k, first)
			wal := inJournal
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

// inJournal says whether a path is one of the shared log's segments.
func inJournal(p string) bool { return strings.HasPrefix(p, crashLayout.JournalDir()+"/") }

// A refused first append of a new session leaves nothing behind (the
// session is not listed, nothing of it is replayed), and the next append
// works: descriptor exhaustion refuses such appends (e2e's
// TestHostileDescriptorExhaustion). The journal writes a new session's
// first stream with its first entries, so a failed write refuses both.
func TestRefusedFirstAppendLeavesNoJournal(t *testing.T) {
	k := fixedKey(1, "")
	for _, op := range []fstest.Op{fstest.OpWrite, fstest.OpSync} {
		c := fstest.NewCrashFS()
		ff := fstest.NewFaultFS(c)
		m := newCrashManager(t, ff, nil)
		ff.Inject(fstest.Fault{Op: op, Path: inJournal, Err: syscall.ENOSPC})
		first := line(k, "00000000-0000-4000-8000-000000000001", "first try")
		_, err := m.Append(bg, k, [][]byte{[]byte(first)})
		if len(ff.Fired()) == 0 || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%v: the append failed with %v (fired %v); want the journal's ENOSPC, which the server maps to ResourceExhausted", op, err, ff.Fired())
		}
		ff.Clear()
		if infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{}); err != nil || len(infos) != 0 {
			t.Fatalf("%v: listing after the refused append: %v %v; want no session", op, infos, err)
		}
		want := line(k, "00000000-0000-4000-8000-000000000002", "second try")
		mustAppendTo(t, m, k, want)
		abortManager(m)
		if got := recoverAndRead(t, c.CrashClone(nil), k); got != want+"\n" {
			t.Fatalf("%v: after a power loss the transcript is %q, want the acknowledged entry alone", op, got)
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
	for _, op := range []fstest.Op{fstest.OpWrite, fstest.OpSync} {
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
			// The write or sync of the stream that follows: it comes
			// after the file is known to hold every entry.
			ff.Inject(fstest.Fault{Op: op, Path: inJournal, Err: syscall.EIO})
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
