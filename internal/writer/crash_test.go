package writer

// Crash tests: every workload is run once per operation it makes, with the
// disk losing power at that operation (fstest.CrashFS.CrashAt); the disk a
// power loss leaves is then recovered by a new Manager and checked (see
// world.verify), once as synced-only and once per random seed (part of the
// unsynced writes kept, torn anywhere).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/owner"
)

// randomSeeds is how many random crashes each crash point gets on top of
// the synced-only one.
func randomSeeds() int64 {
	if testing.Short() {
		return 2
	}
	return 5
}

type crashCounts struct{ points, synced, random int }

// crashEveryOp runs wl crashing at each of its operations in turn and
// verifies every disk left behind.
func crashEveryOp(t *testing.T, wl *workload) crashCounts {
	var n crashCounts
	for i := int64(1); ; i++ {
		c := fstest.NewCrashFS()
		if wl.setup != nil {
			wl.setup(c)
		}
		// The manager (and the journal it opens) first: crashes
		// of the journal's own start are wal's TestCrashDuringRecovery.
		w := newWorld(t, wl, c, nil)
		c.CrashAt(c.Ops() + i)
		wl.run(w)
		w.stop()
		crashed, ev := c.Crashed()
		if !crashed {
			// The workload made fewer than i operations: every point is
			// covered. It must have succeeded in full.
			for _, cl := range w.calls {
				if cl.err != nil {
					t.Fatalf("%s failed without a crash or fault: %v", cl.what, cl.err)
				}
			}
			if probs := w.verify(c.KillClone(), true); len(probs) > 0 {
				t.Fatalf("without a crash:\n%s", strings.Join(probs, "\n"))
			}
			return n
		}
		n.points++
		for seed := int64(-1); seed < randomSeeds(); seed++ {
			var v *fstest.CrashFS
			if seed < 0 {
				v = c.CrashClone(nil)
				n.synced++
			} else {
				v = c.CrashClone(seedRNG(seed))
				n.random++
			}
			if probs := w.verify(v, true); len(probs) > 0 {
				t.Fatalf("%s: power loss at %v, %s:\n%s\n\ncalls: %s\n\ndisk after the crash:\n%s",
					wl.name, ev, seedName(seed), strings.Join(probs, "\n"), w.callLog(), c.CrashClone(nil).Dump())
			}
		}
	}
}

func seedName(seed int64) string {
	if seed < 0 {
		return "synced data only"
	}
	return fmt.Sprintf("random crash seed %d", seed)
}

func (w *world) callLog() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	last, repeats := "", 0
	for _, c := range w.calls {
		s := fmt.Sprintf("%s: %v", c.what, c.err)
		if len(c.faults) > 0 {
			s += fmt.Sprintf(" (faults %v)", c.faults)
		}
		if s == last {
			repeats++
			continue
		}
		if repeats > 0 {
			fmt.Fprintf(&b, " (%d more times)", repeats)
		}
		fmt.Fprintf(&b, "\n  %s", s)
		last, repeats = s, 0
	}
	if repeats > 0 {
		fmt.Fprintf(&b, " (%d more times)", repeats)
	}
	return b.String()
}

// TestCrashEveryOperation is the exhaustive crash test of every workload.
func TestCrashEveryOperation(t *testing.T) {
	t.Parallel() // with the other exhaustive tests, so that each one's slowest workload does not run alone
	var total crashCounts
	var mu sync.Mutex
	t.Run("workloads", func(t *testing.T) {
		for _, wl := range allWorkloads() {
			t.Run(wl.name, func(t *testing.T) {
				t.Parallel() // independent disks and Managers; CPU-bound
				n := crashEveryOp(t, wl)
				summary(t, "crash points checked: %d operations, %d disks (synced-only) + %d (random, %d seeds)",
					n.points, n.synced, n.random, randomSeeds())
				mu.Lock()
				total.points += n.points
				total.synced += n.synced
				total.random += n.random
				mu.Unlock()
			})
		}
	})
	summary(t, "crash points checked: %d (synced-only) + %d (random, %d seeds), over %d operations",
		total.synced, total.random, randomSeeds(), total.points)
}

