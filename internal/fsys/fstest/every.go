package fstest

import "math/rand"

// EveryCrash crashes a workload at each of its operations in turn: for
// i = 1, 2, ... it prepares a fresh CrashFS (setup may be nil), makes it
// crash at operation i, and runs the workload, which returns the check
// for what it had sent and acknowledged. The check then runs on the disks
// that crash could leave: the synced data only (seed -1), and seeds more
// keeping a random part of the unsynced writes (torn, zero-filled or out
// of order). It stops at the first i the workload no longer reaches, and
// returns the crash points and the disks checked.
func EveryCrash(setup func(*CrashFS), seeds int64, run func(c *CrashFS) (check func(v *CrashFS, ev Event, seed int64))) (points, disks int) {
	for i := int64(1); ; i++ {
		c := NewCrashFS()
		if setup != nil {
			setup(c)
		}
		c.CrashAt(i)
		check := run(c)
		crashed, ev := c.Crashed()
		if !crashed {
			return points, disks
		}
		points++
		for seed := int64(-1); seed < seeds; seed++ {
			var rng *rand.Rand
			if seed >= 0 {
				rng = rand.New(rand.NewSource(seed*1000 + i))
			}
			disks++
			check(c.CrashClone(rng), ev, seed)
		}
	}
}
