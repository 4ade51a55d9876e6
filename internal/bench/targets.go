package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/daemon"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer"
)

// Targets: what the clients append to.
const (
	TargetNaive   = "naive"   // (a) O_APPEND write + fsync per entry, one file per client
	TargetNoSync  = "nosync"  // (b) O_APPEND write, no fsync (what agents do today)
	TargetCeiling = "ceiling" // (c) the shared log (internal/journal) in-process, its committer, no gRPC
	TargetDaemon  = "daemon"  // sessiond over its socket
	TargetInProc  = "inproc"  // internal/writer in-process (sessiond without gRPC), for profiling
	// TargetInProcDaemon is internal/daemon.Run in-process, over a socket
	// and gRPC like the real one, for profiling the whole path.
	TargetInProcDaemon = "inproc-daemon"
)

// acc is what was acknowledged to one client or in one session.
type acc struct {
	entries, bytes uint64 // bytes include each line's newline
}

// tally is every acknowledged entry of a run, warm-up included.
type tally struct {
	perClient  []acc
	perSession []acc
}

// counters are a target's own counters, read before and after the
// measurement.
type counters struct {
	has                     bool // syncs/entries/appends are meaningful
	syncs, entries, appends uint64
	cpu                     time.Duration
	cpuOf                   string
	cpuOK                   bool
	pid                     int // the daemon's, 0 when in-process
}

// driver is one target.
type driver interface {
	// open prepares files or connections for w.
	open(ctx context.Context, w *workload) error
	// append stores line for client c in session s and returns once the
	// target acknowledges it.
	append(ctx context.Context, c, s int, line []byte) error
	counters(ctx context.Context) (counters, error)
	// settle makes the target put what it buffers in its final place
	// (sessiond: flush the run's sessions into their canonical files).
	settle(ctx context.Context) error
	// verify compares what is on disk with what was acknowledged.
	verify(ctx context.Context, t *tally) error
	close(ctx context.Context) error
}

// batchDriver is a driver that can also store several lines of one session
// in one call (--batch: one Append carrying all of them, atomically).
type batchDriver interface {
	appendBatch(ctx context.Context, c, s int, lines [][]byte) error
}

func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

func selfCounters() counters {
	cpu, ok := selfCPU()
	return counters{cpu: cpu, cpuOK: ok, cpuOf: "bench process (load generator included)"}
}

// ---- (a) and (b): a file per client, written with O_APPEND ----

type fileDriver struct {
	dir   string
	sync  bool
	files []*os.File
	sizes []int64 // bytes written per client (for verify)
}

func (d *fileDriver) open(_ context.Context, w *workload) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	d.files = make([]*os.File, w.clients)
	for i := range d.files {
		f, err := os.OpenFile(filepath.Join(d.dir, fmt.Sprintf("client-%04d.jsonl", i)), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		d.files[i] = f
	}
	return nil
}

func (d *fileDriver) append(_ context.Context, c, _ int, line []byte) error {
	f := d.files[c]
	// One write of the line and its newline, as an agent appending a
	// line does (the caller's buffer has room: see runner).
	if _, err := f.Write(line[:len(line)+1]); err != nil {
		return err
	}
	if d.sync {
		return f.Sync() // fsync(2)
	}
	return nil
}

func (d *fileDriver) counters(context.Context) (counters, error) { return selfCounters(), nil }
func (d *fileDriver) settle(context.Context) error               { return nil }

func (d *fileDriver) verify(_ context.Context, t *tally) error {
	for i, f := range d.files {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if uint64(fi.Size()) != t.perClient[i].bytes {
			return fmt.Errorf("%s is %d bytes, %d acknowledged", f.Name(), fi.Size(), t.perClient[i].bytes)
		}
		n, err := countLines(f.Name())
		if err != nil {
			return err
		}
		if n.entries != t.perClient[i].entries {
			return fmt.Errorf("%s holds %d lines, %d acknowledged", f.Name(), n.entries, t.perClient[i].entries)
		}
	}
	return nil
}