// persistencePoints runs fn on a copy of c with a trace and returns the
// crash points worth trying: the first operation, each operation right
// after one that changes what is durable (a sync, a folder sync, a rename
// or a link), and one past the end. Between two of them a power loss
// leaves the same durable state (CrashMonkey's observation), so the rest
// add little but time.
func persistencePoints(c *fstest.CrashFS, fn func(c *fstest.CrashFS)) []int64 {
	return persistencePointsFrom(c, fn, nil)
}

// persistencePointsFrom is persistencePoints from the first operation
// from selects on (from nil: from the start).
func persistencePointsFrom(c *fstest.CrashFS, fn func(c *fstest.CrashFS), from func(fstest.Event) bool) []int64 {
	probe := c.KillClone()
	var evs []fstest.Event
	probe.Trace(func(ev fstest.Event) { evs = append(evs, ev) })
	fn(probe)
	var points []int64
	started := from == nil
	if started {
		points = append(points, 1)
	}
	for i, ev := range evs {
		if !started && from(ev) {
			started = true
			points = append(points, int64(i+1))
		}
		if !started {
			continue
		}
		switch ev.Op {
		case fstest.OpSync, fstest.OpSyncDir, fstest.OpRename, fstest.OpLink:
			points = append(points, int64(i+2))
		}
	}
	return points
}

// recoverWith runs a Manager's Recover on c and stops it as a crash would.
func (w *world) recoverWith(c *fstest.CrashFS) {
	// Opening the journal is recovery's first part: a crash there fails New,
	// as it would end a starting daemon.
	m, err := New(crashConfig(c, w.wl))
	if err != nil {
		if crashed, _ := c.Crashed(); !crashed {
			w.t.Fatalf("New failed without a crash: %v", err)
		}
		return
	}
	m.Recover(w.ctx)
	ww := &world{m: m}
	ww.stop()
}

// crashDuringRecovery crashes wl at each persistence point, then crashes
// the recovery of what that left at each of its persistence points, and
// verifies what the second crash leaves. The first crash is either a power
// loss or a killed process (kill -9: the page cache survives, so the
// recovery sees writes that are not durable yet and must make what it
// relies on durable before acting on it). A recovery that completes is
// followed by a power loss too: what Recover returns must be on disk.
func crashDuringRecovery(t *testing.T, wl *workload) (n crashCounts) {
	ref := fstest.NewCrashFS()
	if wl.setup != nil {
		wl.setup(ref)
	}
	base := ref.Ops()
	outer := persistencePoints(ref, func(c *fstest.CrashFS) {
		w := newWorld(t, wl, c, nil)
		wl.run(w)
		w.stop()
	})
	seen := map[string]bool{}
	for _, i := range outer {
		c, w := runToCrash(t, wl, base+i)
		_, ev := c.Crashed()
		for _, first := range []string{"kill -9", "power loss"} {
			var left *fstest.CrashFS
			if first == "kill -9" {
				left = c.KillClone()
			} else {
				left = c.CrashClone(nil)
			}
			// Several first crashes leave the very same disk, with the same
			// entries acknowledged: recovering it again proves nothing new.
			key := fmt.Sprintf("%s|%d|%s", first, w.ackedTotal(), diskFingerprint(left))
			if seen[key] {
				continue
			}
			seen[key] = true
			for _, j := range persistencePoints(left, w.recoverWith) {
				d := left.KillClone()
				d.CrashAt(j)
				w.recoverWith(d)
				_, ev2 := d.Crashed()
				n.points++
				// A random crash too after a kill -9, where the recovery
				// ran on unsynced state; after a power loss everything it
				// started from was durable, so the synced state decides.
				seeds := int64(1)
				if first == "power loss" || testing.Short() {
					seeds = 0
				}
				for seed := int64(-1); seed < seeds; seed++ {
					var v *fstest.CrashFS
					if seed < 0 {
						v = d.CrashClone(nil)
						n.synced++
					} else {
						v = d.CrashClone(seedRNG(seed + j))
						n.random++
					}
					if probs := w.verify(v, false); len(probs) > 0 {
						t.Fatalf("%s: %s at %v, then a power loss during recovery at %v, %s:\n%s\n\ncalls: %s\n\ndisk before the recovery:\n%s",
							wl.name, first, ev, ev2, seedName(seed), strings.Join(probs, "\n"), w.callLog(), left.Dump())
					}
				}
			}
		}
	}
	return n
}

