// Package compaction measures what sessiond writes over a session's life
// against what was appended, and one compaction of a large session
// against copying its file.
package compaction

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// The compaction scenario measures the two costs the journal-then-compact
// design adds over writing the transcript directly:
//
//  1. write amplification over a session's life: every byte is written once
//     to the journal and then again by each compaction that rewrites the
//     whole canonical file (temp copy + rename). The writer compacts when
//     the journal has grown by a fixed fraction of the file, so the total
//     stays linear; this measures the constant, from the daemon process's
//     own write syscalls (/proc/<pid>/io).
//  2. the time of one compaction of a large session, against what the
//     operation fundamentally is: copying the file and syncing it, measured
//     in the same run, in the same folder.

// Name is the scenario's name in the suite (--scenarios).
const Name = "compaction"

// Title describes the scenario in the report.
const Title = "compaction: bytes written over a session's life; one compaction of a 100 MiB session vs copy+fsync"

// Run measures the scenario on a sessiond of its own.
func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	_, sc, err := compactionRun(ctx, env)
	return sc, err
}

const (
	// compLifeEntries is the session life; 1 KiB entries as in the
	// rest of the suite, whose targets are stated for them.
	compLifeEntries = 100_000
	compEntrySize   = 1024
	// compLifeBatch entries per Append: an agent's turn writes a few
	// entries at once (a message, its tool calls, their results), and
	// sending them one per call would only make the life phase longer
	// without changing what is written to disk.
	compLifeBatch = 4
	// compBigSession is the size of the session compacted in part 2.
	compBigSession = 100 << 20
	// compPadBatch is the bytes per Append when growing the session to
	// compBigSession: latency is not measured there.
	compPadBatch = 4 << 20
	// compRounds compactions (and baselines) are timed; the medians are
	// compared, as one 100 MiB fsync on a shared disk is noisy.
	compRounds = 3
	// compTailDiv: each timed compaction moves a journal tail of
	// 1/compTailDiv of the file. It must stay below the writer's idle rule
	// (journal >= 1/16 of the file compacts after 1 s idle), or the
	// daemon could compact on its own before the timed Flush.
	compTailDiv = 64

	// The trickle: an agent's turns separated by pauses longer than the
	// idle-compaction delay. Real pauses (the model thinking) are seconds
	// against the default 1 s; both are compressed here.
	compIdleCompact = 20 * time.Millisecond
	// A session below the writer's idle floor (4 MiB), compacted after
	// every turn: compSmallTurns turns of compSmallTurn entries.
	compSmallSession = 2 << 20
	compSmallTurn    = 8
	compSmallTurns   = 20
	// The large session is compacted when the trickle reaches 1/16 of it:
	// turns of 64 KiB (a turn with a large tool result) until one
	// compaction happened, at most compLargeMaxTurns.
	compLargeTurn     = 64
	compLargeMaxTurns = 400
)

// compactionResult is what the scenario measured, for the table and for
// the test's consistency checks.
type compactionResult struct {
	Life lifeResult
	One  oneResult
	// Idle is the trickle: turns separated by pauses, each pause longer
	// than the idle-compaction delay (info, no target).
	Idle idleResult
	// Final is what the session holds at the end, as the client counted
	// what it appended (and the daemon acknowledged).
	FinalEntries, FinalBytes uint64
	Path                     string
}

type lifeResult struct {
	Entries, Appends uint64
	Appended         uint64 // bytes of the lines, newline included
	// Deltas of /proc/<pid>/io of the daemon over the phase, and the bytes
	// the daemon wrote to the client's socket in the same window (the
	// client's reads: there is no other client), which wchar counts too.
	WChar, SocketBytes, WriteBytes, CancelledBytes uint64
	// Deltas of the daemon's Status counters.
	JournalBytes, CompactedBytes, Compactions, Stored uint64
	Latency                                           harness.Latency
	Seconds, FlushSeconds, CPUSeconds                 float64
}

// FileBytes is what the daemon wrote to files: wchar without the socket.
func (l lifeResult) FileBytes() uint64 { return l.WChar - min(l.SocketBytes, l.WChar) }

type oneResult struct {
	SessionBytes uint64 // canonical file before the first timed compaction
	TailEntries  int
	TailBytes    uint64
	// Per round, in seconds.
	Flush, CopyRW, CopyCFR, CopyCFRReplace []float64
}

