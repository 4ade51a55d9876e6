package inprocess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
	"github.com/sessiond/sessiond/internal/daemon"
)

// echoSyncEnv, with EchoSocketEnv, names the file the echo server syncs
// into.
const echoSyncEnv = "SESSIOND_BENCH_ECHO_SYNC_FILE"

// echoGroupEnv, set to 1 with echoSyncEnv, makes the echo server commit
// its requests in groups (GroupEcho).
const echoGroupEnv = "SESSIOND_BENCH_ECHO_GROUP"

// echoDelayEnv, a duration, makes the group committer wait that long
// after a group's first request for others before it writes.
const echoDelayEnv = "SESSIOND_BENCH_ECHO_DELAY"

// EchoSocketEnv, when set, makes the bench binary (or the bench package's
// test binary) serve as the echo server on that socket instead of running.
const EchoSocketEnv = "SESSIOND_BENCH_ECHO_SOCKET"

// MaybeServe serves as the echo server and exits when the bench
// re-executed itself as one (EchoSocketEnv set); otherwise it returns at
// once.
func MaybeServe() {
	sock := os.Getenv(EchoSocketEnv)
	if sock == "" {
		return
	}
	var delay time.Duration
	if d := os.Getenv(echoDelayEnv); d != "" {
		var err error
		if delay, err = time.ParseDuration(d); err != nil {
			fmt.Fprintln(os.Stderr, "echo server:", echoDelayEnv, err)
			os.Exit(2)
		}
	}
	if err := serveEcho(sock, os.Getenv(echoSyncEnv), os.Getenv(echoGroupEnv) == "1", delay); err != nil {
		fmt.Fprintln(os.Stderr, "echo server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type echoServer struct {
	sessiondv1.UnimplementedSessiondServer
	appends, entries atomic.Uint64

	mu   sync.Mutex
	sync *os.File // when set, each request is written and fdatasynced here first
	buf  []byte
	// group, when set, takes the requests' lines to the committer instead
	// (GroupEcho).
	group chan groupReq
	delay time.Duration // the committer's wait for a group's others
}

// groupReq is one request's lines waiting for the committer.
type groupReq struct {
	lines []byte
	done  chan error
}

// commit is the group committer: it writes every request queued while its
// last write and fdatasync ran with one write and one fdatasync, and
// answers them all. Without a delay a group is whatever arrived during the
// last sync: the least latency a durable log can give. With one, the
// group's first request waits that long for others, as sessiond's
// --commit-delay does: fewer syncs, less CPU.
func (e *echoServer) commit() {
	var batch []groupReq
	for r := range e.group {
		batch = append(batch[:0], r)
		if e.delay > 0 {
			time.Sleep(e.delay)
		}
	more:
		for {
			select {
			case r := <-e.group:
				batch = append(batch, r)
			default:
				break more
			}
		}
		e.buf = e.buf[:0]
		for _, r := range batch {
			e.buf = append(e.buf, r.lines...)
		}
		_, err := e.sync.Write(e.buf)
		if err == nil {
			err = unix.Fdatasync(int(e.sync.Fd()))
		}
		for _, r := range batch {
			r.done <- err
		}
	}
}

func (e *echoServer) store(req *sessiondv1.AppendRequest) error {
	if e.sync == nil {
		return nil
	}
	if e.group != nil {
		r := groupReq{done: make(chan error, 1)}
		for _, en := range req.GetEntries() {
			r.lines = append(append(r.lines, en...), '\n')
		}
		e.group <- r
		return <-r.done
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = e.buf[:0]
	for _, en := range req.GetEntries() {
		e.buf = append(append(e.buf, en...), '\n')
	}
	if _, err := e.sync.Write(e.buf); err != nil {
		return err
	}
	return unix.Fdatasync(int(e.sync.Fd()))
}

// answer builds the response sessiond would give, so both ends marshal
// the same amount.
func (e *echoServer) answer(req *sessiondv1.AppendRequest) *sessiondv1.AppendResponse {
	e.appends.Add(1)
	n := e.entries.Add(uint64(len(req.GetEntries())))
	out := &sessiondv1.AppendResponse{Entries: n, Results: make([]*sessiondv1.EntryResult, len(req.GetEntries())),
		Session: &sessiondv1.ResolvedSession{SessionId: req.GetSession().GetSessionId(), ProjectKey: req.GetSession().GetProjectKey()}}
	for i, en := range req.GetEntries() {
		out.Results[i] = &sessiondv1.EntryResult{Outcome: sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED, Index: n - uint64(len(req.GetEntries())-i), Size: uint64(len(en))}
	}
	return out
}

func (e *echoServer) Append(_ context.Context, req *sessiondv1.AppendRequest) (*sessiondv1.AppendResponse, error) {
	if err := e.store(req); err != nil {
		return nil, err
	}
	return e.answer(req), nil
}

func (e *echoServer) AppendStream(st grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := e.store(req); err != nil {
			return err
		}
		if err := st.Send(&sessiondv1.AppendStreamResponse{Response: e.answer(req)}); err != nil {
			return err
		}
	}
}

func (e *echoServer) Status(context.Context, *sessiondv1.StatusRequest) (*sessiondv1.StatusResponse, error) {
	return &sessiondv1.StatusResponse{Pid: int32(os.Getpid()), Appends: e.appends.Load(), EntriesStored: e.entries.Load()}, nil
}

// Flush and Delete are what the bench's settle and cleanup call: nothing
// to do.
func (e *echoServer) Flush(_ *sessiondv1.FlushRequest, stream grpc.ServerStreamingServer[sessiondv1.FlushResponse]) error {
	return stream.Send(&sessiondv1.FlushResponse{})
}

func serveEcho(sock, syncFile string, group bool, delay time.Duration) error {
	srv := &echoServer{delay: delay}
	if syncFile != "" {
		f, err := os.OpenFile(syncFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		srv.sync = f
		if group {
			srv.group = make(chan groupReq, 1024)
			go srv.commit()
		}
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer(daemon.TransportOptions(64 << 20)...)
	sessiondv1.RegisterSessiondServer(g, srv)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; g.Stop() }()
	return g.Serve(ln)
}

// GroupEcho is the echo server started in a process of its own, with its
// requests made durable by group commit or kept nowhere: the gRPC
// transport's cost, and with it a durable log's least, without anything
// else sessiond does. Scenarios run their load against it as the floor
// beside sessiond.
type GroupEcho struct {
	Socket string
	Pid    int
	File   string // where the lines go; "" when kept nowhere
	cmd    *exec.Cmd
}

// StartGroupEcho starts a GroupEcho in dir, durable or not (then with
// its committer's delay), and waits until it answers.
func StartGroupEcho(ctx context.Context, dir string, durable bool, delay time.Duration) (*GroupEcho, error) {
	g := &GroupEcho{Socket: filepath.Join(dir, "echo.sock")}
	var env []string
	if durable {
		g.File = filepath.Join(dir, "echo.jsonl")
		env = []string{echoSyncEnv + "=" + g.File, echoGroupEnv + "=1", echoDelayEnv + "=" + delay.String()}
	}
	var err error
	if g.cmd, err = startEcho(ctx, dir, g.Socket, env...); err != nil {
		return nil, err
	}
	g.Pid = g.cmd.Process.Pid
	return g, nil
}

// startEcho starts the echo server in dir on sock, with env added, and
// waits until it answers; a server that does not is stopped.
func startEcho(ctx context.Context, dir, sock string, env ...string) (*exec.Cmd, error) {
	cmd, err := harness.StartSelf("echo server", dir, append([]string{EchoSocketEnv + "=" + sock}, env...)...)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(sock, client.WithRetry(1, 0))
	if err != nil {
		return nil, errors.Join(err, harness.StopServer(cmd, "echo server"))
	}
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := c.Status(ctx); err == nil {
			return cmd, nil
		} else if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("echo server not answering: %w", err), harness.StopServer(cmd, "echo server"))
		}
	}
}

