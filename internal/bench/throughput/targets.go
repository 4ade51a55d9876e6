package throughput

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
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

// tally is every acknowledged entry of a run, warm-up included.
type Tally struct {
	PerClient  []harness.Acc
	PerSession []harness.Acc
}

// counters are a target's own counters, read before and after the
// measurement.
type Counters struct {
	Has                     bool // Syncs, Entries and Appends are meaningful
	Syncs, Entries, Appends uint64
	CPU                     time.Duration
	CPUOf                   string
	CPUOK                   bool
	Pid                     int // the daemon's, 0 when in-process
}

// driver is one target.
type Driver interface {
	// open prepares files or connections for w.
	Open(ctx context.Context, w *Workload) error
	// append stores line for client c in session s and returns once the
	// target acknowledges it.
	Append(ctx context.Context, c, s int, line []byte) error
	Counters(ctx context.Context) (Counters, error)
	// settle makes the target put what it buffers in its final place
	// (sessiond: flush the run's sessions into their canonical files).
	Settle(ctx context.Context) error
	// verify compares what is on disk with what was acknowledged.
	Verify(ctx context.Context, t *Tally) error
	Close(ctx context.Context) error
}

// batchDriver is a driver that can also store several lines of one session
// in one call (--batch: one Append carrying all of them, atomically).
type BatchDriver interface {
	AppendBatch(ctx context.Context, c, s int, lines [][]byte) error
}

func SelfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

func SelfCounters() Counters {
	cpu, ok := SelfCPU()
	return Counters{CPU: cpu, CPUOK: ok, CPUOf: "bench process (load generator included)"}
}

// ---- (a) and (b): a file per client, written with O_APPEND ----

type fileDriver struct {
	dir   string
	sync  bool
	files []*os.File
	sizes []int64 // bytes written per client (for verify)
}

func (d *fileDriver) Open(_ context.Context, w *Workload) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	d.files = make([]*os.File, w.Clients)
	for i := range d.files {
		f, err := os.OpenFile(filepath.Join(d.dir, fmt.Sprintf("client-%04d.jsonl", i)), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		d.files[i] = f
	}
	return nil
}

func (d *fileDriver) Append(_ context.Context, c, _ int, line []byte) error {
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

func (d *fileDriver) Counters(context.Context) (Counters, error) { return SelfCounters(), nil }
func (d *fileDriver) Settle(context.Context) error               { return nil }

func (d *fileDriver) Verify(_ context.Context, t *Tally) error {
	for i, f := range d.files {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if uint64(fi.Size()) != t.PerClient[i].Bytes {
			return fmt.Errorf("%s is %d bytes, %d acknowledged", f.Name(), fi.Size(), t.PerClient[i].Bytes)
		}
		n, err := harness.CountLines(f.Name())
		if err != nil {
			return err
		}
		if n.Entries != t.PerClient[i].Entries {
			return fmt.Errorf("%s holds %d lines, %d acknowledged", f.Name(), n.Entries, t.PerClient[i].Entries)
		}
	}
	return nil
}

func (d *fileDriver) Close(context.Context) error {
	var errs []error
	for _, f := range d.files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// ---- sessiond over its socket ----

type DaemonDriver struct {
	Socket   string
	ResetHWM bool // the tool started the daemon: reset its peak RSS per run
	root     string
	pid      int
	w        *Workload
	conns    []*client.Client
	MaxConns int
	Unary    bool // one unary Append per call instead of the client's AppendStream streams
	Purge    bool // delete the run's sessions (for good) when done
	hwm      int64
	hwmOK    bool
}

func (d *DaemonDriver) Open(ctx context.Context, w *Workload) error {
	d.w = w
	n := w.Clients
	if d.MaxConns > 0 && n > d.MaxConns {
		n = d.MaxConns
	}
	opts := []client.Option{client.WithRetry(1, 0)}
	if d.Unary {
		opts = append(opts, client.WithUnaryAppend())
	}
	for range n {
		c, err := client.Dial(d.Socket, opts...)
		if err != nil {
			return err
		}
		d.conns = append(d.conns, c)
	}
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return fmt.Errorf("sessiond at %s: %w", d.Socket, err)
	}
	d.root, d.pid = st.GetRoot(), int(st.GetPid())
	return nil
}

func (d *DaemonDriver) session(s int) client.Session {
	return client.Session{ProjectKey: d.w.ProjectKey, ID: d.w.SessionIDs[s]}
}

func (d *DaemonDriver) Append(ctx context.Context, c, s int, line []byte) error {
	_, err := d.conns[c%len(d.conns)].Append(ctx, d.session(s), line)
	return err
}

func (d *DaemonDriver) AppendBatch(ctx context.Context, c, s int, lines [][]byte) error {
	_, err := d.conns[c%len(d.conns)].Append(ctx, d.session(s), lines...)
	return err
}

func (d *DaemonDriver) Counters(ctx context.Context) (Counters, error) {
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return Counters{}, err
	}
	c := Counters{Has: true, Syncs: st.GetJournalSyncs(), Entries: st.GetEntriesStored(), Appends: st.GetAppends(),
		Pid: int(st.GetPid()), CPUOf: fmt.Sprintf("sessiond pid %d", st.GetPid())}
	if cpu, err := harness.ProcCPU(c.Pid); err == nil {
		c.CPU, c.CPUOK = cpu, true
	}
	if hwm, err := harness.ProcHWM(c.Pid); err == nil {
		d.hwm, d.hwmOK = hwm, true
	}
	return c, nil
}

