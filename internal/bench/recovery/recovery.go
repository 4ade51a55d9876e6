// Package recovery measures how fast sessiond serves again, and makes
// every transcript current, after a SIGKILL with a large write-ahead log,
// against a cold sequential read of the same bytes.
package recovery

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/layout"
)

// The recovery scenario: the target is that 1 GiB of entries across 1,000
// sessions be recovered at start at no less than half the disk's
// sequential read speed. sessiond is filled without compacting anything,
// so every entry is still in its shared write-ahead log (internal/journal), is
// killed with SIGKILL, the log's segments are evicted from the page cache,
// and the time from exec to the first answered Status (the whole log read,
// in writer.New, before serving) and to every transcript current (the
// replay into the canonical files, while serving) is compared with
// reading, cold, in the same run and folder, one file of the log's size
// (the disk's sequential speed) and the segments one after the other.

// Name is the scenario's name in the suite (--scenarios).
const Name = "recovery"

// Title describes the scenario in the report.
const Title = "recovery: 1 GiB of entries across 1,000 sessions in the journal, recovered at start"

const (
	recoverySessions     = 1000
	recoveryTotalBytes   = 1 << 30
	recoveryClients      = 8
	recoveryBatchBytes   = 256 << 10
	recoveryReadBuf      = 4 << 20
	recoveryStartTimeout = 5 * time.Minute
	// recoveryNoCompact is the compaction floor and the journal's
	// bound sessiond gets: far above any session and the whole log here,
	// so nothing is compacted (neither a session past the floor nor the
	// sessions holding the oldest segment of a log past its bound), every
	// byte appended is still in the log when the daemon is killed, and
	// recovery must read and replay all of it.
	recoveryNoCompact = 1 << 40
)

// recoverySession is what one session was sent: its entries' count, bytes
// (newlines included) and the SHA-256 of the lines in order, which is what
// the canonical file must hold after recovery.
type recoverySession struct {
	id      string
	entries uint64
	bytes   uint64
	sum     [sha256.Size]byte
}

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sc := &harness.Scenario{Name: Name}
	r := &recoveryRun{env: env, nSessions: int(env.Scaled(recoverySessions, 3)),
		// The per-session size stays the full one (1 GiB / 1,000); Scale
		// only changes how many sessions there are, so a small run still
		// replays sessions of the real size.
		perSession: uint64(recoveryTotalBytes / recoverySessions),
		ddir:       filepath.Join(env.Dir, "daemon"),
		projectKey: fmt.Sprintf("-sessiond-bench-recovery-%08x", uint32(env.Seed))}
	sc.Title = fmt.Sprintf("recovery: %d sessions x ~%.2f MB in the journal (dist:agent entries), SIGKILL, cold restart",
		r.nSessions, float64(r.perSession)/1e6)
	if err := os.MkdirAll(r.ddir, 0o700); err != nil {
		return sc, err
	}
	// After env.SessiondArgs, so they win; a --journal-segment-size there is
	// kept (the test makes segments small to have several).
	r.args = append(append([]string{}, env.SessiondArgs...),
		"--idle-compact", "1h", "--idle-retire", "1h",
		"--min-compact-bytes", strconv.FormatInt(recoveryNoCompact, 10),
		"--journal-max-size", strconv.FormatInt(recoveryNoCompact, 10))
	var err error
	if r.p, err = harness.StartDaemon(ctx, env.Sessiond, r.ddir, r.args); err != nil {
		return sc, err
	}
	defer r.kill()
	r.big = filepath.Join(env.Dir, "sequential.bin")
	defer os.Remove(r.big)
	for _, step := range []func(context.Context) error{r.fill, r.crash, r.baselines, r.recover, r.readAgain, r.verify} {
		if err := step(ctx); err != nil {
			return sc, err
		}
	}
	if err := r.p.Stop(30 * time.Second); err != nil {
		return sc, err
	}
	r.report(sc)
	return sc, nil
}

