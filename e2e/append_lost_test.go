package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// cutProxy stands between sessionctl and sessiond on a socket of its own
// and, once armed, stops a batch's exchange at a chosen point: the moment
// its request has all gone through to the daemon (the daemon may or may
// not store it), or the daemon's first frame of the answer (the batch is
// durable: sessiond answers once it is), which it then holds back. It
// reads the HTTP/2 frames' headers, nothing more; a batch is told from
// other calls (the health check of --wait) by its size.
type cutProxy struct {
	t      *testing.T
	ln     net.Listener
	socket string
	target string

	mu      sync.Mutex
	conns   []net.Conn
	mode    string        // "", "request" or "answer"
	reached chan struct{} // closed when the armed point is reached
	// mute is set once the "request" point is reached: the batch's answer
	// is held back too until the cut, or a daemon quicker than the test's
	// kill (a loaded machine) would answer it, and nothing would be sent
	// again.
	mute bool
}

// batchBytes is the least request that counts as a batch: the tests'
// batches are hundreds of KiB, a health check is a few bytes.
const batchBytes = 32 << 10

func newCutProxy(t *testing.T, target string) *cutProxy {
	sock := filepath.Join(shortTempDir(t), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, socket: sock, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

// shortTempDir is a temp folder short enough for a socket path.
func shortTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// arm sets where the next batch stops; the channel is closed once it did.
func (p *cutProxy) arm(mode string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.reached = mode, make(chan struct{})
	return p.reached
}

// hit reports whether mode is the armed one and, the first time, disarms
// and says it was reached.
func (p *cutProxy) hit(mode string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != mode {
		return false
	}
	p.mode = ""
	p.mute = mode == "request"
	close(p.reached)
	return true
}

// muted reports whether the answers are held back until the cut.
func (p *cutProxy) muted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mute
}

// cut closes every connection: for sessionctl, the daemon is gone.
func (p *cutProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mute = false
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("unix", p.target)
		if err != nil {
			c.Close() // no daemon: refused, as its socket would
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, d)
		p.mu.Unlock()
		batch := make(chan uint32, 1) // the stream id of the connection's batch
		go p.upstream(c, d, batch)
		go p.downstream(d, c, batch)
	}
}

// frameHeader reads one HTTP/2 frame header: length, type and stream.
func frameHeader(r io.Reader) (hdr [9]byte, length int, typ byte, stream uint32, err error) {
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	length = int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	return hdr, length, hdr[3], binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff, nil
}

