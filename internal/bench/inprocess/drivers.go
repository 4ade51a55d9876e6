package inprocess

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sessiond/sessiond/internal/bench/throughput"
	"github.com/sessiond/sessiond/internal/daemon"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer"
)

type inprocDriver struct {
	dir string
	m   *writer.Manager
	l   layout.Layout
	w   *throughput.Workload
}

func (d *inprocDriver) Open(ctx context.Context, w *throughput.Workload) error {
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
	return layout.Key{ProjectKey: d.w.ProjectKey, SessionID: d.w.SessionIDs[s]}
}

func (d *inprocDriver) Append(ctx context.Context, _, s int, line []byte) error {
	// A copy, as gRPC hands the daemon its own copy of each entry: the
	// writer may keep referring to the bytes after acknowledging them.
	_, err := d.m.Append(ctx, d.key(s), [][]byte{bytes.Clone(line)})
	return err
}

func (d *inprocDriver) Counters(context.Context) (throughput.Counters, error) {
	c := throughput.SelfCounters()
	st := d.m.Stats()
	c.Has = true
	c.Syncs, c.Entries, c.Appends = st.JournalSyncs, st.EntriesStored, st.Appends
	return c, nil
}

func (d *inprocDriver) Settle(ctx context.Context) error {
	_, err := d.m.FlushAll(ctx)
	return err
}

func (d *inprocDriver) Verify(_ context.Context, t *throughput.Tally) error {
	return throughput.VerifyCanonical(d.l.Root, d.w, t)
}

func (d *inprocDriver) Close(ctx context.Context) error {
	if d.m == nil {
		return nil
	}
	return d.m.Close(ctx)
}

// inprocDaemonDriver runs internal/daemon.Run in the bench process, on a
// socket in the run's folder, and drives it exactly like a sessiond
// process: gRPC client, socket, server, writer. It exists so a CPU profile
// of the bench process shows where sessiond's time goes without touching
// the daemon's code (the client side of gRPC shows up in the profile too,
// under the client's own functions).
type inprocDaemonDriver struct {
	throughput.DaemonDriver
	dir    string
	cancel context.CancelFunc
	done   chan error
}

func (d *inprocDaemonDriver) Open(ctx context.Context, w *throughput.Workload) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	d.Socket = filepath.Join(d.dir, "sessiond.sock")
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.done = cancel, make(chan error, 1)
	go func() {
		d.done <- daemon.Run(rctx, daemon.Config{Socket: d.Socket, Root: filepath.Join(d.dir, "root"),
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
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("in-process sessiond not listening on %s", d.Socket)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return d.DaemonDriver.Open(ctx, w)
}

func (d *inprocDaemonDriver) Counters(ctx context.Context) (throughput.Counters, error) {
	c, err := d.DaemonDriver.Counters(ctx)
	if err != nil {
		return c, err
	}
	c.CPU, c.CPUOK = throughput.SelfCPU()
	c.CPUOf = "bench process (in-process sessiond and load generator)"
	return c, nil
}

func (d *inprocDaemonDriver) Close(ctx context.Context) error {
	err := d.DaemonDriver.Close(ctx)
	if d.cancel != nil {
		d.cancel()
		err = errors.Join(err, <-d.done)
	}
	return err
}