// Stop ends the server.
func (g *GroupEcho) Stop() error { return harness.StopServer(g.cmd, "echo server") }

// echoDriver runs the echo server as a child process and drives it with
// the sessiond client, one connection per client as for sessiond.
type echoDriver struct {
	dir   string
	sync  bool // TargetEchoSync
	cmd   *exec.Cmd
	pid   int
	conns []*client.Client
	w     *throughput.Workload
}

func (d *echoDriver) Open(ctx context.Context, w *throughput.Workload) error {
	d.w = w
	sock := filepath.Join(d.dir, "echo.sock")
	var env []string
	if d.sync {
		env = []string{echoSyncEnv + "=" + filepath.Join(d.dir, "echo.jsonl")}
	}
	var err error
	if d.cmd, err = startEcho(ctx, d.dir, sock, env...); err != nil {
		return err
	}
	d.pid = d.cmd.Process.Pid
	for range w.Clients {
		c, err := client.Dial(sock, client.WithRetry(1, 0))
		if err != nil {
			return err
		}
		d.conns = append(d.conns, c)
	}
	return nil
}

func (d *echoDriver) Append(ctx context.Context, c, s int, line []byte) error {
	_, err := d.conns[c].Append(ctx, client.Session{ProjectKey: d.w.ProjectKey, ID: d.w.SessionIDs[s]}, line)
	return err
}

func (d *echoDriver) Counters(ctx context.Context) (throughput.Counters, error) {
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return throughput.Counters{}, err
	}
	c := throughput.Counters{Entries: st.GetEntriesStored(), Appends: st.GetAppends(), Pid: d.pid, CPUOf: fmt.Sprintf("echo server pid %d", d.pid)}
	if cpu, err := harness.ProcCPU(d.pid); err == nil {
		c.CPU, c.CPUOK = cpu, true
	}
	return c, nil
}

func (d *echoDriver) Settle(context.Context) error { return nil }

// verify checks the server saw exactly the acknowledged entries (nothing
// is stored, so that is all there is to check).
func (d *echoDriver) Verify(ctx context.Context, t *throughput.Tally) error {
	st, err := d.conns[0].Status(ctx)
	if err != nil {
		return err
	}
	var acked uint64
	for _, a := range t.PerClient {
		acked += a.Entries
	}
	if st.GetEntriesStored() != acked {
		return fmt.Errorf("echo server received %d entries, %d acknowledged", st.GetEntriesStored(), acked)
	}
	if d.sync {
		return throughput.FileHoldsAcked(filepath.Join(d.dir, "echo.jsonl"), "echo server", t)
	}
	return nil
}

func (d *echoDriver) Close(context.Context) error {
	var errs []error
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(append(errs, harness.StopServer(d.cmd, "echo server"))...)
}