// diskFingerprint describes everything on c that a recovery can depend
// on: every path and its content, what a power loss would keep of it, and
// how much of it is pending.
func diskFingerprint(c *fstest.CrashFS) string {
	var b strings.Builder
	for _, v := range []*fstest.CrashFS{c, c.CrashClone(nil)} {
		for _, p := range v.Walk("/") {
			data, _ := v.ReadFile(p)
			fmt.Fprintf(&b, "%s %x\n", p, crc32.ChecksumIEEE(data))
		}
	}
	b.WriteString(c.Dump())
	return b.String()
}

func (w *world) ackedTotal() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ackN
}

// TestCrashDuringRecovery is workload (f): recovery itself crashes.
func TestCrashDuringRecovery(t *testing.T) {
	t.Parallel() // with the other exhaustive tests, so that each one's slowest workload does not run alone
	var total crashCounts
	var mu sync.Mutex
	t.Run("workloads", func(t *testing.T) {
		for _, wl := range []*workload{wlCompaction(), wlRepair(), wlFork(), wlDeleteRestore(), wlTrashMerge()} {
			t.Run(wl.name, func(t *testing.T) {
				t.Parallel()
				n := crashDuringRecovery(t, wl)
				summary(t, "recovery crash points checked: %d, %d disks (synced-only) + %d (random)", n.points, n.synced, n.random)
				mu.Lock()
				total.points += n.points
				total.synced += n.synced
				total.random += n.random
				mu.Unlock()
			})
		}
	})
	summary(t, "recovery crash points checked: %d (synced-only) + %d (random), over %d crashes of a recovery", total.synced, total.random, total.points)
}

// runToCrash runs wl on a fresh disk that crashes at operation op, and
// stops its manager as a killed process would.
func runToCrash(t *testing.T, wl *workload, op int64) (*fstest.CrashFS, *world) {
	c := fstest.NewCrashFS()
	if wl.setup != nil {
		wl.setup(c)
	}
	w := newWorld(t, wl, c, nil)
	// Points inside New (the journal's start) crash at the first operation
	// after it: wal's TestCrashDuringRecovery covers the journal's start.
	c.CrashAt(max(op, c.Ops()+1))
	wl.run(w)
	w.stop()
	return c, w
}

// intruderFS plays a second sessiond started beside the first: before each
// of the first one's operations (once it holds the folders), a second
// Manager is opened on the same disk. Every such start must be refused
// with owner.ErrOwned, having done nothing but take the lock and read the
// holder's record, and the first one must not notice.
type intruderFS struct {
	*fstest.HookFS
	c  *fstest.CrashFS
	t  testing.TB
	wl *workload

	mu sync.Mutex
	// open is set while the first Manager is open (New returned, Close
	// not called): it must hold the folders all that time.
	open     bool
	starts   int
	problems []string
}

func (f *intruderFS) setOpen(on bool) {
	f.mu.Lock()
	f.open = on
	f.mu.Unlock()
}

