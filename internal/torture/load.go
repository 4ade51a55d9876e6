package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// callTimeout bounds one call; a call that takes longer is a failure of
// the daemon, not of the load.
const callTimeout = 60 * time.Second

// batch is one Append as sent.
type batch struct {
	sess    *session
	entries [][]byte
	keys    []string
	bytes   int64
	allUUID bool
}

// loadClient is one agent: its own connection, its own random stream, its
// own sequence of keys.
type loadClient struct {
	id  int
	r   *runner
	rng *rand.Rand
	gen *entryGen
	seq uint64
	// retries are batches whose Append failed and whose entries all carry
	// a uuid: they are sent again after the restart, which must store
	// each entry exactly once whatever the first attempt did.
	retries []*batch
}

// cycleStats is what one client did in one cycle.
type cycleStats struct {
	sent, acked, bytesAcked, okAppends, failedAppends, ambiguous, retried uint64
	flushes, flushesFailed                                                uint64
	largest                                                               int
	codes                                                                 map[string]uint64
	problems                                                              []string
}

func (c *loadClient) dropRetries(s *session) {
	kept := c.retries[:0]
	for _, b := range c.retries {
		if b.sess != s {
			kept = append(kept, b)
		}
	}
	c.retries = kept
}

// load runs every client until stop is closed (or the daemon refuses
// them), then adds up what they did.
func (r *runner) load(cycle int, stop <-chan struct{}) {
	var budget atomic.Int64
	budget.Store(r.cfg.MaxCycleBytes)
	sessions := r.ledger.activeSessions()
	stats := make([]cycleStats, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i] = c.run(cycle, sessions, stop, &budget)
		}()
	}
	wg.Wait()
	rep := r.rep
	for _, s := range stats {
		rep.EntriesSent += s.sent
		rep.EntriesAcked += s.acked
		rep.BytesAcked += s.bytesAcked
		rep.AppendsOK += s.okAppends
		rep.AppendsFailed += s.failedAppends
		rep.Ambiguous += s.ambiguous
		rep.Retried += s.retried
		rep.Flushes += s.flushes
		rep.FlushesFailed += s.flushesFailed
		rep.LargestAcked = max(rep.LargestAcked, s.largest)
		for k, n := range s.codes {
			rep.ErrorCodes[k] += n
		}
		for _, p := range s.problems {
			rep.fail("cycle %d: %s", cycle, p)
		}
	}
}

func (c *loadClient) run(cycle int, sessions []*session, stop <-chan struct{}, budget *atomic.Int64) cycleStats {
	st := cycleStats{codes: map[string]uint64{}}
	if c.gen == nil {
		c.gen = &entryGen{rng: c.rng, corpus: c.r.corpus, max: c.r.cfg.MaxEntry}
	}
	cl, err := client.Dial(c.r.socket, client.WithRetry(1, 0))
	if err != nil {
		st.problems = append(st.problems, fmt.Sprintf("client %d: dial: %v", c.id, err))
		return st
	}
	defer cl.Close()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// First the batches the last signal left undecided.
	for len(c.retries) > 0 {
		if stopped() {
			return st
		}
		b := c.retries[0]
		st.retried += uint64(len(b.keys))
		if !c.send(cl, b, cycle, true, &st) {
			return st
		}
		c.retries = c.retries[1:]
	}
	sess := sessions[c.rng.IntN(len(sessions))]
	for !stopped() {
		if budget.Load() <= 0 {
			<-stop
			break
		}
		if c.rng.Float64() < c.r.cfg.FlushProb {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_, err := cl.Flush(ctx, client.Session{Cwd: sess.cwd, ID: sess.id})
			cancel()
			st.flushes++
			if err != nil && status.Code(err) != codes.NotFound {
				st.flushesFailed++
			}
			continue
		}
		b := c.makeBatch(sess)
		budget.Add(-b.bytes)
		if !c.send(cl, b, cycle, false, &st) {
			break
		}
		if c.rng.IntN(20) == 0 {
			sess = sessions[c.rng.IntN(len(sessions))]
		}
	}
	return st
}

