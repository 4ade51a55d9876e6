package compaction

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// compSession is the one session the scenario writes, with everything
// the client appended to it.
type compSession struct {
	api            sessiondv1.SessiondClient
	ref            *sessiondv1.SessionRef
	sid            string
	rng            *rand.Rand
	seq            uint64
	sum            hash.Hash // SHA-256 of every line appended, newline included, in order
	entries, bytes uint64
	appends        uint64
	path           string
}

// appendEntries sends n entries of compEntrySize bytes, batch per Append,
// one call after the other as one agent does. lat, when not nil, gets the
// duration of each call.
func (s *compSession) appendEntries(ctx context.Context, n, batch int, lat *[]int64) error {
	buf := make([]byte, 0, batch*compEntrySize)
	entries := make([][]byte, 0, batch)
	for n > 0 {
		k := min(batch, n)
		buf, entries = buf[:0], entries[:0]
		for range k {
			start := len(buf)
			buf = harness.AppendEntry(buf, compEntrySize, s.sid, harness.NewUUID(s.rng), s.seq)
			s.seq++
			entries = append(entries, buf[start:len(buf):len(buf)])
		}
		t0 := time.Now()
		resp, err := s.api.Append(ctx, &sessiondv1.AppendRequest{Session: s.ref, Entries: entries})
		if err != nil {
			return fmt.Errorf("append %d entries to %s after %d: %w", k, s.sid, s.entries, err)
		}
		if lat != nil {
			*lat = append(*lat, time.Since(t0).Nanoseconds())
		}
		s.appends++
		if len(resp.GetResults()) != k {
			return fmt.Errorf("append: %d results for %d entries", len(resp.GetResults()), k)
		}
		for i, r := range resp.GetResults() {
			if r.GetOutcome() != sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED {
				return fmt.Errorf("append: entry %d of a batch: outcome %v, want stored", i, r.GetOutcome())
			}
			s.sum.Write(entries[i])
			s.sum.Write([]byte{'\n'})
			s.bytes += uint64(len(entries[i])) + 1
		}
		s.entries += uint64(k)
		if resp.GetEntries() != s.entries {
			return fmt.Errorf("append: the session holds %d entries, %d appended", resp.GetEntries(), s.entries)
		}
		if s.path == "" {
			s.path = resp.GetSession().GetPath()
		}
		n -= k
	}
	return nil
}

// flush compacts the session and checks the daemon's answer against what
// was appended.
func (s *compSession) flush(ctx context.Context) error {
	stream, err := s.api.Flush(ctx, &sessiondv1.FlushRequest{Session: s.ref})
	if err != nil {
		return fmt.Errorf("flush %s: %w", s.sid, err)
	}
	var got []*sessiondv1.FlushedSession
	err = client.Receive(stream, func(resp *sessiondv1.FlushResponse) error {
		got = append(got, resp.GetSessions()...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("flush %s: %w", s.sid, err)
	}
	if len(got) != 1 {
		return fmt.Errorf("flush %s: %d sessions in the answer", s.sid, len(got))
	}
	if got := got[0].GetCanonicalBytes(); got != s.bytes {
		return fmt.Errorf("flush %s: canonical file of %d bytes, %d appended", s.sid, got, s.bytes)
	}
	return nil
}

// verify checks that the canonical file holds exactly the appended lines,
// in order: same count, same bytes, same SHA-256.
func (s *compSession) verify() error {
	n, err := harness.CountLines(s.path)
	if err != nil {
		return err
	}
	if n.Entries != s.entries || n.Bytes != s.bytes {
		return fmt.Errorf("%s holds %d entries (%d bytes), %d (%d bytes) appended", s.path, n.Entries, n.Bytes, s.entries, s.bytes)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s: %w", s.path, err)
	}
	if string(h.Sum(nil)) != string(s.sum.Sum(nil)) {
		return fmt.Errorf("%s: %d entries as appended, but their content or order differs", s.path, n.Entries)
	}
	return nil
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// dialCounting connects to sessiond like client.Dial, but counts the bytes
// the daemon sends on the connection: the daemon's wchar includes its
// socket writes, which are not disk writes.
func dialCounting(socket string, n *atomic.Uint64) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///sessiond",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: n}, nil
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	)
}