// recoveryRun is the scenario's state from one step to the next.
type recoveryRun struct {
	env                   *harness.Env
	nSessions             int
	perSession            uint64
	ddir, projectKey, big string
	args                  []string
	p                     *harness.Daemon // the running daemon, restarted by recover

	// fill
	sessions          []*recoverySession
	fillTime          time.Duration
	sent, sentEntries uint64
	journalCounter    uint64
	// crash
	segs     []string
	logBytes int64
	// baselines
	writeTime   time.Duration
	seq1, files timedRead
	// recover
	recTime, replayTime, logRead time.Duration
	logReadOK                    bool
	recCPU, replayCPU            time.Duration
	recCPUErr, replayCPUErr      error
	checked, replayed            daemonLogLine
	replayedOK                   bool
	recoveredBytes               uint64
	// readAgain
	seq2 timedRead
	// verify
	verified string
}

// kill makes sure no daemon outlives the scenario (r.p is the restarted
// daemon by then, if there is one).
func (r *recoveryRun) kill() {
	select {
	case <-r.p.Exited:
	default:
		r.p.Cmd.Process.Kill()
		<-r.p.Exited
	}
}

// fill appends the sessions' entries, none of them compacted.
func (r *recoveryRun) fill(ctx context.Context) error {
	r.env.Logf("[recovery] appending ~%.0f MB to %d sessions with %d clients", float64(r.perSession)*float64(r.nSessions)/1e6, r.nSessions, recoveryClients)
	t0 := time.Now()
	var err error
	if r.sessions, err = recoveryFill(ctx, r.p.Socket, r.projectKey, r.nSessions, r.perSession, r.env.Seed); err != nil {
		return fmt.Errorf("append phase: %w", err)
	}
	r.fillTime = time.Since(t0)
	for _, s := range r.sessions {
		r.sent += s.bytes
		r.sentEntries += s.entries
	}
	st, err := harness.StatusOf(ctx, r.p.Socket)
	if err != nil {
		return err
	}
	// A compaction (past the floor, or to free the log's oldest segment)
	// would have moved entries out of the log and let segments go: the
	// recovery would then read and replay less than the table claims.
	if st.GetCompactions() != 0 {
		return fmt.Errorf("sessiond compacted %d times during the append phase; recovery would not replay everything", st.GetCompactions())
	}
	if st.GetEntriesStored() != r.sentEntries {
		return fmt.Errorf("sessiond stored %d entries, %d sent", st.GetEntriesStored(), r.sentEntries)
	}
	r.journalCounter = st.GetJournalBytes()
	return nil
}

// crash kills the daemon and checks everything appended is in the log's
// segments.
func (r *recoveryRun) crash(context.Context) error {
	r.p.Cmd.Process.Signal(syscall.SIGKILL)
	<-r.p.Exited
	sl := layout.Layout{StateDir: filepath.Join(r.ddir, "state")}
	var err error
	if r.segs, r.logBytes, err = logSegments(sl.JournalDir()); err != nil {
		return err
	}
	// Every entry byte the daemon counted went into a segment, framed:
	// fewer bytes on disk means segments went (or entries went elsewhere),
	// and the rows below would not be the recovery of what was appended.
	if len(r.segs) == 0 || r.logBytes < int64(r.journalCounter) {
		return fmt.Errorf("%d log segments, %d bytes in %s after the kill; %d bytes of entries were appended", len(r.segs), r.logBytes, sl.JournalDir(), r.journalCounter)
	}
	return nil
}

// baselines reads, cold, one file of the log's total size, then the
// segments themselves in recovery's order.
func (r *recoveryRun) baselines(context.Context) error {
	tw := time.Now()
	if err := writeSyncedFile(r.big, r.logBytes); err != nil {
		return err
	}
	r.writeTime = time.Since(tw)
	if err := evict(append([]string{r.big}, r.segs...)...); err != nil {
		return err
	}
	var err error
	if r.seq1, err = readCold(r.big); err != nil {
		return err
	}
	if r.files, err = readCold(r.segs...); err != nil {
		return err
	}
	if r.files.bytes != r.logBytes {
		return fmt.Errorf("read %d bytes of log segments, %d on disk", r.files.bytes, r.logBytes)
	}
	return nil
}

