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

// Workload is one run's load.
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

// measurement is one run in progress: the clients, what they were
// acknowledged, and the gate that starts them together.
type measurement struct {
	d     Driver
	bd    BatchDriver // when w.Batch > 1
	w     *Workload
	r     *harness.Result
	t     *Tally
	tmu   sync.Mutex
	outs  []clientOut
	ready sync.WaitGroup
	done  sync.WaitGroup
	start chan struct{}
	// deadline is set before start is closed.
	deadline time.Time
	budget   atomic.Int64
	failed   atomic.Bool
}

// Measure drives d with w and measures it: every client makes one untimed
// append, then all start together and append until the duration or the
// entry budget is spent; the target's counters are read around that
// window, and what it holds is settled and verified after it.
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
	m := &measurement{d: d, w: w, r: r, start: make(chan struct{}),
		t: &Tally{PerClient: make([]harness.Acc, w.Clients), PerSession: make([]harness.Acc, w.Sessions)}, outs: make([]clientOut, w.Clients)}
	if w.Batch > 1 {
		var ok bool
		if m.bd, ok = d.(BatchDriver); !ok {
			return fmt.Errorf("target %s stores one entry per call: no --batch", r.Target)
		}
		r.Batch = w.Batch
	}
	if err := d.Open(ctx, w); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	m.budget.Store(w.Entries)
	for c := range w.Clients {
		m.ready.Add(1)
		m.done.Add(1)
		go m.client(ctx, c)
	}
	if err := m.warmedUp(); err != nil {
		return err
	}
	before, stop, err := m.beforeWindow(ctx)
	if err != nil {
		m.release()
		return err
	}
	elapsed := m.window()
	stop()
	after, cerr := d.Counters(ctx)
	for i := range m.outs {
		if m.outs[i].err != nil {
			return m.outs[i].err
		}
	}
	if cerr != nil {
		return fmt.Errorf("counters: %w", cerr)
	}
	m.fill(elapsed, before, after)
	return m.settle(ctx)
}

// client is client c: its warm-up append, then its measured appends.
func (m *measurement) client(ctx context.Context, c int) {
	defer m.done.Done()
	o := &m.outs[c]
	s := c % m.w.Sessions
	cl := &entrySource{sid: m.w.SessionIDs[s], size: m.w.Size, rng: rand.New(rand.NewPCG(m.w.Seed, uint64(c)+1))}
	line := cl.next()
	werr := m.d.Append(ctx, c, s, line)
	if werr == nil {
		m.ack(c, s, line)
	} else {
		o.err = fmt.Errorf("warm-up append of client %d: %w", c, werr)
		m.failed.Store(true)
	}
	m.ready.Done()
	<-m.start
	if werr != nil || m.failed.Load() {
		return
	}
	o.lat = make([]int64, 0, 1024)
	for ctx.Err() == nil && !m.failed.Load() {
		n := max(m.w.Batch, 1)
		if m.w.Entries > 0 {
			if n = claim(&m.budget, n); n == 0 {
				return
			}
		} else if time.Now().After(m.deadline) {
			return
		}
		lines, lat, err := m.call(ctx, c, s, cl, n)
		if err != nil {
			o.err = fmt.Errorf("append of client %d: %w", c, err)
			m.failed.Store(true)
			return
		}
		for _, line := range lines {
			m.ack(c, s, line)
			o.entries++
			o.bytes += uint64(len(line)) + 1
		}
		o.lat = append(o.lat, int64(lat))
	}
}

// call makes one measured call of n entries (one entry unless batched).
func (m *measurement) call(ctx context.Context, c, s int, cl *entrySource, n int) ([][]byte, time.Duration, error) {
	if m.w.Batch > 1 {
		lines := make([][]byte, 0, n)
		for range n {
			lines = append(lines, bytes.Clone(cl.next()))
		}
		t0 := time.Now()
		err := m.bd.AppendBatch(ctx, c, s, lines)
		return lines, time.Since(t0), err
	}
	line := cl.next()
	t0 := time.Now()
	err := m.d.Append(ctx, c, s, line)
	return [][]byte{line}, time.Since(t0), err
}

// entrySource makes one client's entries.
type entrySource struct {
	sid  string
	size harness.Sizer
	rng  *rand.Rand
	buf  []byte
	seq  uint64
}

