package arrival

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// snapshot is the daemon's state at one instant: its Status counters and
// what /proc says of it.
type snapshot struct {
	at                            time.Time
	appends, entries, compactions uint64
	// journalBytes, compactedBytes, syncs: Status journal_bytes,
	// compacted_bytes and journal_syncs (what the bytes written split into).
	journalBytes, compactedBytes, syncs uint64
	cpu                                 time.Duration
	writeBytes                          uint64
	rss, hwm                            int64
	fds, deleted                        int
	self                                time.Duration // the bench process's CPU
}

func takeSnapshot(ctx context.Context, c *client.Client, pid int) (snapshot, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{at: time.Now(), appends: st.GetAppends(), entries: st.GetEntriesStored(), compactions: st.GetCompactions(), self: selfCPU(),
		journalBytes: st.GetJournalBytes(), compactedBytes: st.GetCompactedBytes(), syncs: st.GetJournalSyncs()}
	if s.cpu, err = harness.ProcCPU(pid); err != nil {
		return s, err
	}
	io, err := harness.ReadProcIO(pid)
	if err != nil {
		return s, err
	}
	s.writeBytes = io.WriteBytes
	if s.rss, s.hwm, err = harness.ProcMem(pid); err != nil {
		return s, err
	}
	s.fds, s.deleted, err = harness.FDUsage(pid)
	return s, err
}

// measured is what one variant's window gave.
type measured struct {
	sessions      int
	window        time.Duration
	calls         int     // append calls acknowledged in the window
	appended      uint64  // their bytes, newlines included
	offered       float64 // appends/s the agents would make with instant answers
	latency       harness.Latency
	idle          snapshot // before any session existed
	before, after snapshot
	fdMax, fdDel  int
	fdSamples     int
	stale         staleness
	verified      bool
}

func (m *measured) achieved() float64 { return float64(m.calls) / m.window.Seconds() }
func (m *measured) wall() time.Duration {
	return m.after.at.Sub(m.before.at)
}
func (m *measured) cpuPct() float64 {
	return (m.after.cpu - m.before.cpu).Seconds() / m.wall().Seconds() * 100
}
func (m *measured) compactionsPerSec() float64 {
	return float64(m.after.compactions-m.before.compactions) / m.wall().Seconds()
}
func (m *measured) writeRatio() float64 {
	return float64(m.after.writeBytes-m.before.writeBytes) / float64(m.appended)
}

// measure warms the sessions up, runs the window, then lets the watcher
// find what was acknowledged, and checks the Status counters against what
// the agents were acknowledged.
func (r *run) measure(ctx context.Context, env *harness.Env) (*measured, error) {
	if err := r.warmUp(ctx); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	m := &measured{idle: r.idle, sessions: r.v.sessions, window: r.v.window, offered: float64(r.v.sessions) / r.v.think.Seconds()}
	var err error
	if m.before, err = takeSnapshot(ctx, r.conns[0], r.pid); err != nil {
		return nil, err
	}
	stopWatch := make(chan struct{})
	watched := r.watch.watch(stopWatch)
	fds := harness.SampleFDs(r.pid, fdEvery)
	t0 := time.Now()
	derr := r.drive(ctx, t0, t0.Add(r.v.window))
	m.fdMax, m.fdSamples, err = fds.Finish()
	m.fdDel = fds.MaxDeleted()
	if derr != nil {
		close(stopWatch)
		<-watched
		return nil, derr
	}
	if err != nil {
		return nil, err
	}
	if m.after, err = takeSnapshot(ctx, r.conns[0], r.pid); err != nil {
		return nil, err
	}
	m.fdMax, m.fdDel = max(m.fdMax, m.after.fds), max(m.fdDel, m.after.deleted)
	close(stopWatch)
	if err := <-watched; err != nil {
		return nil, err
	}
	// The drain waits as long as the bound sessiond documents allows and
	// then some, in the small runs too: an idle session is compacted up to
	// --compact-within after its oldest pending entry, and a loaded
	// machine adds its slot waits. It ends as soon as every entry is found.
	if err := r.watch.drain(time.Duration(env.Scaled(int64(staleLimitSecs+10)*int64(time.Second), int64(20*time.Second)))); err != nil {
		return nil, err
	}
	m.stale = r.watch.result(time.Now())
	if err := r.tally(m); err != nil {
		return nil, err
	}
	if env.Verify {
		if err := r.verify(ctx); err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		m.verified = true
	}
	return m, nil
}

// tally adds up the agents' calls and checks the daemon counted the same.
func (r *run) tally(m *measured) error {
	var lat []int64
	var entries uint64
	for _, a := range r.agents {
		lat = append(lat, a.lat...)
		m.calls += len(a.lat)
		m.appended += a.inWin.Bytes
		entries += a.inWin.Entries
	}
	m.latency = harness.LatencyOf(lat)
	if m.calls == 0 {
		return fmt.Errorf("no append in the window")
	}
	// The counters must tell this load's story, or the ratios drawn from
	// them mean nothing.
	if d := m.after.appends - m.before.appends; d != uint64(m.calls) || m.after.entries-m.before.entries != entries {
		return fmt.Errorf("Status counted %d appends storing %d entries over the window; %d calls of %d entries were acknowledged",
			d, m.after.entries-m.before.entries, m.calls, entries)
	}
	return nil
}

// selfCPU is the CPU time the bench process has used: the load generator's
// share of the machine, which says whether it, rather than the daemon,
// limited the rate.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m *measured) selfPct() float64 {
	return (m.after.self - m.before.self).Seconds() / m.wall().Seconds() * 100
}
