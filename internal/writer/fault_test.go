package writer

// Fault tests: every workload is run once per operation it makes, with the
// disk failing that operation (fstest.FaultFS over a CrashFS) in each of
// several ways. Then the fault goes away, and:
//   - every call that failed said why, with the right kind (a full disk is
//     errdefs.ErrNoSpace, anything else errdefs.ErrIO);
//   - an append whose journal write or sync failed was not acknowledged;
//   - every session works again: a new entry is taken and flushed, and the
//     transcripts hold every acknowledged entry exactly once;
//   - a power loss right after that loses nothing either: what the Manager
//     said was stored is on disk, not just in the page cache.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

type faultKind struct {
	name  string
	fault func(n int64) fstest.Fault
	kind  error // what a call failed by it must report
	reads bool  // count reads (Read, ReadAt, Stat, Lstat, ReadDir) as operations too
}

// faultKinds are the ways a disk fails. A failed sync loses the unsynced
// writes for good, as Linux does (the page stays readable, marked clean).
var faultKinds = []faultKind{
	// EIO at every operation, reads (Read, ReadAt, Stat, Lstat, ReadDir)
	// included: every write and sync is among them too.
	{"EIO, reads included", func(n int64) fstest.Fault {
		return fstest.Fault{Nth: n, Err: syscall.EIO, LoseUnsynced: true}
	}, errdefs.ErrIO, true},
	{"ENOSPC, short write", func(n int64) fstest.Fault {
		return fstest.Fault{Nth: n, Err: syscall.ENOSPC, Short: true}
	}, errdefs.ErrNoSpace, false},
	{"EROFS", func(n int64) fstest.Fault {
		return fstest.Fault{Nth: n, Err: syscall.EROFS}
	}, errdefs.ErrIO, false},
	{"dead disk from then on", func(n int64) fstest.Fault {
		return fstest.Fault{Nth: n, Err: syscall.EIO, Sticky: true, LoseUnsynced: true}
	}, errdefs.ErrIO, false},
}

type faultCounts struct{ points, absorbed int }

// faultEveryOp runs wl failing each of its operations in turn, with kind.
func faultEveryOp(t *testing.T, wl *workload, kind faultKind) faultCounts {
	var n faultCounts
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		if wl.setup != nil {
			wl.setup(c)
		}
		ff := fstest.NewFaultFS(c)
		ff.CountReads(kind.reads)
		w := newWorld(t, wl, c, ff)
		ff.Inject(kind.fault(i))
		wl.run(w)
		fired := ff.Fired()
		if len(fired) == 0 {
			closeQuietly(w.m)
			return n
		}
		n.points++
		probs, absorbed := w.checkCallErrors(kind)
		n.absorbed += absorbed
		ff.Clear()
		if len(probs) == 0 {
			probs = w.worksAgain()
		}
		if len(probs) == 0 {
			// One more entry each, left in the journal, then a kill and a
			// power loss: nothing acknowledged may be lost, whatever the
			// fault did to the journal before (a failed sync leaves pages
			// that look written but never reach the disk).
			for i, k := range wl.probe {
				if err := w.append(200+i, k, line(k, fmt.Sprintf("99999999-0000-4000-8000-1%011d", i), "journaled after the fault")); err != nil {
					probs = append(probs, fmt.Sprintf("%s does not work again: append: %v", k, err))
				}
			}
			w.stop()
			c.Crash()
			if len(probs) == 0 {
				probs = w.verify(c.CrashClone(nil), false)
			}
		} else {
			closeQuietly(w.m)
		}
		if len(probs) > 0 {
			t.Fatalf("%s: %s at %v:\n%s\n\ncalls: %s\n\ndisk:\n%s",
				wl.name, kind.name, fired[0], strings.Join(probs, "\n"), w.callLog(), c.Dump())
		}
	}
}