// upstream copies sessionctl's frames to the daemon, finds the batch's
// stream and, armed for "request", stops once its message went through.
func (p *cutProxy) upstream(c, d net.Conn, batch chan<- uint32) {
	defer d.Close()
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	if _, err := d.Write(preface); err != nil {
		return
	}
	sent := map[uint32]int{} // DATA bytes per stream
	want := map[uint32]int{} // the gRPC message's length with its prefix
	var found uint32
	for {
		hdr, n, typ, stream, err := frameHeader(c)
		if err != nil {
			return
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		if _, err := d.Write(append(hdr[:], payload...)); err != nil {
			return
		}
		if typ != 0 || stream == 0 { // DATA frames only
			continue
		}
		if sent[stream] == 0 && n >= 5 {
			want[stream] = 5 + int(binary.BigEndian.Uint32(payload[1:5]))
		}
		sent[stream] += n
		if found == 0 && want[stream] >= batchBytes {
			found = stream
			batch <- stream
		}
		if stream == found && sent[stream] >= want[stream] && p.hit("request") {
			io.Copy(io.Discard, c) // until the test cuts
			return
		}
	}
}

// downstream copies the daemon's frames to sessionctl and, armed for
// "answer", holds back the first frame of the batch's answer.
func (p *cutProxy) downstream(d, c net.Conn, batch <-chan uint32) {
	defer c.Close()
	var found uint32
	for {
		hdr, n, _, stream, err := frameHeader(d)
		if err != nil {
			return
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(d, payload); err != nil {
			return
		}
		if found == 0 {
			select {
			case found = <-batch:
			default:
			}
		}
		if stream != 0 && stream == found && (p.muted() || p.hit("answer")) {
			io.Copy(io.Discard, d) // held until the test cuts
			return
		}
		if _, err := c.Write(append(hdr[:], payload...)); err != nil {
			return
		}
	}
}

// roundInput is n JSONL entries without uuids (so only the batch id can
// keep a resend from storing them twice), about 1 KiB each, keyed by
// round and line.
func roundInput(round, n int) string {
	var b strings.Builder
	pad := strings.Repeat("x", 1000)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"type":"user","k":"r%d-l%d","pad":"%s"}`+"\n", round, i, pad)
	}
	return b.String()
}

// keyCounts reads the session through sessiond and counts each key.
func keyCounts(t *testing.T, d *daemon, s client.Session) map[string]int {
	t.Helper()
	c := d.client()
	defer c.Close()
	counts := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Read(ctx, s, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		var v struct{ K string }
		if err := json.Unmarshal(e.GetData(), &v); err != nil {
			return err
		}
		counts[v.K]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// TestAppendAcrossDaemonKill: sessiond is killed (SIGKILL) right after a
// batch of sessionctl append reached it (with its answer on the way, or
// with only the request through), then started again. sessionctl sends
// the batch again with the same batch id and ends with every line stored
// exactly once. The lines carry no uuid: only the batch id keeps them from
// being stored twice. Ten rounds, alternating the two points.
func TestAppendAcrossDaemonKill(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	p := newCutProxy(t, d.socket)
	cwd := t.TempDir()
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	const rounds, lines = 10, 200
	for round := 0; round < rounds; round++ {
		mode := []string{"answer", "request"}[round%2]
		reached := p.arm(mode)
		cmd := exec.Command(bins.Sessionctl(), "--socket", p.socket, "--wait", "60s", "append", "--cwd", cwd, "--session", s.ID)
		cmd.Stdin = strings.NewReader(roundInput(round, lines))
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-reached:
		case err := <-exited:
			t.Fatalf("round %d: sessionctl exited (%v) before its batch reached %s: %s %s", round, err, mode, out.String(), errOut.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: the batch never reached %s", round, mode)
		}
		d.stop(syscall.SIGKILL, 10*time.Second)
		p.cut()
		time.Sleep(time.Duration(round%4) * 200 * time.Millisecond)
		d.start()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("round %d (%s): sessionctl: %v\nstdout: %s\nstderr: %s", round, mode, err, out.String(), errOut.String())
			}
		case <-time.After(90 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: sessionctl still running 90 s after the restart", round)
		}
		if !strings.Contains(errOut.String(), "sending it again with the same batch id") {
			t.Errorf("round %d: sessionctl did not say it sent the batch again: %s", round, errOut.String())
		}
		if mode == "answer" && !strings.Contains(out.String(), "was stored already") {
			t.Errorf("round %d: the batch was durable before its answer was cut, but the resend was not answered as stored already:\n%s", round, out.String())
		}
		counts := keyCounts(t, d, s)
		for i := 0; i < lines; i++ {
			if k := fmt.Sprintf("r%d-l%d", round, i); counts[k] != 1 {
				t.Fatalf("round %d (%s): line %s stored %d times, want once\nstdout: %s\nstderr: %s", round, mode, k, counts[k], out.String(), errOut.String())
			}
		}
		if len(counts) != (round+1)*lines {
			t.Fatalf("round %d: the session holds %d keys, want %d", round, len(counts), (round+1)*lines)
		}
	}
}

// TestAppendInterruptedPromptly: SIGINT ends sessionctl append at once,
// saying what is known of its batch: with the daemon stopped (SIGSTOP)
// before the batch could be sent, that nothing was stored; with the batch
// at the daemon and its answer held back, that the outcome is unknown,
// with the batch id and the command that sends it again, which stores it
// once.
func TestAppendInterruptedPromptly(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	cwd := t.TempDir()
	sid := uuid.NewString()
	input := filepath.Join(t.TempDir(), "entries.jsonl")
	if err := os.WriteFile(input, []byte(roundInput(0, 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	// interrupt runs sessionctl append on socket, sends SIGINT once ready
	// is closed (and a moment more), and returns its stderr.
	interrupt := func(socket string, ready <-chan struct{}) string {
		t.Helper()
		in, err := os.Open(input)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd := exec.Command(bins.Sessionctl(), "--socket", socket, "append", "--cwd", cwd, "--session", sid)
		cmd.Stdin = in
		var errOut strings.Builder
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ready:
		case err := <-exited:
			t.Fatalf("sessionctl exited before the interrupt: %v: %s", err, errOut.String())
		case <-time.After(30 * time.Second):
			t.Fatal("the batch never got where the test waits for it")
		}
		// sessionctl names the batch it was sending only once it has
		// read it: on a loaded machine that can take longer than the
		// moment below, so wait until its stdin is read to the end.
		waitReadAll(t, cmd.Process.Pid, in)
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("exit %v after SIGINT, want status 1", err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("sessionctl still running 20 s after SIGINT: %s", errOut.String())
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("sessionctl took %v to exit after SIGINT", took)
		}
		if strings.Contains(errOut.String(), "rpc error") {
			t.Errorf("gRPC's text in the message: %s", errOut.String())
		}
		return errOut.String()
	}

	// The daemon stopped: the connection is taken by the kernel, and
	// nobody answers it.
	if err := d.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	close(started)
	msg := interrupt(d.socket, started)
	d.Signal(syscall.SIGCONT)
	if !strings.Contains(msg, "stdin lines 1-200 (one batch, stored whole or not at all): nothing of it was stored: interrupted before it was sent") {
		t.Errorf("interrupted before sending, stderr:\n%s", msg)
	}

	// The batch at the daemon, its answer held back.
	p := newCutProxy(t, d.socket)
	msg = interrupt(p.socket, p.arm("answer"))
	id := regexp.MustCompile(`\(batch ([0-9a-f-]{36})\): the outcome is unknown`).FindStringSubmatch(msg)
	if id == nil || regexp.MustCompile(`nothing (of it )?was stored`).MatchString(msg) {
		t.Fatalf("interrupted with the batch at the daemon, stderr:\n%s", msg)
	}
	resend := regexp.MustCompile(`(?m)^  (sessionctl .* --batch-id ` + id[1] + ` < .*)$`).FindStringSubmatch(msg)
	if resend == nil || !strings.Contains(resend[1], input) {
		t.Fatalf("no command to send the batch again from %s in:\n%s", input, msg)
	}
	// The command as printed, on the proxy (now passing everything).
	sh := exec.Command("sh", "-c", resend[1])
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(bins.Sessionctl())+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, errOut, code := runCmd(t, sh, "")
	if code != 0 || !strings.Contains(out, "batch "+id[1]+" was stored already") {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", resend[1], code, out, errOut)
	}
	counts := keyCounts(t, d, client.Session{Cwd: cwd, ID: sid})
	if len(counts) != 200 {
		t.Fatalf("the session holds %d keys, want 200", len(counts))
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("%s stored %d times", k, n)
		}
	}
}

// waitReadAll waits until the process pid has read its standard input,
// the file in, to the end (its offset in /proc/<pid>/fdinfo/0).
func waitReadAll(t *testing.T, pid int, in *os.File) {
	t.Helper()
	fi, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pos:\t%d\n", fi.Size())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/0", pid))
		if err == nil && strings.HasPrefix(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessionctl did not read its input within 30 s (fdinfo: %q, %v)", b, err)
		}
	}
}
