package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workload is one run's load.
type workload struct {
	clients    int
	sessions   int
	size       Sizer
	duration   time.Duration
	entries    int64 // > 0: this many measured entries in all, instead of duration
	seed       uint64
	projectKey string
	sessionIDs []string
	verify     bool
	cpuProfile string // write a CPU profile of the bench process over the measurement
	// awake keeps one of the bench process's threads busy over the
	// measurement (keepAwake): a diagnosis, not a way to run clients.
	awake bool
	// batch > 1: each measured call stores this many entries at once
	// (the driver must be a batchDriver); the last call of an --entries
	// budget takes what is left.
	batch int
}

// Latency holds percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	Max  float64 `json:"max_us"`
	Mean float64 `json:"mean_us"`
}

// Result is one measured run of one target.
type Result struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	Target   string `json:"target"`
	Clients  int    `json:"clients"`
	Sessions int    `json:"sessions"`
	Size     string `json:"size"`
	Batch    int    `json:"entries_per_call,omitempty"` // > 1: entries per append call

	Entries       uint64  `json:"entries"` // acknowledged during the measurement
	Bytes         uint64  `json:"bytes"`   // their lines, newline included
	Seconds       float64 `json:"seconds"`
	EntriesPerSec float64 `json:"entries_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"` // 10^6 bytes
	Latency       Latency `json:"latency"`    // per append call, as the client sees it

	// From the target's own counters (sessiond's Status; the in-process
	// targets count the same way), deltas over the measurement.
	Syncs          uint64  `json:"syncs,omitempty"`
	StoredEntries  uint64  `json:"stored_entries,omitempty"`
	Appends        uint64  `json:"appends,omitempty"`
	EntriesPerSync float64 `json:"entries_per_sync,omitempty"` // mean group-commit batch
	CPUSeconds     float64 `json:"cpu_seconds,omitempty"`
	CPUOf          string  `json:"cpu_of,omitempty"`
	CPUPerEntryUS  float64 `json:"cpu_per_entry_us,omitempty"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes,omitempty"`
	PeakRSSNote    string  `json:"peak_rss_note,omitempty"`
	WarmupEntries  uint64  `json:"warmup_entries"`
	SettleSeconds  float64 `json:"settle_seconds,omitempty"` // flush into the canonical files after the run
	Verified       *bool   `json:"verified,omitempty"`
	VerifyError    string  `json:"verify_error,omitempty"`
	Error          string  `json:"error,omitempty"`
	RatioToNaive   float64 `json:"ratio_to_a,omitempty"`
	RatioToCeiling float64 `json:"ratio_to_c,omitempty"`
	RatioToNoSync  float64 `json:"ratio_to_b,omitempty"`
	ProfileFile    string  `json:"cpu_profile,omitempty"`
	TotalAcked     uint64  `json:"total_acknowledged"`          // warm-up included: what verify compares with
	ClientAwake    bool    `json:"client_kept_awake,omitempty"` // measured with keepAwake (a diagnosis)
}

type clientOut struct {
	lat     []int64
	entries uint64
	bytes   uint64
	err     error
}