// checkCallErrors checks the errors the calls returned while the fault was
// armed: each of the fault's kind (or, for a writer that kept failing,
// unavailable), and an append whose journal write or sync failed never
// acknowledged. It also counts the faults no call reported: those the
// Manager absorbed (cleanup of a temp file, a compaction after the entries
// were journaled...), which the later checks prove harmless.
func (w *world) checkCallErrors(kind faultKind) (probs []string, absorbed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reported := map[int64]bool{} // faults some failed call saw
	for _, c := range w.calls {
		// Not found is right for a session whose every append failed, but
		// not as the answer to a failing disk.
		notFound := errors.Is(c.err, errdefs.ErrNotFound) && len(c.faults) == 0
		if c.err != nil && !strings.HasPrefix(c.what, "foreign") && !errors.Is(c.err, kind.kind) && !notFound {
			probs = append(probs, fmt.Sprintf("%s failed with %v, not of kind %v", c.what, c.err, kind.kind))
		}
		for _, ev := range c.faults {
			journal := inJournal(ev.Path) && strings.HasSuffix(ev.Path, ".wal") && (ev.Op == fstest.OpWrite || ev.Op == fstest.OpSync)
			if journal && c.err == nil && !w.wl.appendsCompact {
				probs = append(probs, fmt.Sprintf("%s was acknowledged although its journal %s failed", c.what, ev.Op))
			}
			if c.err != nil {
				reported[ev.N] = true
			}
		}
	}
	for _, ev := range w.ff.Fired() {
		if !reported[ev.N] {
			absorbed++
		}
	}
	return probs, absorbed
}

// worksAgain, once the fault is gone, retries what the workload needs
// finished, then appends a new entry to every probed session and flushes
// it; all of it must succeed and every transcript must be complete.
func (w *world) worksAgain() []string {
	var probs []string
	if w.wl.heal != nil {
		probs = append(probs, w.wl.heal(w)...)
	}
	// First an entry each that stays in the journal, and a power loss
	// right then (on a snapshot of the disk; the live Manager goes on):
	// a journal whose sync failed has pages that look written but never
	// reach the disk, and what is appended after them must still be
	// recoverable.
	for i, k := range w.wl.probe {
		l := line(k, fmt.Sprintf("99999999-0000-4000-8000-2%011d", i), "first entry after the fault")
		if err := w.append(300+i, k, l); err != nil {
			probs = append(probs, fmt.Sprintf("%s does not work again: append: %v", k, err))
		}
	}
	if len(probs) > 0 {
		return probs
	}
	if p := w.verify(w.c.KillClone().CrashClone(nil), false); len(p) > 0 {
		return append([]string{"power loss right after the first append after the fault:"}, p...)
	}
	for i, k := range w.wl.probe {
		l := line(k, fmt.Sprintf("99999999-0000-4000-8000-%012d", i), "probe after the fault")
		if err := w.append(100+i, k, l); err != nil {
			probs = append(probs, fmt.Sprintf("%s does not work again: append: %v", k, err))
			continue
		}
		if err := w.flush(k); err != nil {
			probs = append(probs, fmt.Sprintf("%s does not work again: flush: %v", k, err))
		}
	}
	if _, err := w.m.FlushAll(w.ctx); err != nil {
		probs = append(probs, fmt.Sprintf("flush of every session: %v", err))
	}
	if len(probs) > 0 {
		return probs
	}
	probs = append(probs, w.checkEntries(w.c, nil)...)
	if w.wl.check != nil {
		probs = append(probs, w.wl.check(w, w.c)...)
	}
	return probs
}

// TestFaultEveryOperation is the exhaustive fault-injection test of every
// workload.
func TestFaultEveryOperation(t *testing.T) {
	t.Parallel() // with the other exhaustive tests, so that each one's slowest workload does not run alone
	var total faultCounts
	var mu sync.Mutex
	t.Run("workloads", func(t *testing.T) {
		for _, wl := range allWorkloads() {
			t.Run(wl.name, func(t *testing.T) {
				t.Parallel() // independent disks and Managers; CPU-bound
				var sub faultCounts
				for _, kind := range faultKinds {
					n := faultEveryOp(t, wl, kind)
					sub.points += n.points
					sub.absorbed += n.absorbed
					t.Logf("%s: %d fault points (%d absorbed without an error)", kind.name, n.points, n.absorbed)
				}
				summary(t, "fault points checked: %d (%d kinds; %d absorbed harmlessly)", sub.points, len(faultKinds), sub.absorbed)
				mu.Lock()
				total.points += sub.points
				total.absorbed += sub.absorbed
				mu.Unlock()
			})
		}
	})
	summary(t, "fault points checked: %d (%d kinds of fault at every operation; %d absorbed harmlessly)", total.points, len(faultKinds), total.absorbed)
}

