package journal

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

const crashPath = "/state/journal/s.wal"

// crashWorkload writes a journal the way the writer does: create, group
// commits of several batches (entries from empty to larger than a page,
// so writes cross page and sector boundaries), a compaction marker, more
// commits. It returns the batches in order and how many were
// acknowledged (Append returned), and whether the marker was.
func crashWorkload(c *fstest.CrashFS) (sent [][]string, acked int, marked bool) {
	j, err := Create(c, crashPath, testHeader(0), Options{})
	if err != nil {
		return nil, 0, false
	}
	defer j.Close()
	big := strings.Repeat("x", 5000)
	groups := [][][]string{
		{{"a1", "a2"}},
		{{big + "b"}, {""}, {"c1", "c2", "c3"}},
		{{}},
		{{"d" + big}},
	}
	commit := func(g [][]string) bool {
		sent = append(sent, g...)
		if _, err := j.Append(batchesOf(g...)); err != nil {
			return false
		}
		acked = len(sent)
		return true
	}
	for _, g := range groups[:2] {
		if !commit(g) {
			return sent, acked, false
		}
	}
	if j.MarkCompacted(Marker{Size: 42, Tail: 7}) != nil {
		return sent, acked, false
	}
	marked = true
	for _, g := range groups[2:] {
		if !commit(g) {
			return sent, acked, marked
		}
	}
	return sent, acked, marked
}

// TestCrashEveryOperation crashes the journal workload at every operation
// and, for each, checks many crashed disks (synced only; and random ones
// keeping part of the unsynced writes, torn at any byte, zero-filled, or
// written back out of order): Open never calls a crash corruption, and it
// returns every acknowledged batch, in order, plus at most batches that
// were sent after them.
func TestCrashEveryOperation(t *testing.T) {
	const seeds = 200
	setup := func(c *fstest.CrashFS) {
		if err := c.WriteFile("/state/journal/keep", nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	points, disks := fstest.EveryCrash(setup, seeds, func(c *fstest.CrashFS) func(*fstest.CrashFS, fstest.Event, int64) {
		sent, acked, marked := crashWorkload(c)
		return func(v *fstest.CrashFS, ev fstest.Event, seed int64) {
			j, rec, err := Open(v, crashPath, Options{})
			if errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("crash at %v, seed %d: a crash made the journal look corrupt: %v", ev, seed, err)
			}
			if err != nil {
				if acked > 0 || marked {
					t.Fatalf("crash at %v, seed %d: Open: %v, with %d batches acknowledged", ev, seed, err, acked)
				}
				return // the journal was never created
			}
			got := contents(t, j, rec.Batches)
			j.Close()
			if len(got) < acked || len(got) > len(sent) {
				t.Fatalf("crash at %v, seed %d: %d batches recovered, %d acknowledged, %d sent", ev, seed, len(got), acked, len(sent))
			}
			for k := range got {
				if !slices.Equal(got[k], sent[k]) && !(len(got[k]) == 0 && len(sent[k]) == 0) {
					t.Fatalf("crash at %v, seed %d: batch %d is %q, sent %q", ev, seed, k, got[k], sent[k])
				}
			}
			if marked && rec.Compacted == nil {
				t.Fatalf("crash at %v, seed %d: the acknowledged marker is gone", ev, seed)
			}
		}
	})
	if points < 10 {
		t.Fatalf("only %d crash points: the workload did not run", points)
	}
	t.Logf("crash points checked: %d operations, %d crashed disks (synced-only and %d random seeds each)", points, disks, seeds)
}

// TestFailedSyncIsCutBeforeAppending is the regression test of a journal
// left with a hole: a sync fails and the kernel marks the pages clean
// (Linux does), so the failed batch stays readable but never reaches the
// disk. The journal used to be reopened as it looked, failed batch
// included, and appended to after it; after a power loss the disk held
// zeros there followed by valid records, which Open rightly calls
// corruption, so every acknowledged batch of the journal was lost. Now
// the failed write is cut at once (Journal.write) and, should that fail
// too, on reopen (Options.DurableEnd).
func TestFailedSyncIsCutBeforeAppending(t *testing.T) {
	for _, deadCut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut at once fails: %v", deadCut), func(t *testing.T) {
			c := fstest.NewCrashFS()
			c.WriteFile("/state/journal/keep", nil, 0o600)
			ff := fstest.NewFaultFS(c)
			j, err := Create(ff, crashPath, testHeader(0), Options{})
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, j, []string{"acked 1"})
			ff.Inject(fstest.Fault{Op: fstest.OpSync, Err: syscall.EIO, LoseUnsynced: true})
			if deadCut {
				ff.Inject(fstest.Fault{Op: fstest.OpTruncate, Err: syscall.EIO})
			}
			if _, err := j.Append(batchesOf([]string{"failed"})); !errors.Is(err, syscall.EIO) {
				t.Fatalf("append with a failing sync: %v", err)
			}
			gen, end := j.DurableEnd()
			j.Close()
			ff.Clear()

			j, rec, err := Open(ff, crashPath, Options{DurableGeneration: gen, DurableEnd: end})
			if err != nil {
				t.Fatal(err)
			}
			if got := contents(t, j, rec.Batches); len(got) != 1 {
				t.Fatalf("reopened with %q: the failed batch must be cut", got)
			}
			mustAppend(t, j, []string{"acked 2"})
			j.Close()

			v := c.CrashClone(nil)
			j, rec, err = Open(v, crashPath, Options{})
			if err != nil {
				t.Fatalf("after a power loss: %v", err)
			}
			if got := contents(t, j, rec.Batches); !slices.Equal(flat(got), []string{"acked 1", "acked 2"}) {
				t.Fatalf("after a power loss: %q", got)
			}
			j.Close()
		})
	}
}

func flat(b [][]string) []string {
	var out []string
	for _, x := range b {
		out = append(out, x...)
	}
	return out
}

// Performance regression: Open allocated a 256 KiB read window whatever
// the journal's size, and a writer opens its journal every time it starts.
func TestOpenSmallJournalAllocatesLittle(t *testing.T) {
	c := fstest.NewCrashFS()
	c.WriteFile("/state/journal/keep", nil, 0o600) // the folder
	j, err := Create(c, crashPath, testHeader(0), Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, []string{"a", "b"})
	j.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const rounds = 20
	for i := 0; i < rounds; i++ {
		j, _, err := Open(c, crashPath, Options{})
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / rounds; per > 64<<10 {
		t.Fatalf("opening a %d-byte journal allocates %d KiB", j.Size(), per>>10)
	}
}
