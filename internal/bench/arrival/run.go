package arrival

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// watchedSessions is how many sessions' transcripts the staleness watcher
// reads (the first ones; every session behaves alike).
const watchedSessions = 50

// run is one variant's load on one sessiond.
type run struct {
	v variant
	// floorFile is the echo server's file, for the floor variant.
	floorFile string
	pid       int
	root      string
	conns     []*client.Client
	agents    []*agent
	watch     *watcher
	idle      snapshot // before any session existed
}

// agent is one session and what it was acknowledged.
type agent struct {
	sess    client.Session
	conn    *client.Client
	rng     *rand.Rand
	size    harness.Sizer
	seq     uint64
	acked   harness.Acc // warm-up included: what its transcript must hold
	inWin   harness.Acc // in the window
	lat     []int64     // per call in the window, ns
	watched bool
}

func newRun(ctx context.Context, socket string, v variant, seed uint64) (*run, error) {
	r := &run{v: v}
	for range min(conns, v.sessions) {
		c, err := client.Dial(socket, client.WithRetry(1, 0))
		if err != nil {
			r.close()
			return nil, err
		}
		r.conns = append(r.conns, c)
	}
	st, err := r.conns[0].Status(ctx)
	if err != nil {
		r.close()
		return nil, err
	}
	r.pid, r.root = int(st.GetPid()), st.GetRoot()
	if r.idle, err = takeSnapshot(ctx, r.conns[0], r.pid); err != nil {
		r.close()
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x61727269))
	project := fmt.Sprintf("-sessiond-bench-arrival-%s-%08x", v.id, uint32(seed))
	var watched []client.Session
	for i := range v.sessions {
		a := &agent{sess: client.Session{ProjectKey: project, ID: harness.NewUUID(rng)}, conn: r.conns[i%len(r.conns)],
			rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), size: v.size, watched: i < watchedSessions && !v.floor}
		if a.watched {
			watched = append(watched, a.sess)
		}
		r.agents = append(r.agents, a)
	}
	r.watch = newWatcher(r.root, watched)
	return r, nil
}

func (r *run) close() {
	for _, c := range r.conns {
		c.Close()
	}
}

// send appends one batch and checks every entry was stored; it returns
// the batch's uuids.
func (a *agent) send(ctx context.Context) ([]string, harness.Acc, error) {
	var lines [][]byte
	var uuids []string
	var n harness.Acc
	for range batchEntries {
		id := harness.NewUUID(a.rng)
		line := harness.AppendEntry(nil, a.size.Size(a.rng), a.sess.ID, id, a.seq)
		a.seq++
		lines, uuids = append(lines, line), append(uuids, id)
		n.Entries++
		n.Bytes += uint64(len(line)) + 1
	}
	resp, err := a.conn.Append(ctx, a.sess, lines...)
	if err != nil {
		return nil, n, fmt.Errorf("append to %s: %w", a.sess.ID, err)
	}
	if len(resp.GetResults()) != len(lines) {
		return nil, n, fmt.Errorf("append to %s: %d results for %d entries", a.sess.ID, len(resp.GetResults()), len(lines))
	}
	for _, res := range resp.GetResults() {
		if res.GetOutcome() != sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED {
			return nil, n, fmt.Errorf("append to %s: entry %s %v", a.sess.ID, res.GetUuid(), res.GetOutcome())
		}
	}
	a.acked.Entries += n.Entries
	a.acked.Bytes += n.Bytes
	return uuids, n, nil
}

// warmUp creates every session with one batch and flushes it, untimed, so
// that the window sees running agents rather than new sessions.
func (r *run) warmUp(ctx context.Context) error {
	return harness.ForEach(ctx, len(r.agents), warmConc, func(i int) error {
		a := r.agents[i]
		uuids, _, err := a.send(ctx)
		if err != nil {
			return err
		}
		if a.watched {
			r.watch.acked(uuids, time.Now())
		}
		if r.v.floor {
			return nil // the echo server keeps no sessions to flush
		}
		_, err = a.conn.Flush(ctx, a.sess)
		return err
	})
}

// drive runs the window from t0 to end: each agent thinks for a time drawn
// from an exponential distribution of mean v.think, appends a batch and
// waits for its acknowledgement, again and again; a batch whose think time
// would end after the window is not sent.
func (r *run) drive(ctx context.Context, t0, end time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(r.agents))
	var wg sync.WaitGroup
	for i, a := range r.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.agentLoop(ctx, a, t0, end); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *run) agentLoop(ctx context.Context, a *agent, t0, end time.Time) error {
	next := t0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		next = next.Add(time.Duration(a.rng.ExpFloat64() * float64(r.v.think)))
		if !next.Before(end) {
			return nil
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil
		}
		sent := time.Now()
		uuids, n, err := a.send(ctx)
		if err != nil {
			return err
		}
		acked := time.Now()
		if a.watched {
			r.watch.acked(uuids, acked)
		}
		a.lat = append(a.lat, int64(acked.Sub(sent)))
		a.inWin.Entries += n.Entries
		a.inWin.Bytes += n.Bytes
		// The next think time starts once the agent has its answer.
		next = acked
	}
}

// verify flushes every session and checks its transcript holds exactly the
// entries acknowledged to it, whole lines.
func (r *run) verify(ctx context.Context) error {
	switch {
	case r.v.floor && r.v.durable:
		return r.verifyFloor()
	case r.v.floor:
		return nil // kept nowhere; the counters were checked (tally)
	}
	return harness.ForEach(ctx, len(r.agents), warmConc, func(i int) error {
		a := r.agents[i]
		if _, err := a.conn.Flush(ctx, a.sess); err != nil {
			return err
		}
		path := harness.TranscriptPath(r.root, a.sess)
		got, err := harness.CountLines(path)
		if err != nil {
			return err
		}
		if got != a.acked {
			return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) acknowledged", path, got.Entries, got.Bytes, a.acked.Entries, a.acked.Bytes)
		}
		return nil
	})
}

// verifyFloor checks the echo server's file holds as many lines and bytes
// as were acknowledged: it stores no session apart.
func (r *run) verifyFloor() error {
	var want harness.Acc
	for _, a := range r.agents {
		want.Entries += a.acked.Entries
		want.Bytes += a.acked.Bytes
	}
	path := r.floorFile
	got, err := harness.CountLines(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) acknowledged", path, got.Entries, got.Bytes, want.Entries, want.Bytes)
	}
	return nil
}
