package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/testharness"
)

// daemonProc is a sessiond the tool started itself.
type daemonProc struct {
	d      *testharness.Daemon
	cmd    *exec.Cmd
	socket string
	dir    string
	exited <-chan struct{}
}

// startDaemon runs bin on dir (socket, root, state and log inside it) and
// waits until it serves.
func startDaemon(ctx context.Context, bin, dir string, extra []string) (*daemonProc, error) {
	p, _, err := launchDaemon(ctx, bin, dir, extra, 30*time.Second)
	return p, err
}

// launchDaemon is startDaemon waiting up to ready until it serves (a large
// recovery runs before), and returning the time from exec to then. Flags
// in extra come after the defaults, so they win (--log-level info, say).
func launchDaemon(ctx context.Context, bin, dir string, extra []string, ready time.Duration) (*daemonProc, time.Duration, error) {
	d, err := testharness.Start(testharness.Config{
		Sessiond: bin,
		Socket:   filepath.Join(dir, "sessiond.sock"),
		Root:     filepath.Join(dir, "root"),
		StateDir: filepath.Join(dir, "state"),
		Args:     append([]string{"--log-format", "json", "--log-level", "warn"}, extra...),
		LogPath:  filepath.Join(dir, "sessiond.log"),
	})
	if err != nil {
		return nil, 0, err
	}
	took, err := d.WaitServing(ctx, ready)
	if err != nil {
		d.Kill()
		return nil, 0, fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, "sessiond.log"))
	}
	return &daemonProc{d: d, cmd: d.Cmd(), socket: d.Socket(), dir: dir, exited: d.Exited()}, took, nil
}

// stop sends SIGTERM and waits for the exit (SIGKILL after within).
func (p *daemonProc) stop(within time.Duration) error {
	code, _, err := p.d.Stop(syscall.SIGTERM, within)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if code != 0 {
		return fmt.Errorf("sessiond exited with status %d (log: %s)", code, filepath.Join(p.dir, "sessiond.log"))
	}
	return nil
}

// clockTicks is USER_HZ, which Linux fixes at 100 on every architecture Go
// supports.
const clockTicks = 100

// procCPU returns the user+system CPU time pid has used, from
// /proc/<pid>/stat (utime and stime, fields 14 and 15).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procHWM returns pid's peak resident set size (VmHWM) in bytes.
func procHWM(pid int) (int64, error) {
	_, hwm, err := procMem(pid)
	return hwm, err
}

// procMem returns pid's current and peak resident set sizes (VmRSS and
// VmHWM) in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		var dst *int64
		var rest string
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			dst, rest = &rss, v
		} else if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			dst, rest = &hwm, v
		} else {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q", pid, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		*dst = kb << 10
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, hwm, nil
}

// resetHWM resets pid's VmHWM to its current RSS (Linux >= 4.0), so the
// peak measured is that of one run. Only done on a daemon the tool started.
func resetHWM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// procIO is a process's I/O accounting (/proc/<pid>/io).
type procIO struct {
	// wchar: bytes passed to write-like syscalls (write, pwrite,
	// copy_file_range..., sockets included); write_bytes: bytes of page
	// cache the process dirtied for storage; cancelled: of those, bytes
	// dropped before write-back (a file truncated or deleted).
	wchar, writeBytes, cancelled uint64
}

func readProcIO(pid int) (procIO, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return procIO{}, err
	}
	var r procIO
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "wchar":
			r.wchar = n
		case "write_bytes":
			r.writeBytes = n
		case "cancelled_write_bytes":
			r.cancelled = n
		default:
			continue
		}
		seen++
	}
	if seen != 3 {
		return procIO{}, fmt.Errorf("/proc/%d/io: unexpected format", pid)
	}
	return r, nil
}
