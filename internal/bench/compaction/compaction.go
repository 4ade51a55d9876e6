// Package compaction measures what sessiond writes over a session's life
// against what was appended, and one compaction of a large session
// against copying its file.
package compaction

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
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
	// compLifeEntries is a session's life; 1 KiB entries as in the
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
	// 1/compTailDiv of the file. It must stay below the writer's rule for
	// large files (a journal >= 1/16 of the file is compacted once its
	// oldest entry waited --compact-within), or the daemon could compact
	// on its own before the timed Flush.
	compTailDiv = 64

	// The trickle: an agent's turns separated by pauses longer than the
	// daemon's compaction bound, so that every turn is compacted: what
	// --compact-within shorter than an agent's pauses would cost (by
	// default it is 30 s, longer than most pauses). Both compressed here.
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

// connect dials the daemon p through a connection that counts what it
// reads from the socket, and returns its process id.
func connect(ctx context.Context, p *harness.Daemon, sockRead *atomic.Uint64) (*grpc.ClientConn, sessiondv1.SessiondClient, int, error) {
	conn, err := dialCounting(p.Socket, sockRead)
	if err != nil {
		return nil, nil, 0, err
	}
	api := sessiondv1.NewSessiondClient(conn)
	st, err := api.Status(ctx, &sessiondv1.StatusRequest{})
	if err != nil {
		conn.Close()
		return nil, nil, 0, fmt.Errorf("sessiond status: %w", err)
	}
	return conn, api, int(st.GetPid()), nil
}

// trickles feeds a new small session and then the large one s a turn at a
// time, with pauses past the daemon's idle delay between the turns.
func trickles(ctx context.Context, env *harness.Env, s *compSession, pid int, sockRead *atomic.Uint64, res *compactionResult, rng *rand.Rand) error {
	small := &compSession{api: s.api, rng: rng, sum: sha256.New(), sid: harness.NewUUID(rng), ref: &sessiondv1.SessionRef{Project: s.ref.Project}}
	small.ref.SessionId = small.sid
	env.Logf("[%s] trickle: turns of %d entries, %v pauses, idle compaction after %v", Name, compSmallTurn, res.Idle.Pause, compIdleCompact)
	if err := small.appendEntries(ctx, compSmallSession/(compEntrySize+1), compPadBatch/(compEntrySize+1), nil); err != nil {
		return err
	}
	if err := small.flush(ctx); err != nil {
		return err
	}
	var err error
	if res.Idle.Small, err = measureTrickle(ctx, env, small, pid, sockRead, compSmallTurn, compSmallTurns, res.Idle.Pause, false); err != nil {
		return fmt.Errorf("trickle into a small session: %w", err)
	}
	res.Idle.Large, err = measureTrickle(ctx, env, s, pid, sockRead, compLargeTurn, compLargeMaxTurns, res.Idle.Pause, true)
	res.FinalEntries, res.FinalBytes = s.entries, s.bytes
	if err != nil {
		return fmt.Errorf("trickle into the large session: %w", err)
	}
	return nil
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
	conn, api, pid, err := connect(ctx, p, &sockRead)
	if err != nil {
		return nil, sc, err
	}
	defer conn.Close()

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
	p, err = harness.StartDaemon(ctx, env.Sessiond, ddir, append(slices.Clone(env.SessiondArgs),
		"--idle-compact", compIdleCompact.String(), "--compact-within", compIdleCompact.String()))
	if err != nil {
		return res, sc, err
	}
	conn2, api, pid, err := connect(ctx, p, &sockRead)
	if err != nil {
		return res, sc, err
	}
	defer conn2.Close()
	s.api = api
	if err := trickles(ctx, env, s, pid, &sockRead, res, rng); err != nil {
		return res, sc, err
	}
	fillCompactionScenario(sc, res, lifeN)
	return res, sc, nil
}
