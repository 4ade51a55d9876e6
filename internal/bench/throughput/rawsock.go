package throughput

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TargetRawSync is (f) without gRPC: a server process that reads
// length-prefixed entries from a plain Unix socket, writes each to a file,
// fdatasyncs it and answers one byte, on the goroutine that read it. Next
// to (f) it shows what the gRPC transport adds to one durable round trip,
// which (f) and sessiond pay and a hand-rolled protocol would not.
const TargetRawSync = "raw-sync"

// rawSocketEnv, when set, makes the bench binary serve as the raw server on
// that socket; rawFileEnv names the file it syncs into.
const (
	rawSocketEnv = "SESSIOND_BENCH_RAW_SOCKET"
	rawFileEnv   = "SESSIOND_BENCH_RAW_FILE"
)

// maxRawFrame bounds one request, so a stray connection cannot make the
// server allocate without limit.
const maxRawFrame = 64 << 20

// MaybeServe serves as the raw server of TargetRawSync and exits when the
// bench re-executed itself as one (rawSocketEnv set); otherwise it returns
// at once. Call it first in main, and in TestMain of the packages whose
// tests run that target.
func MaybeServe() {
	sock := os.Getenv(rawSocketEnv)
	if sock == "" {
		return
	}
	if err := serveRaw(sock, os.Getenv(rawFileEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "raw server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveRaw(sock, file string) error {
	if file == "" {
		return errors.New(rawFileEnv + " is not set")
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex // one write + fdatasync at a time, as (f); guards conns
		conns = map[net.Conn]bool{}
		stop  bool
		wg    sync.WaitGroup
	)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		ln.Close()
		mu.Lock()
		stop = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	// The file is closed only once no connection can write to it.
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		mu.Lock()
		if stop {
			mu.Unlock()
			c.Close()
			return nil
		}
		conns[c] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := serveRawConn(c, f, &mu)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			c.Close()
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintln(os.Stderr, "raw server:", err)
			}
		}()
	}
}

// serveRawConn answers one connection: per request a 4-byte big-endian
// length and the entry; the entry and a newline are written and synced,
// then one byte answers.
func serveRawConn(c net.Conn, f *os.File, mu *sync.Mutex) error {
	r := bufio.NewReader(c)
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxRawFrame {
			return fmt.Errorf("request of %d bytes, above %d", n, maxRawFrame)
		}
		if cap(buf) < int(n)+1 {
			buf = make([]byte, n+1)
		}
		buf = buf[:n+1]
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return err
		}
		buf[n] = '\n'
		mu.Lock()
		_, err := f.Write(buf)
		if err == nil {
			err = unix.Fdatasync(int(f.Fd()))
		}
		mu.Unlock()
		if err != nil {
			return err
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
	}
}

// rawDriver runs the raw server as a child process, one connection per
// client.
type rawDriver struct {
	dir   string
	cmd   *exec.Cmd
	pid   int
	conns []net.Conn
	bufs  [][]byte
}

func (d *rawDriver) file() string { return filepath.Join(d.dir, "raw.jsonl") }

func (d *rawDriver) Open(ctx context.Context, w *Workload) error {
	sock := filepath.Join(d.dir, "raw.sock")
	var err error
	if d.cmd, err = harness.StartSelf("raw server", d.dir, rawSocketEnv+"="+sock, rawFileEnv+"="+d.file()); err != nil {
		return err
	}
	d.pid = d.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for range w.Clients {
		for {
			c, err := net.Dial("unix", sock)
			if err == nil {
				d.conns = append(d.conns, c)
				d.bufs = append(d.bufs, nil)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("raw server not answering: %w", err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func (d *rawDriver) Append(ctx context.Context, c, _ int, line []byte) error {
	conn := d.conns[c]
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	b := binary.BigEndian.AppendUint32(d.bufs[c][:0], uint32(len(line)))
	b = append(b, line...)
	d.bufs[c] = b
	if _, err := conn.Write(b); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return fmt.Errorf("raw server: no answer: %w", err)
	}
	return nil
}

func (d *rawDriver) Counters(context.Context) (Counters, error) {
	c := Counters{Pid: d.pid, CPUOf: fmt.Sprintf("raw server pid %d", d.pid)}
	if cpu, err := harness.ProcCPU(d.pid); err == nil {
		c.CPU, c.CPUOK = cpu, true
	}
	return c, nil
}

func (d *rawDriver) Settle(context.Context) error { return nil }

// verify checks the server's file holds exactly the acknowledged entries.
func (d *rawDriver) Verify(_ context.Context, t *Tally) error {
	return FileHoldsAcked(d.file(), "raw server", t)
}

func (d *rawDriver) Close(context.Context) error {
	var errs []error
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(append(errs, harness.StopServer(d.cmd, "raw server"))...)
}
