package harness

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

// Daemon is a sessiond the tool started itself.
type Daemon struct {
	Harness *testharness.Daemon
	Cmd     *exec.Cmd
	Socket  string
	Dir     string
	Exited  <-chan struct{}
}

// Pid is the daemon's process id.
func (p *Daemon) Pid() int { return p.Cmd.Process.Pid }

// StartDaemon runs bin on dir (socket, root, state and log inside it) and
// waits until it serves.
func StartDaemon(ctx context.Context, bin, dir string, extra []string) (*Daemon, error) {
	p, _, err := LaunchDaemon(ctx, bin, dir, extra, 30*time.Second)
	return p, err
}

// LaunchDaemon is startDaemon waiting up to ready until it serves (a large
// recovery runs before), and returning the time from exec to then. Flags
// in extra come after the defaults, so they win (--log-level info, say).
func LaunchDaemon(ctx context.Context, bin, dir string, extra []string, ready time.Duration) (*Daemon, time.Duration, error) {
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
	return &Daemon{Harness: d, Cmd: d.Cmd(), Socket: d.Socket(), Dir: dir, Exited: d.Exited()}, took, nil
}

// Stop sends SIGTERM and waits for the exit (SIGKILL after within).
func (p *Daemon) Stop(within time.Duration) error {
	code, _, err := p.Harness.Stop(syscall.SIGTERM, within)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if code != 0 {
		return fmt.Errorf("sessiond exited with status %d (log: %s)", code, filepath.Join(p.Dir, "sessiond.log"))
	}
	return nil
}

// clockTicks is USER_HZ, which Linux fixes at 100 on every architecture Go
// supports.
const clockTicks = 100

// ProcCPU returns the user+system CPU time pid has used, from
// /proc/<pid>/stat (utime and stime, fields 14 and 15).
func ProcCPU(pid int) (time.Duration, error) {
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

// ProcHWM returns pid's peak resident set size (VmHWM) in bytes.
func ProcHWM(pid int) (int64, error) {
	_, hwm, err := ProcMem(pid)
	return hwm, err
}

// ProcMem returns pid's current and peak resident set sizes (VmRSS and
// VmHWM) in bytes.
func ProcMem(pid int) (rss, hwm int64, err error) {
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

// ResetHWM resets pid's VmHWM to its current RSS (Linux >= 4.0), so the
// peak measured is that of one run. Only done on a daemon the tool started.
func ResetHWM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// ProcIO is a process's I/O accounting (/proc/<pid>/io).
type ProcIO struct {
	// wchar: bytes passed to write-like syscalls (write, pwrite,
	// copy_file_range..., sockets included); write_bytes: bytes of page
	// cache the process dirtied for storage; cancelled: of those, bytes
	// dropped before write-back (a file truncated or deleted).
	WChar, WriteBytes, Cancelled uint64
}

func ReadProcIO(pid int) (ProcIO, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return ProcIO{}, err
	}
	var r ProcIO
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
			r.WChar = n
		case "write_bytes":
			r.WriteBytes = n
		case "cancelled_write_bytes":
			r.Cancelled = n
		default:
			continue
		}
		seen++
	}
	if seen != 3 {
		return ProcIO{}, fmt.Errorf("/proc/%d/io: unexpected format", pid)
	}
	return r, nil
}

// CountFDs counts the open file descriptors of pid (sockets, files,
// epoll and the rest: every entry of /proc/<pid>/fd).
func CountFDs(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/fd: %w", pid, err)
	}
	return len(names), nil
}

// FDUsage counts the open file descriptors of pid, and how many of them
// are files already deleted (their /proc/<pid>/fd link ends in
// " (deleted)"): space the daemon keeps from the disk by holding them.
func FDUsage(pid int) (total, deleted int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	f, err := os.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", dir, err)
	}
	for _, n := range names {
		// A descriptor closed between the listing and the readlink is
		// counted, as the listing saw it, but cannot be a deleted file.
		if target, err := os.Readlink(dir + "/" + n); err == nil && strings.HasSuffix(target, " (deleted)") {
			deleted++
		}
	}
	return len(names), deleted, nil
}

// FDSampler counts pid's descriptors, and the deleted files among them,
// every period until stopped.
type FDSampler struct {
	quit       chan struct{}
	done       chan struct{}
	max        int
	maxDeleted int
	samples    int
	err        error
}

// SampleFDs starts counting pid's descriptors every period.
func SampleFDs(pid int, period time.Duration) *FDSampler {
	s := &FDSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			n, deleted, err := FDUsage(pid)
			if err != nil {
				s.err = err
				return
			}
			s.max, s.maxDeleted, s.samples = max(s.max, n), max(s.maxDeleted, deleted), s.samples+1
			select {
			case <-s.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Finish stops the sampler and returns the most descriptors seen.
func (s *FDSampler) Finish() (int, int, error) {
	close(s.quit)
	<-s.done
	return s.max, s.samples, s.err
}

// MaxDeleted is the most deleted files seen open at once, once Finish has
// returned.
func (s *FDSampler) MaxDeleted() int { return s.maxDeleted }