// idleResult is what a trickle of turns costs, in a session below the
// writer's idle floor and in the large session.
type idleResult struct {
	IdleCompact, Pause time.Duration
	Small, Large       trickleResult
}

type trickleResult struct {
	SessionBytes          uint64 // canonical file when the trickle starts
	Turns, EntriesPerTurn int
	Appended, FileBytes   uint64 // FileBytes: wchar - socket over the trickle
	Compactions           uint64
	CompactedBytes        uint64
}

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

// compactionRun starts its own sessiond and measures both parts on one
// session: the life of compLifeEntries entries, then the same session
// grown to compBigSession and compacted compRounds times.
func compactionRun(ctx context.Context, env *harness.Env) (_ *compactionResult, _ *harness.Scenario, err error) {
	lifeN := int(env.Scaled(compLifeEntries, 100))
	big := uint64(env.Scaled(compBigSession, 256<<10))
	sc := &harness.Scenario{Name: Name,
		Title: fmt.Sprintf("compaction: %d x 1 KiB entries over one session's life; one compaction of a %s session vs copy+fsync", lifeN, mib(big))}
	ddir := filepath.Join(env.Dir, "sessiond")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		return nil, sc, err
	}
	p, err := harness.StartDaemon(ctx, env.Sessiond, ddir, env.SessiondArgs)
	if err != nil {
		return nil, sc, err
	}
	defer func() {
		// p is the daemon running now: the trickle restarts it.
		if p == nil {
			return
		}
		if serr := p.Stop(60 * time.Second); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	var sockRead atomic.Uint64
	conn, err := dialCounting(p.Socket, &sockRead)
	if err != nil {
		return nil, sc, err
	}
	defer conn.Close()
	api := sessiondv1.NewSessiondClient(conn)
	st, err := api.Status(ctx, &sessiondv1.StatusRequest{})
	if err != nil {
		return nil, sc, fmt.Errorf("sessiond status: %w", err)
	}
	pid := int(st.GetPid())

	rng := rand.New(rand.NewPCG(env.Seed, 0xc0ac7))
	s := &compSession{api: api, rng: rng, sum: sha256.New(), sid: harness.NewUUID(rng)}
	s.ref = &sessiondv1.SessionRef{SessionId: s.sid,
		Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: fmt.Sprintf("-sessiond-bench-compaction-%08x", rng.Uint32())}}

	res := &compactionResult{}
	env.Logf("[%s] life: %d entries of 1 KiB, %d per Append, one session", Name, lifeN, compLifeBatch)
	res.Life, err = measureLife(ctx, env, s, pid, &sockRead, lifeN)
	if err != nil {
		return res, sc, err
	}
	env.Logf("[%s] one compaction of a %s session, %d rounds", Name, mib(big), compRounds)
	res.One, err = measureOneCompaction(ctx, env, s, big)
	res.FinalEntries, res.FinalBytes, res.Path = s.entries, s.bytes, s.path
	if err != nil {
		return res, sc, err
	}

	// The trickle needs a short idle delay (the pauses between an agent's
	// turns, seconds long, compressed): restart the daemon with it on the
	// same folders. Parts 1 and 2 ran with the default, where a scheduling
	// hiccup of the client cannot trigger an idle compaction.
	conn.Close()
	err = p.Stop(60 * time.Second)
	p = nil
	if err != nil {
		return res, sc, err
	}
	res.Idle.IdleCompact, res.Idle.Pause = compIdleCompact, 3*compIdleCompact
	p, err = harness.StartDaemon(ctx, env.Sessiond, ddir, append(slices.Clone(env.SessiondArgs), "--idle-compact", compIdleCompact.String()))
	if err != nil {
		return res, sc, err
	}
	if conn, err = dialCounting(p.Socket, &sockRead); err != nil {
		return res, sc, err
	}
	defer conn.Close()
	api = sessiondv1.NewSessiondClient(conn)
	if st, err = api.Status(ctx, &sessiondv1.StatusRequest{}); err != nil {
		return res, sc, fmt.Errorf("sessiond status: %w", err)
	}
	pid = int(st.GetPid())
	s.api = api
	small := &compSession{api: api, rng: rng, sum: sha256.New(), sid: harness.NewUUID(rng), ref: &sessiondv1.SessionRef{Project: s.ref.Project}}
	small.ref.SessionId = small.sid
	env.Logf("[%s] trickle: turns of %d entries, %v pauses, idle compaction after %v", Name, compSmallTurn, res.Idle.Pause, compIdleCompact)
	if err := small.appendEntries(ctx, compSmallSession/(compEntrySize+1), compPadBatch/(compEntrySize+1), nil); err != nil {
		return res, sc, err
	}
	if err := small.flush(ctx); err != nil {
		return res, sc, err
	}
	res.Idle.Small, err = measureTrickle(ctx, env, small, pid, &sockRead, compSmallTurn, compSmallTurns, res.Idle.Pause, false)
	if err != nil {
		return res, sc, fmt.Errorf("trickle into a small session: %w", err)
	}
	res.Idle.Large, err = measureTrickle(ctx, env, s, pid, &sockRead, compLargeTurn, compLargeMaxTurns, res.Idle.Pause, true)
	res.FinalEntries, res.FinalBytes = s.entries, s.bytes
	if err != nil {
		return res, sc, fmt.Errorf("trickle into the large session: %w", err)
	}
	fillCompactionScenario(sc, res, lifeN)
	return res, sc, nil
}