func (f *intruderFS) intrude(before, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.c.LockHeld(crashLayout.StateDir) {
		if f.open || strings.HasPrefix(name, crashLayout.StateDir+"/") {
			f.problems = append(f.problems, fmt.Sprintf("%s while the state folder is not held", before))
		}
		return // the first one is not started yet, or has stopped
	}
	f.starts++
	probe := fstest.NewFaultFS(f.c)
	probe.CountReads(true)
	var ops []string
	probe.Trace(func(ev fstest.Event) { ops = append(ops, ev.Op.String()+" "+ev.Path) })
	m, err := New(crashConfig(probe, f.wl))
	if err == nil {
		closeQuietly(m)
		f.problems = append(f.problems, fmt.Sprintf("before %s: a second Manager opened the same folders", before))
		return
	}
	if !errors.Is(err, owner.ErrOwned) {
		f.problems = append(f.problems, fmt.Sprintf("before %s: the second Manager failed with %v, not ErrOwned", before, err))
	}
	record := path.Join(crashLayout.StateDir, owner.InfoName)
	for _, op := range ops {
		if op != "lock "+crashLayout.StateDir && op != "open "+record && op != "read "+record {
			f.problems = append(f.problems, fmt.Sprintf("before %s: the refused Manager did %s", before, op))
		}
	}
}

// newIntruderFS intrudes before each operation of the filesystem c (an
// open file's operations are the first Manager's alone: a second one
// cannot reach them), except the locks.
func newIntruderFS(c *fstest.CrashFS, t testing.TB, wl *workload) *intruderFS {
	f := &intruderFS{c: c, t: t, wl: wl}
	f.HookFS = fstest.NewHookFS(c, fstest.Hooks{Before: func(call fstest.Call) error {
		if call.File == nil && call.Name != "lock" {
			f.intrude(call.Name+" "+call.Path, call.Path)
		}
		return nil
	}})
	return f
}

// TestSecondProcessAtEveryOperation starts a second Manager before every
// operation of each workload's commit path, and of the recovery of what
// a kill -9 in the middle of it left: each is refused without touching
// anything, and the first one's disk then holds every acknowledged entry
// once, as the crash tests check it.
func TestSecondProcessAtEveryOperation(t *testing.T) {
	t.Parallel()
	for _, wl := range allWorkloads() {
		t.Run(wl.name, func(t *testing.T) {
			t.Parallel()
			c := fstest.NewCrashFS()
			if wl.setup != nil {
				wl.setup(c)
			}
			in := newIntruderFS(c, t, wl)
			w := &world{t: t, wl: wl, c: c, fs: in, ctx: context.Background(), flags: map[string]bool{}, facts: map[string]int{}}
			w.m = newCrashManager(t, in, wl)
			in.setOpen(true)
			wl.run(w)
			half := in.starts / 2
			in.setOpen(false)
			w.stop()
			if in.starts == 0 || len(in.problems) > 0 {
				t.Fatalf("commit path: %d second starts:\n%s", in.starts, strings.Join(in.problems, "\n"))
			}
			if probs := w.verify(c.KillClone(), true); len(probs) > 0 {
				t.Fatalf("after the commit path with second starts:\n%s", strings.Join(probs, "\n"))
			}

			// A kill -9 half way through, then the recovery with a second
			// start before each of its operations.
			c2 := fstest.NewCrashFS()
			if wl.setup != nil {
				wl.setup(c2)
			}
			w2 := newWorld(t, wl, c2, nil)
			killAt := c2.Ops() + int64(half)
			c2.CrashAt(killAt) // stops the workload there; the disk is kept whole below
			wl.run(w2)
			w2.stop()
			d := c2.KillClone()
			in2 := newIntruderFS(d, t, wl)
			m, err := New(crashConfig(in2, wl))
			if err != nil {
				t.Fatalf("recovery's New: %v", err)
			}
			in2.setOpen(true)
			if _, err := m.Recover(w2.ctx); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			in2.setOpen(false)
			closeQuietly(m)
			if in2.starts == 0 || len(in2.problems) > 0 {
				t.Fatalf("recovery: %d second starts:\n%s", in2.starts, strings.Join(in2.problems, "\n"))
			}
			if probs := w2.verify(d.KillClone(), true); len(probs) > 0 {
				t.Fatalf("after a recovery with second starts:\n%s", strings.Join(probs, "\n"))
			}
			summary(t, "second starts refused: %d on the commit path, %d during recovery", in.starts, in2.starts)
		})
	}
}