// recover restarts the daemon on the cold log and times it to serving
// and to every transcript current.
func (r *recoveryRun) recover(ctx context.Context) error {
	if err := evict(r.segs...); err != nil {
		return err
	}
	r.env.Logf("[recovery] restarting sessiond on %.0f MB of write-ahead log (%d segments)", float64(r.logBytes)/1e6, len(r.segs))
	// Info level: the daemon logs when it has read the log and how long
	// the replay took.
	rargs := append(append([]string{}, r.args...), "--log-level", "info")
	p2, recTime, err := harness.LaunchDaemon(ctx, r.env.Sessiond, r.ddir, rargs, recoveryStartTimeout)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	r.p, r.recTime = p2, recTime
	// CPU the daemon used to get there: tells a CPU-bound recovery from one
	// waiting on the disk.
	r.recCPU, r.recCPUErr = harness.ProcCPU(r.p.Pid())
	if err := r.checkLogRead(); err != nil {
		return err
	}
	st, err := harness.StatusOf(ctx, r.p.Socket)
	if err != nil {
		return err
	}
	if got := st.GetReplayPending() + st.GetRecoveredSessions(); got != uint64(r.nSessions) {
		return fmt.Errorf("sessiond has %d sessions to replay and %d replayed, %d appended to", st.GetReplayPending(), st.GetRecoveredSessions(), r.nSessions)
	}
	// Then the replay into the canonical files, which runs while sessiond
	// serves: until Status says none is left.
	if r.replayTime, st, err = waitReplayed(ctx, r.p, r.recTime); err != nil {
		return err
	}
	r.replayCPU, r.replayCPUErr = harness.ProcCPU(r.p.Pid())
	if errs := st.GetRecoveryErrors(); len(errs) > 0 {
		return fmt.Errorf("recovery errors: %s", strings.Join(errs, "; "))
	}
	if got := st.GetRecoveredSessions(); got != uint64(r.nSessions) {
		return fmt.Errorf("sessiond recovered %d sessions, %d appended to", got, r.nSessions)
	}
	r.recoveredBytes = st.GetCompactedBytes()
	r.replayed, r.replayedOK = daemonLog(filepath.Join(r.ddir, "sessiond.log"), "replayed journals into their transcripts")
	return nil
}

// checkLogRead finds in the daemon's log that it read exactly the log
// evicted, and when.
func (r *recoveryRun) checkLogRead() error {
	logPath := filepath.Join(r.ddir, "sessiond.log")
	// "checked journals" is logged once the log was read (journal.Open, in
	// writer.New) and the sessions it holds listed; it says what the daemon
	// read, which must be what was evicted.
	var ok bool
	if r.checked, ok = daemonLog(logPath, "checked journals"); !ok {
		return fmt.Errorf(`no "checked journals" line in %s after the restart`, logPath)
	}
	if r.checked.bytes != r.logBytes || r.checked.journals != int64(r.nSessions) {
		return fmt.Errorf("sessiond read %d bytes of log holding %d sessions; %d bytes on disk, %d sessions appended to",
			r.checked.bytes, r.checked.journals, r.logBytes, r.nSessions)
	}
	// Exec to the log read: the line's time less its took (which starts
	// after writer.New), against the exec time; ms resolution.
	r.logRead = r.checked.at.Add(-r.checked.took).Sub(r.p.Harness.Started())
	r.logReadOK = r.logRead > 0 && r.logRead <= r.recTime
	return nil
}

// readAgain reads the baseline file once more, so the baseline is not one
// sample taken before everything else.
func (r *recoveryRun) readAgain(context.Context) error {
	if err := evict(r.big); err != nil {
		return err
	}
	var err error
	if r.seq2, err = readCold(r.big); err != nil {
		return err
	}
	os.Remove(r.big)
	return nil
}

// verify checks every acknowledged entry is in its canonical file, exactly
// once and in order.
func (r *recoveryRun) verify(ctx context.Context) error {
	r.verified = "not asked (--verify)"
	if !r.env.Verify {
		return nil
	}
	if err := recoveryVerify(ctx, r.p.Socket, r.ddir, r.projectKey, r.sessions); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if r.recoveredBytes != r.sent {
		return fmt.Errorf("recovery wrote %d bytes into canonical files, %d were acknowledged", r.recoveredBytes, r.sent)
	}
	r.verified = fmt.Sprintf("yes: %d sessions, %d entries, %d bytes, SHA-256 of each canonical file", r.nSessions, r.sentEntries, r.sent)
	return nil
}