// run drives d with w and measures it.
func run(ctx context.Context, d driver, w *workload, r *Result) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.Clients, r.Sessions, r.Size = w.clients, w.sessions, w.size.String()
	defer func() {
		if cerr := d.close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
		if err != nil {
			r.Error = err.Error()
		}
	}()
	var bd batchDriver
	if w.batch > 1 {
		var ok bool
		if bd, ok = d.(batchDriver); !ok {
			return fmt.Errorf("target %s stores one entry per call: no --batch", r.Target)
		}
		r.Batch = w.batch
	}
	if err := d.open(ctx, w); err != nil {
		return fmt.Errorf("open: %w", err)
	}

	t := &tally{perClient: make([]acc, w.clients), perSession: make([]acc, w.sessions)}
	var tmu sync.Mutex
	outs := make([]clientOut, w.clients)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time
	var budget atomic.Int64
	budget.Store(w.entries)
	var failed atomic.Bool

	for c := range w.clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			o := &outs[c]
			s := c % w.sessions
			sid := w.sessionIDs[s]
			rng := rand.New(rand.NewPCG(w.seed, uint64(c)+1))
			var buf []byte
			var seq uint64
			next := func() []byte {
				size := w.size.Size(rng)
				if cap(buf) < size+512 {
					buf = make([]byte, 0, size+512)
				}
				// The line is followed by its newline in buf: the
				// file targets write both in one call.
				buf = appendEntry(buf[:0], size, sid, newUUID(rng), seq)
				buf = append(buf, '\n')
				seq++
				return buf[:len(buf)-1]
			}
			ack := func(line []byte) {
				tmu.Lock()
				t.perClient[c].entries++
				t.perClient[c].bytes += uint64(len(line)) + 1
				t.perSession[s].entries++
				t.perSession[s].bytes += uint64(len(line)) + 1
				tmu.Unlock()
			}
			// Warm-up: one append, untimed (connection, session and
			// file creation), then wait for everyone.
			line := next()
			werr := d.append(ctx, c, s, line)
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
				n := max(w.batch, 1)
				if w.entries > 0 {
					if n = claim(&budget, n); n == 0 {
						return
					}
				} else if time.Now().After(deadline) {
					return
				}
				var err error
				var lat time.Duration
				if w.batch > 1 {
					lines = lines[:0]
					for range n {
						lines = append(lines, bytes.Clone(next()))
					}
					t0 := time.Now()
					err = bd.appendBatch(ctx, c, s, lines)
					lat = time.Since(t0)
				} else {
					line = next()
					t0 := time.Now()
					err = d.append(ctx, c, s, line)
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
	for i := range w.clients {
		if outs[i].err != nil {
			close(start)
			done.Wait()
			return outs[i].err
		}
	}
	var dd *daemonDriver
	if x, ok := d.(*daemonDriver); ok {
		dd = x
		if dd.resetHWM && dd.pid > 0 {
			if err := resetHWM(dd.pid); err == nil {
				r.PeakRSSNote = "peak over this run (VmHWM reset before it)"
			}
		}
		if r.PeakRSSNote == "" {
			r.PeakRSSNote = "peak since sessiond started (VmHWM)"
		}
	}
	before, err := d.counters(ctx)
	if err != nil {
		close(start)
		done.Wait()
		return fmt.Errorf("counters: %w", err)
	}
	if w.cpuProfile != "" {
		f, err := os.Create(w.cpuProfile)
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
		r.ProfileFile = w.cpuProfile
	}
	if w.awake {
		stop := keepAwake()
		defer stop()
		r.ClientAwake = true
	}
	t0 := time.Now()
	deadline = t0.Add(w.duration)
	close(start)
	done.Wait()
	elapsed := time.Since(t0)
	if w.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	after, cerr := d.counters(ctx)
	for i := range outs {
		if outs[i].err != nil {
			return outs[i].err
		}
	}
	if cerr != nil {
		return fmt.Errorf("counters: %w", cerr)
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
	r.Latency = latencyOf(lat)
	for _, a := range t.perClient {
		r.TotalAcked += a.entries
	}
	r.WarmupEntries = r.TotalAcked - r.Entries
	if before.has {
		r.Syncs = after.syncs - before.syncs
		r.StoredEntries = after.entries - before.entries
		r.Appends = after.appends - before.appends
		if r.Syncs > 0 {
			r.EntriesPerSync = float64(r.StoredEntries) / float64(r.Syncs)
		}
	}
	if before.cpuOK && after.cpuOK {
		r.CPUSeconds = (after.cpu - before.cpu).Seconds()
		r.CPUOf = after.cpuOf
		if r.Entries > 0 {
			r.CPUPerEntryUS = r.CPUSeconds * 1e6 / float64(r.Entries)
		}
	}
	if dd != nil && dd.hwmOK {
		r.PeakRSSBytes = dd.hwm
	}

	ts := time.Now()
	if err := d.settle(ctx); err != nil {
		return fmt.Errorf("settle (flush): %w", err)
	}
	r.SettleSeconds = time.Since(ts).Seconds()
	if w.verify {
		ok := true
		if err := d.verify(ctx, t); err != nil {
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

func latencyOf(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	slices.Sort(ns)
	pct := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ns)))) - 1
		i = max(0, min(i, len(ns)-1))
		return float64(ns[i]) / 1e3
	}
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return Latency{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: float64(ns[len(ns)-1]) / 1e3, Mean: sum / float64(len(ns)) / 1e3}
}