func (d *DaemonDriver) Settle(ctx context.Context) error {
	return forSessions(ctx, len(d.w.SessionIDs), func(s int) error {
		_, err := d.conns[s%len(d.conns)].Flush(ctx, d.session(s))
		return err
	})
}

func (d *DaemonDriver) Verify(_ context.Context, t *Tally) error {
	return VerifyCanonical(d.root, d.w, t)
}

func (d *DaemonDriver) Close(ctx context.Context) error {
	var errs []error
	if d.Purge && len(d.conns) > 0 {
		errs = append(errs, forSessions(ctx, len(d.w.SessionIDs), func(s int) error {
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

// verifyCanonical checks every session's canonical file: whole lines only,
// as many entries and bytes as were acknowledged.
func VerifyCanonical(root string, w *Workload, t *Tally) error {
	for s, sid := range w.SessionIDs {
		path := harness.TranscriptPath(root, client.Session{ProjectKey: w.ProjectKey, ID: sid})
		n, err := harness.CountLines(path)
		if err != nil {
			return err
		}
		if n != t.PerSession[s] {
			return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) acknowledged",
				path, n.Entries, n.Bytes, t.PerSession[s].Entries, t.PerSession[s].Bytes)
		}
	}
	return nil
}

// ---- the whole daemon (internal/daemon) in this process, over a socket ----

// fileHoldsAcked checks that the file a server child wrote holds exactly
// the acknowledged entries, one line each.
func FileHoldsAcked(path, who string, t *Tally) error {
	var acked uint64
	for _, a := range t.PerClient {
		acked += a.Entries
	}
	n, err := harness.CountLines(path)
	if err != nil {
		return err
	}
	if n.Entries != acked {
		return fmt.Errorf("%s's file holds %d lines, %d acknowledged", who, n.Entries, acked)
	}
	return nil
}

// TargetEcho is the transport alone: the same client, socket type and gRPC
// settings as sessiond, against a server process that answers every append
// at once and stores nothing. It is what any gRPC daemon on this machine
// costs before it does any work, so the targets that compare sessiond with
// the bare journal can be read as "transport + sessiond's own work".
const TargetEcho = "echo"

// TargetEchoSync is the echo server that also writes each request's
// entries to a file and fdatasyncs it before answering (no group commit):
// the least any daemon that acknowledges durable appends over this
// transport can cost, one client at a time.
const TargetEchoSync = "echo-sync"