// TestFaultDuringRecovery fails each operation (reads included) of a
// recovery in turn: a
// power loss at each persistence point of a workload, then a Recover on a
// disk that fails one operation. The failing Recover may give up on a
// session (and must say so with the disk's error), but once the disk is
// healthy a second Recover in the same process recovers everything, and
// a power loss after that loses nothing.
func TestFaultDuringRecovery(t *testing.T) {
	t.Parallel() // with the other exhaustive tests, so that each one's slowest workload does not run alone
	var total, absorbed int
	var mu sync.Mutex
	t.Run("workloads", func(t *testing.T) {
		// The delete workload from its delete on: what comes before it is
		// the compaction workload's ground.
		intents := func(ev fstest.Event) bool { return strings.Contains(ev.Path, "/intents") }
		for _, c := range []struct {
			wl   *workload
			from func(fstest.Event) bool
		}{{wlCompaction(), nil}, {wlDeleteRestore(), intents}} {
			wl := c.wl
			t.Run(wl.name, func(t *testing.T) {
				t.Parallel()
				n, a := faultDuringRecovery(t, wl, c.from)
				summary(t, "recovery fault points checked: %d (%d absorbed harmlessly)", n, a)
				mu.Lock()
				total += n
				absorbed += a
				mu.Unlock()
			})
		}
	})
	summary(t, "recovery fault points checked: %d (%d absorbed harmlessly)", total, absorbed)
}

func faultDuringRecovery(t *testing.T, wl *workload, from func(fstest.Event) bool) (points, absorbed int) {
	ref := fstest.NewCrashFS()
	if wl.setup != nil {
		wl.setup(ref)
	}
	base := ref.Ops()
	outer := persistencePointsFrom(ref, func(c *fstest.CrashFS) {
		w := newWorld(t, wl, c, nil)
		wl.run(w)
		w.stop()
	}, from)
	for _, i := range outer {
		c, w := runToCrash(t, wl, base+i)
		_, ev := c.Crashed()
		left := c.CrashClone(nil)
		for j := int64(1); ; j++ {
			d := left.KillClone()
			ff := fstest.NewFaultFS(d)
			ff.CountReads(true) // every operation, reads included
			ff.Inject(fstest.Fault{Nth: j, Err: syscall.EIO, LoseUnsynced: true})
			// Opening the manager opens the journal, which is
			// recovery's first part: a fault there fails New.
			var rep RecoverReport
			m, err := New(crashConfig(ff, wl))
			if err == nil {
				rep, err = m.Recover(w.ctx)
			}
			fired := ff.Fired()
			if len(fired) == 0 {
				if m == nil {
					t.Fatalf("New failed without a fault: %v", err)
				}
				closeQuietly(m)
				break
			}
			points++
			var probs []string
			if err != nil && !errors.Is(err, errdefs.ErrIO) {
				probs = append(probs, fmt.Sprintf("Recover failed with %v, not an i/o error", err))
			}
			for _, f := range rep.Failed {
				if !errors.Is(f, errdefs.ErrIO) {
					probs = append(probs, fmt.Sprintf("Recover gave up on a session with %v, not an i/o error", f))
				}
			}
			if err == nil && len(rep.Failed) == 0 {
				absorbed++
			}
			ff.Clear()
			if m == nil {
				if m, err = New(crashConfig(ff, wl)); err != nil {
					t.Fatalf("New on a healthy disk: %v", err)
				}
			}
			rep, err = m.Recover(w.ctx)
			if err != nil || len(rep.Failed) > 0 {
				probs = append(probs, fmt.Sprintf("second Recover on a healthy disk: %v %v", err, rep.Failed))
			}
			abortManager(m)
			d.Crash()
			if len(probs) == 0 {
				probs = w.verify(d.CrashClone(nil), true)
			}
			if len(probs) > 0 {
				t.Fatalf("%s: power loss at %v, then recovery with EIO at %v:\n%s\n\ncalls: %s\n\ndisk before the recovery:\n%s",
					wl.name, ev, fired[0], strings.Join(probs, "\n"), w.callLog(), left.Dump())
			}
		}
	}
	return points, absorbed
}