func (d *fileDriver) close(context.Context) error {
	var errs []error
	for _, f := range d.files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// ---- sessiond over its socket ----

type daemonDriver struct {
	socket   string
	resetHWM bool // the tool started the daemon: reset its peak RSS per run
	root     string
	pid      int
	w        *workload
	conns    []*client.Client
	maxConns int
	unary    bool // one unary Append per call instead of the client's AppendStream streams
	purge    bool // delete the run's sessions (for good) when done
	hwm      int64
	hwmOK    bool
}

func (d *daemonDriver) open(ctx context.Context, w *workload) error {
	d.w = w
	n := w.clients
	if d.maxConns > 0 && n > d.maxConns {
		n = d.maxConns
	}
	opts := []client.Option{client.WithRetry(1, 0)}
	if d.unary {
		opts = append(opts, client.WithUnaryAppend())
	}
	for range n {
		c, err := client.Dial(d.socket, opts...)
		if err != nil {
			return err
		}
		d.conns = append(d.conns, c)
	}
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return fmt.Errorf("sessiond at %s: %w", d.socket, err)
	}
	d.root, d.pid = st.GetRoot(), int(st.GetPid())
	return nil
}

func (d *daemonDriver) session(s int) client.Session {
	return client.Session{ProjectKey: d.w.projectKey, ID: d.w.sessionIDs[s]}
}

func (d *daemonDriver) append(ctx context.Context, c, s int, line []byte) error {
	_, err := d.conns[c%len(d.conns)].Append(ctx, d.session(s), line)
	return err
}

func (d *daemonDriver) appendBatch(ctx context.Context, c, s int, lines [][]byte) error {
	_, err := d.conns[c%len(d.conns)].Append(ctx, d.session(s), lines...)
	return err
}

func (d *daemonDriver) counters(ctx context.Context) (counters, error) {
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return counters{}, err
	}
	c := counters{has: true, syncs: st.GetJournalSyncs(), entries: st.GetEntriesStored(), appends: st.GetAppends(),
		pid: int(st.GetPid()), cpuOf: fmt.Sprintf("sessiond pid %d", st.GetPid())}
	if cpu, err := procCPU(c.pid); err == nil {
		c.cpu, c.cpuOK = cpu, true
	}
	if hwm, err := procHWM(c.pid); err == nil {
		d.hwm, d.hwmOK = hwm, true
	}
	return c, nil
}

func (d *daemonDriver) settle(ctx context.Context) error {
	return forSessions(ctx, len(d.w.sessionIDs), func(s int) error {
		_, err := d.conns[s%len(d.conns)].Flush(ctx, d.session(s))
		return err
	})
}

func (d *daemonDriver) verify(_ context.Context, t *tally) error {
	return verifyCanonical(layout.Layout{Root: d.root}, d.w, t)
}