// measureLife appends n entries to the (new) session, flushes it, and takes
// the daemon's writes over the whole phase.
func measureLife(ctx context.Context, env *harness.Env, s *compSession, pid int, sockRead *atomic.Uint64, n int) (lifeResult, error) {
	var r lifeResult
	before, err := takeDaemonSnap(ctx, s, pid, sockRead)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	lat := make([]int64, 0, n/compLifeBatch+1)
	if err := s.appendEntries(ctx, n, compLifeBatch, &lat); err != nil {
		return r, err
	}
	tf := time.Now()
	if err := s.flush(ctx); err != nil {
		return r, err
	}
	r.FlushSeconds = time.Since(tf).Seconds()
	r.Seconds = time.Since(t0).Seconds()
	after, err := takeDaemonSnap(ctx, s, pid, sockRead)
	if err != nil {
		return r, err
	}
	st0, st1, io0, io1 := before.st, after.st, before.io, after.io
	sock0, sock1, cpu0, cpu1 := before.sock, after.sock, before.cpu, after.cpu
	r.Entries, r.Appends, r.Appended = s.entries, s.appends, s.bytes
	r.WChar, r.WriteBytes, r.CancelledBytes = io1.WChar-io0.WChar, io1.WriteBytes-io0.WriteBytes, io1.Cancelled-io0.Cancelled
	r.SocketBytes = sock1 - sock0
	r.JournalBytes = st1.GetJournalBytes() - st0.GetJournalBytes()
	r.CompactedBytes = st1.GetCompactedBytes() - st0.GetCompactedBytes()
	r.Compactions = st1.GetCompactions() - st0.GetCompactions()
	r.Stored = st1.GetEntriesStored() - st0.GetEntriesStored()
	r.CPUSeconds = (cpu1 - cpu0).Seconds()
	r.Latency = harness.LatencyOf(lat)
	if r.Stored != r.Entries {
		return r, fmt.Errorf("life: sessiond stored %d entries, %d appended", r.Stored, r.Entries)
	}
	if env.Verify {
		if err := s.verify(); err != nil {
			return r, fmt.Errorf("life: %w", err)
		}
	}
	return r, nil
}

// daemonSnap is what measureLife reads from the daemon before and after.
type daemonSnap struct {
	st   *sessiondv1.StatusResponse
	io   harness.ProcIO
	sock uint64
	cpu  time.Duration
}

// takeDaemonSnap reads Status before /proc: its answer is a socket write
// that the /proc figures then include.
func takeDaemonSnap(ctx context.Context, s *compSession, pid int, sockRead *atomic.Uint64) (daemonSnap, error) {
	var d daemonSnap
	var err error
	if d.st, err = s.api.Status(ctx, &sessiondv1.StatusRequest{}); err != nil {
		return d, err
	}
	if d.io, err = harness.ReadProcIO(pid); err != nil {
		return d, err
	}
	d.sock = sockRead.Load()
	if d.cpu, err = harness.ProcCPU(pid); err != nil {
		return d, err
	}
	return d, nil
}

