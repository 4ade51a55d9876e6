package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/client"
)

// daemonProc is a sessiond the tool started itself.
type daemonProc struct {
	cmd    *exec.Cmd
	socket string
	dir    string
	exited chan struct{}
	err    error
}

// startDaemon runs bin on dir (socket, root, state and log inside it) and
// waits until it answers Status.
func startDaemon(ctx context.Context, bin, dir string, extra []string) (*daemonProc, error) {
	p, _, err := launchDaemon(ctx, bin, dir, extra, 30*time.Second)
	return p, err
}

// launchDaemon is startDaemon waiting up to ready for the first answered
// Status (a large recovery runs before it), and returning the time from
// exec to that answer. Flags in extra come after the defaults, so they
// win (--log-level info, say).
func launchDaemon(ctx context.Context, bin, dir string, extra []string, ready time.Duration) (*daemonProc, time.Duration, error) {
	p := &daemonProc{socket: filepath.Join(dir, "sessiond.sock"), dir: dir, exited: make(chan struct{})}
	log, err := os.OpenFile(filepath.Join(dir, "sessiond.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	args := append([]string{
		"--socket", p.socket,
		"--root", filepath.Join(dir, "root"),
		"--state-dir", filepath.Join(dir, "state"),
		"--log-format", "json", "--log-level", "warn",
	}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// The daemon dies with the tool, so an interrupted run leaves none.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, 0, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, ready); err != nil {
		p.cmd.Process.Kill()
		<-p.exited
		return nil, 0, fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, "sessiond.log"))
	}
	return p, time.Since(start), nil
}

func (p *daemonProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("sessiond exited while starting: %v", p.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sessiond not answering on %s after %v", p.socket, timeout)
		}
		if c, err := net.DialTimeout("unix", p.socket, time.Second); err == nil {
			c.Close()
			cl, err := client.Dial(p.socket)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = cl.Status(cctx)
			cancel()
			cl.Close()
			if err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit (SIGKILL after within).
func (p *daemonProc) stop(within time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(within):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("sessiond did not exit within %v of SIGTERM; killed", within)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
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