// next returns the client's next line, valid until the following call.
func (e *entrySource) next() []byte {
	size := e.size.Size(e.rng)
	if cap(e.buf) < size+512 {
		e.buf = make([]byte, 0, size+512)
	}
	// The line is followed by its newline in buf: the file targets write
	// both in one call.
	e.buf = harness.AppendEntry(e.buf[:0], size, e.sid, harness.NewUUID(e.rng), e.seq)
	e.buf = append(e.buf, '\n')
	e.seq++
	return e.buf[:len(e.buf)-1]
}

func (m *measurement) ack(c, s int, line []byte) {
	m.tmu.Lock()
	defer m.tmu.Unlock()
	m.t.PerClient[c].Entries++
	m.t.PerClient[c].Bytes += uint64(len(line)) + 1
	m.t.PerSession[s].Entries++
	m.t.PerSession[s].Bytes += uint64(len(line)) + 1
}

// warmedUp waits for every client's warm-up append and returns the first
// that failed (the clients then stop).
func (m *measurement) warmedUp() error {
	m.ready.Wait()
	for i := range m.outs {
		if m.outs[i].err != nil {
			m.release()
			return m.outs[i].err
		}
	}
	return nil
}

// release lets the clients go when no window is run (they return at once,
// having seen a failure or a past deadline) and waits for them.
func (m *measurement) release() {
	m.failed.Store(true)
	close(m.start)
	m.done.Wait()
}

// beforeWindow reads the target's counters and starts what runs over the
// window (peak RSS reset, CPU profile, a kept-awake CPU); stop ends those.
func (m *measurement) beforeWindow(ctx context.Context) (before Counters, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
		stops = nil
	}
	if dd, ok := m.d.(*DaemonDriver); ok {
		m.r.PeakRSSNote = "peak since sessiond started (VmHWM)"
		if dd.ResetHWM && dd.pid > 0 && harness.ResetHWM(dd.pid) == nil {
			m.r.PeakRSSNote = "peak over this run (VmHWM reset before it)"
		}
	}
	if before, err = m.d.Counters(ctx); err != nil {
		return before, stop, fmt.Errorf("counters: %w", err)
	}
	if m.w.CPUProfile != "" {
		f, err := os.Create(m.w.CPUProfile)
		if err != nil {
			return before, stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return before, stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		m.r.ProfileFile = m.w.CPUProfile
	}
	if m.w.Awake {
		stops = append(stops, keepAwake())
		m.r.ClientAwake = true
	}
	return before, stop, nil
}

// window starts every client and waits until all have stopped.
func (m *measurement) window() time.Duration {
	t0 := time.Now()
	m.deadline = t0.Add(m.w.Duration)
	close(m.start)
	m.done.Wait()
	return time.Since(t0)
}

// fill puts what the window measured into the Result.
func (m *measurement) fill(elapsed time.Duration, before, after Counters) {
	r := m.r
	var lat []int64
	for i := range m.outs {
		r.Entries += m.outs[i].entries
		r.Bytes += m.outs[i].bytes
		lat = append(lat, m.outs[i].lat...)
		m.outs[i].lat = nil
	}
	r.Seconds = elapsed.Seconds()
	r.EntriesPerSec = float64(r.Entries) / r.Seconds
	r.MBPerSec = float64(r.Bytes) / r.Seconds / 1e6
	r.Latency = harness.LatencyOf(lat)
	for _, a := range m.t.PerClient {
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
	if dd, ok := m.d.(*DaemonDriver); ok && dd.hwmOK {
		r.PeakRSSBytes = dd.hwm
	}
}

// settle makes the target put what it buffers in its final place, timed,
// and verifies it when asked.
func (m *measurement) settle(ctx context.Context) error {
	ts := time.Now()
	if err := m.d.Settle(ctx); err != nil {
		return fmt.Errorf("settle (flush): %w", err)
	}
	m.r.SettleSeconds = time.Since(ts).Seconds()
	if m.w.Verify {
		ok := true
		if err := m.d.Verify(ctx, m.t); err != nil {
			ok = false
			m.r.VerifyError = err.Error()
		}
		m.r.Verified = &ok
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