// measureOneCompaction grows the session to big bytes, then compRounds
// times: appends a journal tail, times the Flush that compacts it, and
// times the baselines on the resulting file (the very bytes the
// compaction wrote), each with the source read once before so that both
// start from the page cache.
func measureOneCompaction(ctx context.Context, env *harness.Env, s *compSession, big uint64) (oneResult, error) {
	var r oneResult
	const line = compEntrySize + 1
	if s.bytes < big {
		n := int((big - s.bytes + line - 1) / line)
		if err := s.appendEntries(ctx, n, compPadBatch/line, nil); err != nil {
			return r, err
		}
		if err := s.flush(ctx); err != nil {
			return r, err
		}
	}
	r.SessionBytes = s.bytes
	r.TailEntries = max(int(big/compTailDiv/line), 16)
	r.TailBytes = uint64(r.TailEntries) * line
	dir := filepath.Dir(s.path)
	for round := range compRounds {
		if err := s.appendEntries(ctx, r.TailEntries, 256, nil); err != nil {
			return r, err
		}
		if err := warm(s.path); err != nil {
			return r, err
		}
		t0 := time.Now()
		if err := s.flush(ctx); err != nil {
			return r, err
		}
		r.Flush = append(r.Flush, time.Since(t0).Seconds())

		// The copies are named like no transcript (no .jsonl), so neither
		// sessiond nor a listing takes them for a session.
		rw := filepath.Join(dir, fmt.Sprintf(".bench-copy-rw-%d.tmp", round))
		cfr := filepath.Join(dir, fmt.Sprintf(".bench-copy-cfr-%d.tmp", round))
		if err := warm(s.path); err != nil {
			return r, err
		}
		d, _, err := timedCopy(s.path, rw, false, "")
		if err != nil {
			return r, err
		}
		r.CopyRW = append(r.CopyRW, d.Seconds())
		if err := warm(s.path); err != nil {
			return r, err
		}
		// Renamed over the previous copy, as a compaction replaces the
		// previous file.
		d, all, err := timedCopy(s.path, cfr, true, rw)
		if err != nil {
			return r, err
		}
		r.CopyCFR = append(r.CopyCFR, d.Seconds())
		r.CopyCFRReplace = append(r.CopyCFRReplace, all.Seconds())
		if err := os.Remove(rw); err != nil {
			return r, err
		}
		env.Logf("[%s] round %d: flush %.3f s, copy+fsync %.3f s (read/write) %.3f s (copy_file_range)",
			Name, round+1, r.Flush[round], r.CopyRW[round], r.CopyCFR[round])
	}
	if env.Verify {
		if err := s.verify(); err != nil {
			return r, fmt.Errorf("one compaction: %w", err)
		}
	}
	return r, nil
}