func (c *loadClient) makeBatch(s *session) *batch {
	n := batchSize(c.rng)
	b := &batch{sess: s, allUUID: true}
	for i := 0; i < n; i++ {
		c.seq++
		key := fmt.Sprintf("c%d-%d", c.id, c.seq)
		withUUID := c.rng.IntN(4) > 0
		line, _ := c.gen.entry(key, s.id, s.cwd, entrySize(c.rng, c.r.cfg.MaxEntry), withUUID)
		b.entries = append(b.entries, line)
		b.keys = append(b.keys, key)
		b.bytes += int64(len(line))
		b.allUUID = b.allUUID && withUUID
	}
	return b
}

// send appends b once. It returns false when the call failed: the client
// stops for this cycle (the daemon is going away).
func (c *loadClient) send(cl *client.Client, b *batch, cycle int, retry bool, st *cycleStats) bool {
	c.r.ledger.sent(b.keys, b.sess, cycle)
	st.sent += uint64(len(b.keys))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	resp, err := cl.Append(ctx, client.Session{Cwd: b.sess.cwd, ID: b.sess.id}, b.entries...)
	cancel()
	if err != nil {
		st.failedAppends++
		st.ambiguous += uint64(len(b.keys))
		st.codes[status.Code(err).String()]++
		if status.Code(err) == codes.DeadlineExceeded {
			st.problems = append(st.problems, fmt.Sprintf("client %d: an append took over %v: %v", c.id, callTimeout, err))
		}
		if b.allUUID && !retry {
			c.retries = append(c.retries, b)
		}
		return false
	}
	c.r.ledger.acked(b.keys)
	st.okAppends++
	st.acked += uint64(len(b.keys))
	for _, e := range b.entries {
		st.bytesAcked += uint64(len(e))
		st.largest = max(st.largest, len(e))
	}
	if got := resp.GetSession().GetPath(); got != b.sess.path {
		st.problems = append(st.problems, fmt.Sprintf("client %d: sessiond stored session %s at %s, not at %s", c.id, b.sess.id, got, b.sess.path))
	}
	if len(resp.GetResults()) != len(b.entries) {
		st.problems = append(st.problems, fmt.Sprintf("client %d: %d results for %d entries", c.id, len(resp.GetResults()), len(b.entries)))
		return true
	}
	for i, res := range resp.GetResults() {
		if !retry && res.GetOutcome() != sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED {
			st.problems = append(st.problems, fmt.Sprintf("client %d: entry %s sent for the first time was answered %v", c.id, b.keys[i], res.GetOutcome()))
		}
	}
	return true
}

// verify checks the files against the ledger and adds the findings to the
// report.
func (r *runner) verify(when string) {
	v, err := r.ledger.verify()
	r.rep.Verifications++
	if err != nil {
		r.rep.fail("%s: verification could not read the files: %v", when, err)
		return
	}
	r.rep.LinesVerified += v.lines
	r.rep.BytesVerified += v.bytes
	r.rep.Lost += v.lost
	r.rep.Duplicated += v.dup
	r.rep.Torn += v.torn
	r.rep.Unknown += v.unknown
	r.rep.Misplaced += v.misplac
	r.rep.TempFilesLeft += v.tempFiles
	for _, k := range v.ambiguousPresent {
		r.rep.ambiguousPresent[k] = true
	}
	for _, p := range v.problems {
		r.rep.fail("%s: %s", when, p)
	}
}

// purge deletes s for good through the daemon.
func (r *runner) purge(ctx context.Context, s *session) error {
	cl, err := client.Dial(r.socket, client.WithRetry(1, 0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err = cl.Delete(ctx, client.Session{Cwd: s.cwd, ID: s.id}, true)
	return err
}
