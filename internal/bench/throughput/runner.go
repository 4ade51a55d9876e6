package throughput

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// workload is one run's load.
type Workload struct {
	Clients    int
	Sessions   int
	Size       harness.Sizer
	Duration   time.Duration
	Entries    int64 // > 0: this many measured entries in all, instead of Duration
	Seed       uint64
	ProjectKey string
	SessionIDs []string
	Verify     bool
	CPUProfile string // write a CPU profile of the bench process over the measurement
	// Awake keeps one of the bench process's threads busy over the
	// measurement (keepAwake): a diagnosis, not a way to run clients.
	Awake bool
	// Batch > 1: each measured call stores this many entries at once
	// (the driver must be a BatchDriver); the last call of an --entries
	// budget takes what is left.
	Batch int
}

type clientOut struct {
	lat     []int64
	entries uint64
	bytes   uint64
	err     error
}

// Measure drives d with w and measures it.
func Measure(ctx context.Context, d Driver, w *Workload, r *harness.Result) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.Clients, r.Sessions, r.Size = w.Clients, w.Sessions, w.Size.String()
	defer func() {
		if cerr := d.Close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
		if err != nil {
			r.Error = err.Error()
		}
	}()
	var bd BatchDriver
	if w.Batch > 1 {
		var ok bool
		if bd, ok = d.(BatchDriver); !ok {
			return fmt.Errorf("target %s stores one entry per call: no --batch", r.Target)
		}
		r.Batch = w.Batch
	}
	if err := d.Open(ctx, w); err != nil {
		return fmt.Errorf("open: %w", err)
	}

	t := &Tally{PerClient: make([]harness.Acc, w.Clients), PerSession: make([]harness.Acc, w.Sessions)}
	var tmu sync.Mutex
	outs := make([]clientOut, w.Clients)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time
	var budget atomic.Int64
	budget.Store(w.Entries)
	var failed atomic.Bool

	for c := range w.Clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			o := &outs[c]
			s := c % w.Sessions
			sid := w.SessionIDs[s]
			rng := rand.New(rand.NewPCG(w.Seed, uint64(c)+1))
			var buf []byte
			var seq uint64
			next := func() []byte {
				size := w.Size.Size(rng)
				if cap(buf) < size+512 {
					buf = make([]byte, 0, size+512)
				}
				// The line is followed by its newline in buf: the
				// file targets write both in one call.
				buf = harness.AppendEntry(buf[:0], size, sid, harness.NewUUID(rng), seq)
				buf = append(buf, '\n')
				seq++
				return buf[:len(buf)-1]
			}
			ack := func(line []byte) {
				tmu.Lock()
				t.PerClient[c].Entries++
				t.PerClient[c].Bytes += uint64(len(line)) + 1
				t.PerSession[s].Entries++
				t.PerSession[s].Bytes += uint64(len(line)) + 1
				tmu.Unlock()
			}
			// Warm-up: one append, untimed (connection, session and
			// file creation), then wait for everyone.
			line := next()
			werr := d.Append(ctx, c, s, line)
			if werr == nil {
				ack(line)
			} else {
				o.err = fmt.Errorf("warm-up append of client %d: %w", c, werr)
				failed.Store(true)
			}
			ready.Done()
			<-start
			if werr != nil || failed.Load() {
				return
			}
			o.lat = make([]int64, 0, 1024)
			var lines [][]byte
			for ctx.Err() == nil && !failed.Load() {
				n := max(w.Batch, 1)
				if w.Entries > 0 {
					if n = claim(&budget, n); n == 0 {
						return
					}
				} else if time.Now().After(deadline) {
					return
				}
				var err error
				var lat time.Duration
				if w.Batch > 1 {
					lines = lines[:0]
					for range n {
						lines = append(lines, bytes.Clone(next()))
					}
					t0 := time.Now()
					err = bd.AppendBatch(ctx, c, s, lines)
					lat = time.Since(t0)
				} else {
					line = next()
					t0 := time.Now()
					err = d.Append(ctx, c, s, line)
					lat = time.Since(t0)
					lines = append(lines[:0], line)
				}
				if err != nil {
					o.err = fmt.Errorf("append of client %d: %w", c, err)
					failed.Store(true)
					return
				}
				for _, line := range lines {
					ack(line)
					o.entries++
					o.bytes += uint64(len(line)) + 1
				}
				o.lat = append(o.lat, int64(lat))
			}
		}()
	}
	ready.Wait()
	for i := range w.Clients {
		if outs[i].err != nil {
			close(start)
			done.Wait()
			return outs[i].err
		}
	}
	var dd *DaemonDriver
	if x, ok := d.(*DaemonDriver); ok {
		dd = x
		if dd.ResetHWM && dd.pid > 0 {
			if err := harness.ResetHWM(dd.pid); err == nil {
				r.PeakRSSNote = "peak over this run (VmHWM reset before it)"
			}
		}
		if r.PeakRSSNote == "" {
			r.PeakRSSNote = "peak since sessiond started (VmHWM)"
		}
	}
	before, err := d.Counters(ctx)
	if err != nil {
		close(start)
		done.Wait()
		return fmt.Errorf("Counters: %w", err)
	}
	if w.CPUProfile != "" {
		f, err := os.Create(w.CPUProfile)
		if err != nil {
			close(start)
			done.Wait()
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			close(start)
			done.Wait()
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
		r.ProfileFile = w.CPUProfile
	}
	if w.Awake {
		stop := keepAwake()
		defer stop()
		r.ClientAwake = true
	}
	t0 := time.Now()
	deadline = t0.Add(w.Duration)
	close(start)
	done.Wait()
	elapsed := time.Since(t0)
	if w.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	after, cerr := d.Counters(ctx)
	for i := range outs {
		if outs[i].err != nil {
			return outs[i].err
		}
	}
	if cerr != nil {
		return fmt.Errorf("Counters: %w", cerr)
	}

	var lat []int64
	for i := range outs {
		r.Entries += outs[i].entries
		r.Bytes += outs[i].bytes
		lat = append(lat, outs[i].lat...)
		outs[i].lat = nil
	}
	r.Seconds = elapsed.Seconds()
	r.EntriesPerSec = float64(r.Entries) / r.Seconds
	r.MBPerSec = float64(r.Bytes) / r.Seconds / 1e6
	r.Latency = harness.LatencyOf(lat)
	for _, a := range t.PerClient {
		r.TotalAcked += a.Entries
	}
	r.WarmupEntries = r.TotalAcked - r.Entries
	if before.Has {
		r.Syncs = after.Syncs - before.Syncs
		r.StoredEntries = after.Entries - before.Entries
		r.Appends = after.Appends - before.Appends
		if r.Syncs > 0 {
			r.EntriesPerSync = float64(r.StoredEntries) / float64(r.Syncs)
		}
	}
	if before.CPUOK && after.CPUOK {
		r.CPUSeconds = (after.CPU - before.CPU).Seconds()
		r.CPUOf = after.CPUOf
		if r.Entries > 0 {
			r.CPUPerEntryUS = r.CPUSeconds * 1e6 / float64(r.Entries)
		}
	}
	if dd != nil && dd.hwmOK {
		r.PeakRSSBytes = dd.hwm
	}

	ts := time.Now()
	if err := d.Settle(ctx); err != nil {
		return fmt.Errorf("settle (flush): %w", err)
	}
	r.SettleSeconds = time.Since(ts).Seconds()
	if w.Verify {
		ok := true
		if err := d.Verify(ctx, t); err != nil {
			ok = false
			r.VerifyError = err.Error()
		}
		r.Verified = &ok
	}
	return nil
}

// claim takes up to n entries from what is left of budget and returns how
// many it got (0: the budget is spent).
func claim(budget *atomic.Int64, n int) int {
	left := budget.Add(-int64(n))
	switch {
	case left >= 0:
		return n
	case left > -int64(n):
		return n + int(left)
	}
	return 0
}