// measureTrickle appends turns of perTurn entries, one Append each,
// with a pause after each, and takes the daemon's writes over them. With
// untilCompacted it stops after the turn whose pause saw a compaction
// (at most turns turns); otherwise it makes exactly turns turns.
func measureTrickle(ctx context.Context, env *harness.Env, s *compSession, pid int, sockRead *atomic.Uint64, perTurn, turns int, pause time.Duration, untilCompacted bool) (trickleResult, error) {
	r := trickleResult{SessionBytes: s.bytes, EntriesPerTurn: perTurn}
	st0, err := s.api.Status(ctx, &sessiondv1.StatusRequest{})
	if err != nil {
		return r, err
	}
	io0, err := harness.ReadProcIO(pid)
	if err != nil {
		return r, err
	}
	sock0, bytes0 := sockRead.Load(), s.bytes
	var st1 *sessiondv1.StatusResponse
	for r.Turns < turns {
		if err := s.appendEntries(ctx, perTurn, perTurn, nil); err != nil {
			return r, err
		}
		r.Turns++
		time.Sleep(pause)
		if st1, err = s.api.Status(ctx, &sessiondv1.StatusRequest{}); err != nil {
			return r, err
		}
		if untilCompacted && st1.GetCompactions() > st0.GetCompactions() {
			break
		}
	}
	// A compaction still running after the last pause is part of the
	// trickle's cost: wait until the writer settles (no new compaction
	// for a few idle delays).
	for quiet := 0; quiet < 3; {
		time.Sleep(pause)
		st, err := s.api.Status(ctx, &sessiondv1.StatusRequest{})
		if err != nil {
			return r, err
		}
		if st.GetCompactions() == st1.GetCompactions() {
			quiet++
		} else {
			quiet = 0
		}
		st1 = st
	}
	io1, err := harness.ReadProcIO(pid)
	if err != nil {
		return r, err
	}
	r.Appended = s.bytes - bytes0
	WChar, sock := io1.WChar-io0.WChar, sockRead.Load()-sock0
	r.FileBytes = WChar - min(WChar, sock)
	r.Compactions = st1.GetCompactions() - st0.GetCompactions()
	r.CompactedBytes = st1.GetCompactedBytes() - st0.GetCompactedBytes()
	env.Logf("[%s] trickle into %s: %d turns, %d compactions, %.1fx written", Name, mib(r.SessionBytes), r.Turns, r.Compactions,
		float64(r.FileBytes)/float64(max(r.Appended, 1)))
	if env.Verify {
		if err := s.flush(ctx); err != nil {
			return r, err
		}
		if err := s.verify(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// warm reads path once, so that the timed operation finds it in the page
// cache, as a compaction right after the session was written does.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		_, err := f.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// timedCopy copies src to the new file dst and syncs it: with
// copy_file_range (io.Copy between two files, what Go and cp do) when cfr
// is set, otherwise with read and write of 1 MiB. When replace is set, dst
// is then renamed over replace and the folder synced, which makes it an
// atomic replace. It returns the time of copy+fsync and of everything.
func timedCopy(src, dst string, cfr bool, replace string) (copySync, all time.Duration, err error) {
	t0 := time.Now()
	in, err := os.Open(src)
	if err != nil {
		return 0, 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer out.Close()
	if cfr {
		_, err = io.Copy(out, in)
	} else {
		// The wrappers hide ReadFrom and WriteTo, so this is a plain
		// read/write loop.
		_, err = io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, make([]byte, 1<<20))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		return 0, 0, fmt.Errorf("sync %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return 0, 0, err
	}
	copySync = time.Since(t0)
	if replace == "" {
		return copySync, copySync, nil
	}
	if err := os.Rename(dst, replace); err != nil {
		return 0, 0, err
	}
	d, err := os.Open(filepath.Dir(replace))
	if err != nil {
		return 0, 0, err
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("sync folder of %s: %w", replace, err)
	}
	return copySync, time.Since(t0), nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mib(b uint64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}

func secondsList(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(parts, " / ")
}

// fillCompactionScenario turns the measurements into the table, checks
// and notes.
func fillCompactionScenario(sc *harness.Scenario, res *compactionResult, lifeN int) {
	l, o := res.Life, res.One
	app := float64(l.Appended)
	mb := func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	x := func(b uint64) string { return fmt.Sprintf("%.2fx", float64(b)/app) }
	t := &harness.Table{Columns: []string{"measurement", "value", "ratio"}}
	row := func(cells ...string) { t.Rows = append(t.Rows, cells) }
	row("life: bytes appended (lines + newline)", mb(l.Appended), "1.00x")
	row("life: written to files (wchar - socket)", mb(l.FileBytes()), x(l.FileBytes()))
	row("life: wchar (all write syscalls)", mb(l.WChar), x(l.WChar))
	row("life: of which written to the client socket", mb(l.SocketBytes), x(l.SocketBytes))
	row("life: write_bytes (dirtied for storage)", mb(l.WriteBytes), x(l.WriteBytes))
	row("life: cancelled_write_bytes", mb(l.CancelledBytes), x(l.CancelledBytes))
	row("life: Status journal_bytes + compacted_bytes", mb(l.JournalBytes+l.CompactedBytes), x(l.JournalBytes+l.CompactedBytes))
	row("life: Status journal_bytes (entries only)", mb(l.JournalBytes), x(l.JournalBytes))
	row("life: Status compacted_bytes", mb(l.CompactedBytes), x(l.CompactedBytes))
	row("life: compactions (final Flush included)", strconv.FormatUint(l.Compactions, 10), "")
	row("life: entries / Append calls", fmt.Sprintf("%d / %d", l.Entries, l.Appends), "")
	row("life: Append latency p50 / p99 / max", fmt.Sprintf("%.2f / %.2f / %.1f ms", l.Latency.P50/1e3, l.Latency.P99/1e3, l.Latency.Max/1e3), "")
	row("life: wall time / final Flush / sessiond CPU", fmt.Sprintf("%.1f s / %.3f s / %.1f s", l.Seconds, l.FlushSeconds, l.CPUSeconds), "")

	base := median(o.CopyCFR)
	baseName := "copy+fsync (copy_file_range)"
	if rw := median(o.CopyRW); rw > 0 && rw < base {
		base, baseName = rw, "copy+fsync (read/write 1 MiB)"
	}
	rel := func(xs []float64) string {
		if base <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", median(xs)/base)
	}
	sec := func(xs []float64) string { return fmt.Sprintf("%.3f s (%s)", median(xs), secondsList(xs)) }
	row("one: session before / journal tail per compaction", fmt.Sprintf("%s / %d entries, %s", mib(o.SessionBytes), o.TailEntries, mib(o.TailBytes)), "")
	row("one: Flush = one compaction, median (each)", sec(o.Flush), rel(o.Flush))
	row("one: copy+fsync, read/write 1 MiB", sec(o.CopyRW), rel(o.CopyRW))
	row("one: copy+fsync, copy_file_range", sec(o.CopyCFR), rel(o.CopyCFR))
	row("one: copy+fsync+rename+dir fsync (copy_file_range)", sec(o.CopyCFRReplace), rel(o.CopyCFRReplace))
	trickle := func(name string, tr trickleResult) {
		ratio := ""
		if tr.Appended > 0 {
			ratio = fmt.Sprintf("%.1fx", float64(tr.FileBytes)/float64(tr.Appended))
		}
		row(fmt.Sprintf("idle: trickle into a %s session (%s): %d turns of %d entries", mib(tr.SessionBytes), name, tr.Turns, tr.EntriesPerTurn),
			fmt.Sprintf("%s written for %s appended, %d compactions", mb(tr.FileBytes), mb(tr.Appended), tr.Compactions), ratio)
	}
	trickle("below the 4 MiB idle floor", res.Idle.Small)
	trickle("until one compaction", res.Idle.Large)
	row("session at the end: entries / bytes", fmt.Sprintf("%d / %d", res.FinalEntries, res.FinalBytes), "")
	sc.Table = t

	amp := harness.NewCheck("life: written to files <= 3x appended", float64(l.FileBytes())/app, 3, "x", false)
	amp.Note = fmt.Sprintf("raw wchar %.2fx incl. %.1f MB to the socket; write_bytes %.2fx; Status journal+compacted %.2fx; %d compactions",
		float64(l.WChar)/app, float64(l.SocketBytes)/1e6, float64(l.WriteBytes)/app, float64(l.JournalBytes+l.CompactedBytes)/app, l.Compactions)
	one := harness.NewCheck("one compaction <= 2x copy+fsync", 0, 2, "x", false)
	if base > 0 {
		one = harness.NewCheck("one compaction <= 2x copy+fsync", median(o.Flush)/base, 2, "x", false)
	}
	one.Note = fmt.Sprintf("medians of %d: Flush %.3f s vs %s %.3f s, files of %s to %s", len(o.Flush), median(o.Flush), baseName, base,
		mib(o.SessionBytes+o.TailBytes), mib(o.SessionBytes+uint64(len(o.Flush))*o.TailBytes))
	sc.Checks = []harness.Check{amp, one}

	sc.Notes = []string{
		fmt.Sprintf("life: one session, %d entries of 1 KiB (1025 B lines), %d per Append, sent one call after the other by one client over gRPC, "+
			"then Flush; sessiond with its default flags (compaction when the journal reaches the file's size, 1 MiB at least)", lifeN, compLifeBatch),
		"life: bytes written are deltas of the daemon's /proc/<pid>/io over the phase; wchar counts socket writes too, so the bytes the client " +
			"received on its connection (the only one) are subtracted; write_bytes counts page-cache pages dirtied, so a journal page rewritten by " +
			"successive group commits counts each time",
		fmt.Sprintf("one: the same session grown to %s in %s Appends and flushed; then %d rounds of: a journal tail of %s appended, the file read once "+
			"(page cache), Flush timed over gRPC; the file read again and copied to a new file in the same folder + fsync (read/write, then "+
			"copy_file_range renamed over the first copy + dir fsync); baseline = the faster copy+fsync, medians compared",
			mib(o.SessionBytes), mib(compPadBatch), compRounds, mib(o.TailBytes)),
		fmt.Sprintf("idle (info, no target): sessiond restarted with --idle-compact %v; turns of 1 KiB entries, one Append per turn, each followed by a %v pause "+
			"(an agent's pauses between turns are seconds against the default 1 s); written = wchar - socket over the turns and the compactions they caused",
			res.Idle.IdleCompact, res.Idle.Pause),
	}
}