// TestLogDamageNeverSilent: each workload's log, left by a kill, is then
// damaged outside sessiond, every segment in turn: cut to half, deleted,
// a byte flipped in its middle, a byte of its last entry flipped. A new
// Manager either refuses to start (journal.ErrLost, loud) or, when the damage took nothing acknowledged,
// starts with every acknowledged entry there once: never a silent loss.
func TestLogDamageNeverSilent(t *testing.T) {
	t.Parallel()
	for _, wl := range allWorkloads() {
		t.Run(wl.name, func(t *testing.T) {
			t.Parallel()
			c := fstest.NewCrashFS()
			if wl.setup != nil {
				wl.setup(c)
			}
			w := newWorld(t, wl, c, nil)
			wl.run(w)
			w.stop()
			base := c.KillClone()
			var segs []string
			for _, p := range base.Walk(crashLayout.JournalDir()) {
				if strings.HasSuffix(p, ".wal") {
					segs = append(segs, p)
				}
			}
			if len(segs) == 0 {
				t.Fatal("no journal segment")
			}
			refused := 0
			for _, seg := range segs {
				for _, dmg := range []struct {
					name string
					do   func(v *fstest.CrashFS) error
				}{
					{"cut to half", func(v *fstest.CrashFS) error {
						b, err := v.ReadFile(seg)
						if err != nil {
							return err
						}
						return v.WriteFile(seg, b[:len(b)/2], 0o600)
					}},
					{"deleted", func(v *fstest.CrashFS) error { return v.Remove(seg) }},
					{"a byte flipped", func(v *fstest.CrashFS) error {
						b, err := v.ReadFile(seg)
						if err != nil {
							return err
						}
						b[len(b)/2] ^= 0x20
						return v.WriteFile(seg, b, 0o600)
					}},
					{"a byte of an entry flipped", func(v *fstest.CrashFS) error {
						// The middle may fall in a pad (a journal write
						// padded to its block's end), which holds no
						// record: this byte is surely an entry's.
						b, err := v.ReadFile(seg)
						if err != nil {
							return err
						}
						i := bytes.LastIndex(b, []byte(`"type"`))
						if i < 0 {
							return nil
						}
						b[i+1] ^= 0x20
						return v.WriteFile(seg, b, 0o600)
					}},
				} {
					v := base.KillClone()
					if err := dmg.do(v); err != nil {
						t.Fatal(err)
					}
					m, err := New(crashConfig(v, wl))
					if err != nil {
						if !errors.Is(err, journal.ErrLost) {
							t.Fatalf("%s %s: New failed with %v, not journal.ErrLost", seg, dmg.name, err)
						}
						refused++
						continue
					}
					closeQuietly(m)
					// Damage, unlike a crash, may leave a segment copied
					// aside as corrupt, and reported as damaged by the
					// start (loud) when what it held was no acknowledged
					// entry (a marker, say: where the flipped byte lands
					// depends on how the commits were grouped): that is
					// what it is. Every entry must still be there once.
					probs := slices.DeleteFunc(w.verify(v, false), func(p string) bool {
						return strings.HasPrefix(p, "a crash made a journal look corrupt: "+seg+".corrupt-") ||
							strings.HasPrefix(p, "Recover failed a session: journal segment "+seg+" is damaged from byte offset ")
					})
					if len(probs) > 0 {
						t.Fatalf("%s %s: started without a word, and:\n%s", seg, dmg.name, strings.Join(probs, "\n"))
					}
				}
			}
			if refused == 0 {
				t.Fatal("no damage was refused: the check does not run")
			}
			summary(t, "damaged logs: %d of %d refused, the rest lost nothing", refused, 4*len(segs))
		})
	}
}
