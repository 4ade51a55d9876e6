package bench

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
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

func (d *ceilingDriver) open(_ context.Context, w *workload) error {
	l, _, err := journal.Open(journal.Options{FS: fsys.OS, Dir: d.dir})
	if err != nil {
		return err
	}
	d.log = l
	for _, sid := range w.sessionIDs {
		k := layout.Key{ProjectKey: w.projectKey, SessionID: sid}
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
func (d *ceilingDriver) append(_ context.Context, _, s int, line []byte) error {
	if _, err := d.streams[s].Append([][][]byte{{line}}, nil); err != nil {
		return err
	}
	d.entries.Add(1)
	d.reqs.Add(1)
	return nil
}

func (d *ceilingDriver) counters(context.Context) (counters, error) {
	c := selfCounters()
	c.has = true
	c.entries, c.appends = d.entries.Load(), d.reqs.Load()
	if d.log != nil {
		c.syncs = d.log.Stats().Syncs - d.syncs0
	}
	return c, nil
}

func (d *ceilingDriver) settle(context.Context) error { return nil }

func (d *ceilingDriver) verify(_ context.Context, t *tally) error {
	if err := d.log.Close(); err != nil {
		return err
	}
	l, _, err := journal.Open(journal.Options{FS: fsys.OS, Dir: d.dir})
	if err != nil {
		return err
	}
	d.log = l
	for s, k := range d.keys {
		var n acc
		if e, ok := l.Epoch(k); ok {
			for _, b := range e.Batches {
				for _, sp := range b.Entries {
					n.entries++
					n.bytes += uint64(sp.Len) + 1
				}
			}
		}
		if n != t.perSession[s] {
			return fmt.Errorf("the log holds %d entries (%d bytes) of %s, %d (%d bytes) acknowledged",
				n.entries, n.bytes, k, t.perSession[s].entries, t.perSession[s].bytes)
		}
	}
	return nil
}

func (d *ceilingDriver) close(context.Context) error {
	if d.log != nil {
		err := d.log.Close()
		d.log = nil
		return err
	}
	return nil
}
