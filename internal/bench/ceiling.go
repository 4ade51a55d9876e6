package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/writer"
)

// The ceiling, row (c): the storage engine alone, in the bench process, no
// gRPC. Everything the row depends on is in this file (the only one of the
// package that imports internal/journal), so re-pointing (c) at another
// engine (internal/wal) changes this file alone: open creates the engine's
// files, commitLoop is the group commit, verify reads back what it holds.

// ---- (c): the journal package alone, one group-commit goroutine per journal ----

type ceilReq struct {
	line []byte
	done chan error
}

type ceilingDriver struct {
	dir      string
	maxGroup int
	journals []*journal.Journal
	queues   []chan ceilReq
	dones    []chan error // one per client, reused
	wg       sync.WaitGroup
	syncs    atomic.Uint64
	entries  atomic.Uint64
	reqs     atomic.Uint64
	paths    []string
}

func (d *ceilingDriver) open(_ context.Context, w *workload) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	if d.maxGroup <= 0 {
		d.maxGroup = writer.DefaultMaxGroupBytes
	}
	d.dones = make([]chan error, w.clients)
	for i := range d.dones {
		d.dones[i] = make(chan error, 1)
	}
	for s, sid := range w.sessionIDs {
		path := filepath.Join(d.dir, fmt.Sprintf("session-%04d%s", s, layout.JournalExt))
		j, err := journal.Create(fsys.OS, path, journal.Header{ProjectKey: w.projectKey, SessionID: sid}, journal.Options{})
		if err != nil {
			return err
		}
		q := make(chan ceilReq, max(w.clients, 16))
		d.journals = append(d.journals, j)
		d.queues = append(d.queues, q)
		d.paths = append(d.paths, path)
		d.wg.Add(1)
		go d.commitLoop(j, q)
	}
	return nil
}

// commitLoop is the group commit: take one request, then everything
// queued behind it (up to maxGroup bytes), journal it with one write and
// one sync, acknowledge each.
func (d *ceilingDriver) commitLoop(j *journal.Journal, q chan ceilReq) {
	defer d.wg.Done()
	var group []ceilReq
	var batches [][][]byte
	for {
		r, ok := <-q
		if !ok {
			return
		}
		group = append(group[:0], r)
		size := len(r.line)
	more:
		for size < d.maxGroup {
			select {
			case r, ok := <-q:
				if !ok {
					break more
				}
				group = append(group, r)
				size += len(r.line)
			default:
				break more
			}
		}
		batches = batches[:0]
		for _, r := range group {
			batches = append(batches, [][]byte{r.line})
		}
		_, err := j.Append(batches)
		d.syncs.Add(1)
		d.entries.Add(uint64(len(group)))
		d.reqs.Add(uint64(len(group)))
		for _, r := range group {
			r.done <- err
		}
	}
}

func (d *ceilingDriver) append(ctx context.Context, c, s int, line []byte) error {
	done := d.dones[c]
	select {
	case d.queues[s] <- ceilReq{line: line, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-done
}

func (d *ceilingDriver) counters(context.Context) (counters, error) {
	c := selfCounters()
	c.has = true
	c.syncs, c.entries, c.appends = d.syncs.Load(), d.entries.Load(), d.reqs.Load()
	return c, nil
}

func (d *ceilingDriver) settle(context.Context) error { return nil }

func (d *ceilingDriver) stopLoops() {
	for _, q := range d.queues {
		close(q)
	}
	d.queues = nil
	d.wg.Wait()
	for _, j := range d.journals {
		j.Close()
	}
	d.journals = nil
}

func (d *ceilingDriver) verify(_ context.Context, t *tally) error {
	d.stopLoops()
	for s, path := range d.paths {
		j, rec, err := journal.Open(fsys.OS, path, journal.Options{})
		if err != nil {
			return err
		}
		j.Close()
		var n acc
		for _, b := range rec.Batches {
			for _, sp := range b.Entries {
				n.entries++
				n.bytes += uint64(sp.Len) + 1
			}
		}
		if n != t.perSession[s] {
			return fmt.Errorf("journal %s holds %d entries (%d bytes), %d (%d bytes) acknowledged",
				path, n.entries, n.bytes, t.perSession[s].entries, t.perSession[s].bytes)
		}
	}
	return nil
}

func (d *ceilingDriver) close(context.Context) error {
	if d.queues != nil {
		d.stopLoops()
	}
	return nil
}
