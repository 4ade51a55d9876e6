package recovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// recoveryFill appends to n sessions until each holds perSession bytes,
// with recoveryClients connections taking sessions in turn. Entries of a
// session are drawn from a generator seeded by the session's index, and
// hashed as they are sent.
func recoveryFill(ctx context.Context, socket, projectKey string, n int, perSession, seed uint64) ([]*recoverySession, error) {
	sizer, err := harness.ParseSize("dist:agent")
	if err != nil {
		return nil, err
	}
	sessions := make([]*recoverySession, n)
	ids := rand.New(rand.NewPCG(seed, 0x7265636f76657279))
	for i := range sessions {
		sessions[i] = &recoverySession{id: harness.NewUUID(ids)}
	}
	work := make(chan int)
	errc := make(chan error, recoveryClients)
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range recoveryClients {
		c, err := client.Dial(socket, client.WithRetry(1, 0))
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for i := range work {
				if err := fillSession(cctx, c, projectKey, sessions[i], i, perSession, seed, sizer); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for i := range sessions {
		select {
		case work <- i:
		case <-cctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return sessions, nil
}

func fillSession(ctx context.Context, c *client.Client, projectKey string, s *recoverySession, idx int, perSession, seed uint64, sizer harness.Sizer) error {
	r := rand.New(rand.NewPCG(seed, uint64(idx)))
	sess := client.Session{ProjectKey: projectKey, ID: s.id}
	h := sha256.New()
	var batch [][]byte
	batchBytes := 0
	send := func() error {
		resp, err := c.Append(ctx, sess, batch...)
		if err != nil {
			return fmt.Errorf("append to %s: %w", s.id, err)
		}
		if len(resp.GetResults()) != len(batch) {
			return fmt.Errorf("append to %s: %d results for %d entries", s.id, len(resp.GetResults()), len(batch))
		}
		for _, res := range resp.GetResults() {
			if res.GetOutcome() != sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED {
				return fmt.Errorf("append to %s: entry %s %v", s.id, res.GetUuid(), res.GetOutcome())
			}
		}
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for s.bytes < perSession {
		// The last entry is cut to what the session still lacks, so the
		// total is 1 GiB and not more (a 1 MiB draw at the
		// end would add up to 1 MiB to a session).
		size := sizer.Size(r)
		if left := int(perSession-s.bytes) - 1; size > left {
			size = max(left, harness.MinEntry)
		}
		line := harness.AppendEntry(nil, size, s.id, harness.NewUUID(r), s.entries)
		h.Write(line)
		h.Write([]byte{'\n'})
		s.entries++
		s.bytes += uint64(len(line)) + 1
		batch = append(batch, line)
		batchBytes += len(line)
		if batchBytes >= recoveryBatchBytes {
			if err := send(); err != nil {
				return err
			}
		}
	}
	if len(batch) > 0 {
		if err := send(); err != nil {
			return err
		}
	}
	copy(s.sum[:], h.Sum(nil))
	return nil
}

// recoveryVerify flushes every session and checks that its canonical file
// holds exactly the lines sent, in order.
func recoveryVerify(ctx context.Context, socket, ddir, projectKey string, sessions []*recoverySession) error {
	c, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.FlushAll(ctx, func(*sessiondv1.FlushedSession) error { return nil }); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	var errs []error
	for _, s := range sessions {
		path := harness.TranscriptPath(filepath.Join(ddir, "root"), client.Session{ProjectKey: projectKey, ID: s.id})
		n, size, sum, err := hashLines(path)
		if err != nil {
			return err
		}
		if n != s.entries || size != s.bytes || sum != s.sum {
			errs = append(errs, fmt.Errorf("%s: %d lines, %d bytes (content equal: %v); %d entries, %d bytes acknowledged",
				path, n, size, sum == s.sum, s.entries, s.bytes))
		}
	}
	return errors.Join(errs...)
}

// hashLines returns the number of lines of path, its size and SHA-256; a
// last line without its newline is an error.
func hashLines(path string) (lines, size uint64, sum [sha256.Size]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, sum, err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var last byte = '\n'
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			lines += uint64(bytes.Count(buf[:n], []byte{'\n'}))
			size += uint64(n)
			last = buf[n-1]
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, sum, fmt.Errorf("read %s: %w", path, rerr)
		}
	}
	if last != '\n' {
		return 0, 0, sum, fmt.Errorf("%s ends without a newline", path)
	}
	copy(sum[:], h.Sum(nil))
	return lines, size, sum, nil
}

// waitReplayed polls Status until sessiond has no journal left to replay
// into its transcript, and returns the time since exec (serving took
// served of it) and that Status.
func waitReplayed(ctx context.Context, p *harness.Daemon, served time.Duration) (time.Duration, *sessiondv1.StatusResponse, error) {
	start := time.Now().Add(-served)
	deadline := time.Now().Add(recoveryStartTimeout)
	for {
		st, err := harness.StatusOf(ctx, p.Socket)
		if err != nil {
			return 0, nil, err
		}
		if st.GetReplayPending() == 0 {
			return time.Since(start), st, nil
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("sessiond still had %d journals to replay after %v", st.GetReplayPending(), recoveryStartTimeout)
		}
		// Each poll dials afresh: not so often that it takes CPU from
		// the replay it measures.
		time.Sleep(20 * time.Millisecond)
	}
}
