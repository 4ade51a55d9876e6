package owner

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/internal/fsys"
)

// lockHolderPID finds the process holding the flock on the folder dir in
// /proc/locks, which the kernel keeps for every lock: the holder's own
// record may be stale (it is written after the lock is taken). 0 when it
// cannot be told.
func lockHolderPID(fsy fsys.FS, dir string) int {
	if !fsys.Real(fsy) {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters
		// have "->" after the number and hold nothing.
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || fl[1] == "->" || fl[1] != "FLOCK" || fl[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fl[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// holderOf finds what process pid recorded as the holder of its state
// folder: among its open folders, the one whose owner file names it.
func holderOf(fsy fsys.FS, pid int) (Holder, bool) {
	if !fsys.Real(fsy) {
		return Holder{}, false
	}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return Holder{}, false
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil || !filepath.IsAbs(target) {
			continue
		}
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			continue
		}
		if h, ok := readInfo(fsy, target); ok && h.PID == pid {
			return h, true
		}
	}
	return Holder{}, false
}