func (d *daemonDriver) close(ctx context.Context) error {
	var errs []error
	if d.purge && len(d.conns) > 0 {
		errs = append(errs, forSessions(ctx, len(d.w.sessionIDs), func(s int) error {
			_, err := d.conns[s%len(d.conns)].Delete(ctx, d.session(s), true)
			return err
		}))
	}
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// forSessions runs fn for sessions 0..n-1, eight at a time.
func forSessions(ctx context.Context, n int, fn func(s int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 8)
	for s := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(s); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ---- internal/writer in-process: sessiond minus gRPC and the socket ----

type inprocDriver struct {
	dir string
	m   *writer.Manager
	l   layout.Layout
	w   *workload
}

func (d *inprocDriver) open(ctx context.Context, w *workload) error {
	d.w = w
	d.l = layout.Layout{Root: filepath.Join(d.dir, "root"), StateDir: filepath.Join(d.dir, "state")}
	if err := os.MkdirAll(d.l.StateDir, 0o700); err != nil {
		return err
	}
	m, err := writer.New(writer.Config{Layout: d.l})
	if err != nil {
		return err
	}
	d.m = m
	_, err = m.Recover(ctx)
	return err
}

func (d *inprocDriver) key(s int) layout.Key {
	return layout.Key{ProjectKey: d.w.projectKey, SessionID: d.w.sessionIDs[s]}
}

func (d *inprocDriver) append(ctx context.Context, _, s int, line []byte) error {
	// A copy, as gRPC hands the daemon its own copy of each entry: the
	// writer may keep referring to the bytes after acknowledging them.
	_, err := d.m.Append(ctx, d.key(s), [][]byte{bytes.Clone(line)})
	return err
}

func (d *inprocDriver) counters(context.Context) (counters, error) {
	c := selfCounters()
	st := d.m.Stats()
	c.has = true
	c.syncs, c.entries, c.appends = st.JournalSyncs, st.EntriesStored, st.Appends
	return c, nil
}

func (d *inprocDriver) settle(ctx context.Context) error {
	_, err := d.m.FlushAll(ctx)
	return err
}

func (d *inprocDriver) verify(_ context.Context, t *tally) error {
	return verifyCanonical(d.l, d.w, t)
}

func (d *inprocDriver) close(ctx context.Context) error {
	if d.m == nil {
		return nil
	}
	return d.m.Close(ctx)
}

// verifyCanonical checks every session's canonical file: whole lines only,
// as many entries and bytes as were acknowledged.
func verifyCanonical(l layout.Layout, w *workload, t *tally) error {
	for s, sid := range w.sessionIDs {
		path := l.TranscriptPath(layout.Key{ProjectKey: w.projectKey, SessionID: sid})
		n, err := countLines(path)
		if err != nil {
			return err
		}
		if n != t.perSession[s] {
			return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) acknowledged",
				path, n.entries, n.bytes, t.perSession[s].entries, t.perSession[s].bytes)
		}
	}
	return nil
}

// countLines counts the lines of a JSONL file and its bytes; a last line
// without its newline is an error.
func countLines(path string) (acc, error) {
	f, err := os.Open(path)
	if err != nil {
		return acc{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var n acc
	for {
		line, err := r.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			n.bytes += uint64(len(line))
			line, err = r.ReadSlice('\n')
		}
		n.bytes += uint64(len(line))
		if err == io.EOF {
			if len(line) > 0 {
				return n, fmt.Errorf("%s ends with a partial line", path)
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			return n, fmt.Errorf("%s: line without newline", path)
		}
		n.entries++
	}
}

// ---- the whole daemon (internal/daemon) in this process, over a socket ----

// inprocDaemonDriver runs internal/daemon.Run in the bench process, on a
// socket in the run's folder, and drives it exactly like a sessiond
// process: gRPC client, socket, server, writer. It exists so a CPU profile
// of the bench process shows where sessiond's time goes without touching
// the daemon's code (the client side of gRPC shows up in the profile too,
// under the client's own functions).
type inprocDaemonDriver struct {
	daemonDriver
	dir    string
	cancel context.CancelFunc
	done   chan error
}

func (d *inprocDaemonDriver) open(ctx context.Context, w *workload) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	d.socket = filepath.Join(d.dir, "sessiond.sock")
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.done = cancel, make(chan error, 1)
	go func() {
		d.done <- daemon.Run(rctx, daemon.Config{Socket: d.socket, Root: filepath.Join(d.dir, "root"),
			StateDir: filepath.Join(d.dir, "state"), Version: "in-process"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-d.done:
			d.cancel = nil
			return fmt.Errorf("in-process sessiond: %v", err)
		default:
		}
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("in-process sessiond not listening on %s", d.socket)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return d.daemonDriver.open(ctx, w)
}

func (d *inprocDaemonDriver) counters(ctx context.Context) (counters, error) {
	c, err := d.daemonDriver.counters(ctx)
	if err != nil {
		return c, err
	}
	c.cpu, c.cpuOK = selfCPU()
	c.cpuOf = "bench process (in-process sessiond and load generator)"
	return c, nil
}

func (d *inprocDaemonDriver) close(ctx context.Context) error {
	err := d.daemonDriver.close(ctx)
	if d.cancel != nil {
		d.cancel()
		err = errors.Join(err, <-d.done)
	}
	return err
}
