package mirror

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/internal/pgtest"
)

// pinProcess restricts every thread of process pid to set (threads made
// later inherit their maker's set, children their parent's).
func pinProcess(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pin thread %d of %d: %w", tid, pid, err)
		}
	}
	return nil
}

func cpuSet(cpus ...int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// pinnedPair runs fn with this process (so the sessionds it starts, and
// the load) on CPU 0 and PostgreSQL's processes on CPU 1, then gives them
// back the CPUs this process had.
func pinnedPair(pg *pgtest.Server, fn func() (mirrorRun, error)) (mirrorRun, error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return mirrorRun{}, err
	}
	if err := pinAll(pg, cpuSet(1), cpuSet(0)); err != nil {
		pinAll(pg, &orig, &orig)
		return mirrorRun{}, err
	}
	out, err := fn()
	if uerr := pinAll(pg, &orig, &orig); uerr != nil && err == nil {
		err = uerr
	}
	return out, err
}

func pinAll(pg *pgtest.Server, pgSet, selfSet *unix.CPUSet) error {
	for _, pid := range pg.Pids() {
		if err := pinProcess(pid, pgSet); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return pinProcess(os.Getpid(), selfSet)
}
