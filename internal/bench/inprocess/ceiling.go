package inprocess

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/bench/throughput"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"

	// The engine, under the name this file uses for it whatever its
	// package is called: if it moves, this path is the line to change.
	"github.com/sessiond/sessiond/internal/journal"
)

// The ceiling, row (c): the storage engine alone, in the bench process, no
// gRPC. Everything the row depends on is in this file (the only one of the
// package that imports internal/journal): open creates the engine's log,
// append is one client's durable append, verify reads back what it holds.

// ---- (c): the journal alone: one log, one stream per session ----

type ceilingDriver struct {
	dir     string
	log     *journal.Log
	streams []*journal.Stream
	keys    []layout.Key
	entries atomic.Uint64
	reqs    atomic.Uint64
	syncs0  uint64
}

func (d *ceilingDriver) Open(_ context.Context, w *throughput.Workload) error {
	l, _, err := journal.Open(journal.Options{FS: fsys.OS, Dir: d.dir})
	if err != nil {
		return err
	}
	d.log = l
	for _, sid := range w.SessionIDs {
		k := layout.Key{ProjectKey: w.ProjectKey, SessionID: sid}
		s := l.Stream(k)
		if err := s.Begin(journal.Fingerprint{}, false); err != nil {
			return err
		}
		d.streams = append(d.streams, s)
		d.keys = append(d.keys, k)
	}
	d.syncs0 = l.Stats().Syncs
	return nil
}

// append is one client's entry, made durable by the log's committer
// together with everything else queued from every session.
func (d *ceilingDriver) Append(_ context.Context, _, s int, line []byte) error {
	if _, err := d.streams[s].Append([][][]byte{{line}}, nil); err != nil {
		return err
	}
	d.entries.Add(1)
	d.reqs.Add(1)
	return nil
}

func (d *ceilingDriver) Counters(context.Context) (throughput.Counters, error) {
	c := throughput.SelfCounters()
	c.Has = true
	c.Entries, c.Appends = d.entries.Load(), d.reqs.Load()
	if d.log != nil {
		c.Syncs = d.log.Stats().Syncs - d.syncs0
	}
	return c, nil
}

func (d *ceilingDriver) Settle(context.Context) error { return nil }

func (d *ceilingDriver) Verify(_ context.Context, t *throughput.Tally) error {
	if err := d.log.Close(); err != nil {
		return err
	}
	l, _, err := journal.Open(journal.Options{FS: fsys.OS, Dir: d.dir})
	if err != nil {
		return err
	}
	d.log = l
	for s, k := range d.keys {
		var n harness.Acc
		if e, ok := l.Epoch(k); ok {
			for _, b := range e.Batches {
				for _, sp := range b.Entries {
					n.Entries++
					n.Bytes += uint64(sp.Len) + 1
				}
			}
		}
		if n != t.PerSession[s] {
			return fmt.Errorf("the log holds %d entries (%d bytes) of %s, %d (%d bytes) acknowledged",
				n.Entries, n.Bytes, k, t.PerSession[s].Entries, t.PerSession[s].Bytes)
		}
	}
	return nil
}

func (d *ceilingDriver) Close(context.Context) error {
	if d.log != nil {
		err := d.log.Close()
		d.log = nil
		return err
	}
	return nil
}
