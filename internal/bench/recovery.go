package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// The recovery scenario: the issue asks that 1 GiB of journals across 1,000
// sessions be replayed at start at no less than half the disk's sequential
// read speed. sessiond is filled without compacting anything, killed with
// SIGKILL, its journals are evicted from the page cache, and the time from
// exec to the first answered Status is compared with reading, cold, in the
// same run and folder, one file of the same size (the disk's sequential
// speed) and the same journals one after the other (what many files cost).

func init() {
	registerExtra(extraDef{name: ScenarioRecovery, title: "recovery: 1 GiB of journals across 1,000 sessions replayed at start",
		run: runRecovery})
}

const (
	recoverySessions     = 1000
	recoveryTotalBytes   = 1 << 30
	recoveryClients      = 8
	recoveryBatchBytes   = 256 << 10
	recoveryReadBuf      = 4 << 20
	recoveryStartTimeout = 5 * time.Minute
	// recoveryNoCompact is the compaction floor sessiond gets: far above
	// any journal here, so every byte appended is still in a journal when
	// the daemon is killed and recovery must replay all of it.
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

// timedRead is one cold read baseline.
type timedRead struct {
	bytes   int64
	files   int
	elapsed time.Duration
}

func (t timedRead) mbps() float64 { return mbPerSec(t.bytes, t.elapsed) }

func mbPerSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

func runRecovery(ctx context.Context, env *Env) (*Scenario, error) {
	sc := &Scenario{Name: ScenarioRecovery}
	nSessions := int(env.Scaled(recoverySessions, 3))
	// The per-session size stays that of the issue (1 GiB / 1,000); Scale
	// only changes how many sessions there are, so a small run still
	// replays journals of the real size.
	perSession := uint64(recoveryTotalBytes / recoverySessions)
	sc.Title = fmt.Sprintf("recovery: %d sessions x ~%.2f MB of journal (dist:agent entries), SIGKILL, cold restart",
		nSessions, float64(perSession)/1e6)

	ddir := filepath.Join(env.Dir, "daemon")
	if err := os.MkdirAll(ddir, 0o700); err != nil {
		return sc, err
	}
	args := append(append([]string{}, env.SessiondArgs...),
		"--idle-compact", "1h", "--idle-retire", "1h",
		"--min-compact-bytes", strconv.FormatInt(recoveryNoCompact, 10))
	p, err := startDaemon(ctx, env.Sessiond, ddir, args)
	if err != nil {
		return sc, err
	}
	// Whatever happens, no daemon outlives the scenario (p is the
	// restarted daemon by the time this runs, if there is one).
	defer func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	}()

	// 1. Fill the journals.
	projectKey := fmt.Sprintf("-sessiond-bench-recovery-%08x", uint32(env.Seed))
	env.Logf("[recovery] appending ~%.0f MB to %d sessions with %d clients", float64(perSession)*float64(nSessions)/1e6, nSessions, recoveryClients)
	t0 := time.Now()
	sessions, err := recoveryFill(ctx, p.socket, projectKey, nSessions, perSession, env.Seed)
	if err != nil {
		return sc, fmt.Errorf("append phase: %w", err)
	}
	fillTime := time.Since(t0)
	var sent, sentEntries uint64
	for _, s := range sessions {
		sent += s.bytes
		sentEntries += s.entries
	}
	st, err := statusOf(ctx, p.socket)
	if err != nil {
		return sc, err
	}
	// A compaction would have moved entries out of a journal: the replay
	// would then be smaller than what the table claims.
	if st.GetCompactions() != 0 {
		return sc, fmt.Errorf("sessiond compacted %d times during the append phase; recovery would not replay everything", st.GetCompactions())
	}
	if st.GetEntriesStored() != sentEntries {
		return sc, fmt.Errorf("sessiond stored %d entries, %d sent", st.GetEntriesStored(), sentEntries)
	}
	journalCounter := st.GetJournalBytes()

	// 2. Crash.
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited

	jdir := layout.Layout{StateDir: filepath.Join(ddir, "state")}.JournalDir()
	journals, jbytes, err := recoveryJournals(jdir)
	if err != nil {
		return sc, err
	}
	if len(journals) != nSessions {
		return sc, fmt.Errorf("%d journals in %s after the kill, want %d", len(journals), jdir, nSessions)
	}

	// 3. Baselines, cold: one file of the journals' total size, then the
	// journals themselves in recovery's order.
	big := filepath.Join(env.Dir, "sequential.bin")
	defer os.Remove(big)
	tw := time.Now()
	if err := writeSyncedFile(big, jbytes); err != nil {
		return sc, err
	}
	writeTime := time.Since(tw)
	if err := evict(append([]string{big}, journals...)...); err != nil {
		return sc, err
	}
	seq1, err := readCold(big)
	if err != nil {
		return sc, err
	}
	files, err := readCold(journals...)
	if err != nil {
		return sc, err
	}
	if files.bytes != jbytes {
		return sc, fmt.Errorf("read %d bytes of journals, %d on disk", files.bytes, jbytes)
	}

	// 4. Recovery, cold.
	if err := evict(journals...); err != nil {
		return sc, err
	}
	env.Logf("[recovery] restarting sessiond on %.0f MB of journals", float64(jbytes)/1e6)
	// Info level: the daemon logs how long Recover itself took.
	rargs := append(append([]string{}, args...), "--log-level", "info")
	p2, recTime, err := launchDaemon(ctx, env.Sessiond, ddir, rargs, recoveryStartTimeout)
	if err != nil {
		return sc, fmt.Errorf("restart: %w", err)
	}
	p = p2
	// CPU the daemon used to get there: tells a CPU-bound recovery from one
	// waiting on the disk.
	recCPU, recCPUErr := procCPU(p.cmd.Process.Pid)
	logPath := filepath.Join(ddir, "sessiond.log")
	inDaemon, inDaemonOK := recoveryTook(logPath, "checked journals")
	st, err = statusOf(ctx, p.socket)
	if err != nil {
		return sc, err
	}
	if got := st.GetReplayPending() + st.GetRecoveredSessions(); got != uint64(nSessions) {
		return sc, fmt.Errorf("sessiond has %d sessions to replay and %d replayed, %d journaled", st.GetReplayPending(), st.GetRecoveredSessions(), nSessions)
	}
	// Then the replay into the canonical files, which runs while sessiond
	// serves: until Status says none is left.
	replayTime, st, err := waitReplayed(ctx, p, recTime)
	if err != nil {
		return sc, err
	}
	replayCPU, replayCPUErr := procCPU(p.cmd.Process.Pid)
	if errs := st.GetRecoveryErrors(); len(errs) > 0 {
		return sc, fmt.Errorf("recovery errors: %s", strings.Join(errs, "; "))
	}
	if got := st.GetRecoveredSessions(); got != uint64(nSessions) {
		return sc, fmt.Errorf("sessiond recovered %d sessions, %d journaled", got, nSessions)
	}
	recoveredBytes := st.GetCompactedBytes()
	inReplay, inReplayOK := recoveryTook(logPath, "replayed journals into their transcripts")

	// 5. The disk once more, so the baseline is not one sample taken
	// before everything else.
	if err := evict(big); err != nil {
		return sc, err
	}
	seq2, err := readCold(big)
	if err != nil {
		return sc, err
	}
	os.Remove(big)

	// 6. Every acknowledged entry is in its canonical file, exactly once
	// and in order.
	verified := "not asked (--verify)"
	if env.Verify {
		if err := recoveryVerify(ctx, p.socket, ddir, projectKey, sessions); err != nil {
			return sc, fmt.Errorf("verify: %w", err)
		}
		if recoveredBytes != sent {
			return sc, fmt.Errorf("recovery wrote %d bytes into canonical files, %d were acknowledged", recoveredBytes, sent)
		}
		verified = fmt.Sprintf("yes: %d sessions, %d entries, %d bytes, SHA-256 of each canonical file", nSessions, sentEntries, sent)
	}
	if err := p.stop(30 * time.Second); err != nil {
		return sc, err
	}

	seqMBps := (seq1.mbps() + seq2.mbps()) / 2
	recMBps := mbPerSec(jbytes, recTime)
	pct := func(v float64) string { return fmt.Sprintf("%.0f%%", v/seqMBps*100) }
	row := func(what string, n int64, files int, d time.Duration) []string {
		v := mbPerSec(n, d)
		return []string{what, fmt.Sprintf("%.1f", float64(n)/1e6), strconv.Itoa(files), fmt.Sprintf("%.3f", d.Seconds()),
			fmt.Sprintf("%.0f", v), pct(v)}
	}
	fill := row(fmt.Sprintf("append phase (info): %d clients, %d KiB batches", recoveryClients, recoveryBatchBytes>>10), int64(sent), nSessions, fillTime)
	fill[5] = "" // writes, not comparable with a read
	// Recovery writes every byte it replays into a canonical file and
	// syncs it, so the disk's write speed bounds it too: shown for that.
	wrow := row("write + fsync one file of that size (info: recovery rewrites every byte)", jbytes, 1, writeTime)
	wrow[5] = ""
	sc.Table = &Table{Columns: []string{"run", "MB", "files", "seconds", "MB/s", "of seq. read"}}
	sc.Table.Rows = append(sc.Table.Rows,
		row("sequential read, one file, cold (before)", seq1.bytes, 1, seq1.elapsed),
		row("sequential read, one file, cold (after)", seq2.bytes, 1, seq2.elapsed),
		row(fmt.Sprintf("read the %d journals one after the other, cold", len(journals)), files.bytes, files.files, files.elapsed),
		row("sessiond recovery: exec -> serving, every journal checked (Status answers)", jbytes, len(journals), recTime))
	if inDaemonOK {
		sc.Table.Rows = append(sc.Table.Rows, row("  of which checking the journals (sessiond's log)", jbytes, len(journals), inDaemon))
	}
	full := row("exec -> every transcript current (replay, while serving; info)", jbytes, len(journals), replayTime)
	sc.Table.Rows = append(sc.Table.Rows, full)
	if inReplayOK {
		sc.Table.Rows = append(sc.Table.Rows, row("  of which the replay (sessiond's log, info)", jbytes, len(journals), inReplay))
	}
	sc.Table.Rows = append(sc.Table.Rows, wrow, fill)
	cpuNote := fmt.Sprintf("sessiond's CPU time (utime+stime): unknown (%v, %v).", recCPUErr, replayCPUErr)
	if recCPUErr == nil && replayCPUErr == nil {
		cpuNote = fmt.Sprintf("sessiond's CPU time (utime+stime) from exec to serving: %.2f s in %.2f s of wall time; to every transcript current: %.2f s in %.2f s (2 cores).",
			recCPU.Seconds(), recTime.Seconds(), replayCPU.Seconds(), replayTime.Seconds())
	}

	ch := check("recovery to serving >= 50% of sequential read", recMBps/seqMBps*100, 50, "%", true)
	ch.Note = fmt.Sprintf("%.0f MB/s vs %.0f MB/s (mean of two cold reads of one %.0f MB file), to serving with every journal checked; every transcript current after %.2f s: %s",
		recMBps, seqMBps, float64(jbytes)/1e6, replayTime.Seconds(), full[5])
	// The official readers see the canonical files only: until the
	// replay ends they read stale transcripts, so the issue judges that
	// time too.
	curMBps := mbPerSec(jbytes, replayTime)
	cur := check("recovery to every transcript current >= 50% of sequential read", curMBps/seqMBps*100, 50, "%", true)
	cur.Note = fmt.Sprintf("%.0f MB/s vs %.0f MB/s: exec to the Status showing replay_pending 0 in %.2f s (serving after %.2f s)",
		curMBps, seqMBps, replayTime.Seconds(), recTime.Seconds())
	sc.Checks = append(sc.Checks, ch, cur)
	sc.Notes = append(sc.Notes,
		fmt.Sprintf("Sizes: %d sessions in one project, entries drawn from dist:agent (mean ~7 KiB, up to 1 MiB; the last one cut to fit) until each session holds %d bytes; %d entries, %.1f MB of entries, %.1f MB of journal files (sessiond's journal_bytes counter: %.1f MB).",
			nSessions, perSession, sentEntries, float64(sent)/1e6, float64(jbytes)/1e6, float64(journalCounter)/1e6),
		fmt.Sprintf("sessiond ran with --idle-compact 1h --idle-retire 1h --min-compact-bytes %d, so nothing was compacted before the SIGKILL (Status: 0 compactions); recovered_sessions after the restart: %d.", int64(recoveryNoCompact), nSessions),
		"Cold: every journal and the baseline file were fsynced, then dropped from the page cache with posix_fadvise(POSIX_FADV_DONTNEED) (no drop_caches: the machine is shared); dentries and inodes stay cached, and the virtual disk's host may cache too, equally for every row.",
		fmt.Sprintf("Baselines read with %d MiB read() calls; the journals are read in recovery's order (sorted by session key). Recovery time is exec of sessiond to its first answered Status, so it includes process start. Before it serves, sessiond opens every journal (%d at a time): reads every record and checks its checksum, cuts a torn tail, moves a corrupt journal aside, syncs each journal and the folder once; it then serves the entries from the journals. The replay into the canonical files (write, fsync, rename, folder fsync, new journal generation) runs while it serves, a few sessions at a time; the full row is exec to the Status that shows replay_pending 0.", recoveryReadBuf>>20, 8),
		cpuNote,
		"Verified: "+verified+".")
	return sc, nil
}

// recoveryFill appends to n sessions until each holds perSession bytes,
// with recoveryClients connections taking sessions in turn. Entries of a
// session are drawn from a generator seeded by the session's index, and
// hashed as they are sent.
func recoveryFill(ctx context.Context, socket, projectKey string, n int, perSession, seed uint64) ([]*recoverySession, error) {
	sizer, err := ParseSize("dist:agent")
	if err != nil {
		return nil, err
	}
	sessions := make([]*recoverySession, n)
	ids := rand.New(rand.NewPCG(seed, 0x7265636f76657279))
	for i := range sessions {
		sessions[i] = &recoverySession{id: newUUID(ids)}
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

func fillSession(ctx context.Context, c *client.Client, projectKey string, s *recoverySession, idx int, perSession, seed uint64, sizer Sizer) error {
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
		// total is the 1 GiB and not more (a 1 MiB draw at the
		// end would add up to 1 MiB to a session).
		size := sizer.Size(r)
		if left := int(perSession-s.bytes) - 1; size > left {
			size = max(left, MinEntry)
		}
		line := appendEntry(nil, size, s.id, newUUID(r), s.entries)
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

// recoveryJournals lists the journal files under dir, in the order
// recovery replays them (by session key, which the path spells), and
// their total size.
func recoveryJournals(dir string) ([]string, int64, error) {
	var paths []string
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(d.Name(), layout.JournalExt) {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			paths = append(paths, path)
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list journals: %w", err)
	}
	sort.Strings(paths)
	return paths, total, nil
}

// writeSyncedFile writes size bytes of incompressible data to path and
// syncs it: the sequential-read baseline.
func writeSyncedFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, recoveryReadBuf)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
	for left := size; left > 0; {
		n := int64(len(buf))
		if n > left {
			n = left
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// evict makes paths cold: fsync first, since POSIX_FADV_DONTNEED drops only
// clean pages, then drop every cached page of each file.
func evict(paths ...string) error {
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if err == nil {
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("evict %s: %w", p, err)
		}
	}
	return nil
}

// readCold reads paths one after the other with large reads and times it.
func readCold(paths ...string) (timedRead, error) {
	buf := make([]byte, recoveryReadBuf)
	t := timedRead{files: len(paths)}
	start := time.Now()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return t, err
		}
		for {
			n, err := f.Read(buf)
			t.bytes += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return t, fmt.Errorf("read %s: %w", p, err)
			}
		}
		f.Close()
	}
	t.elapsed = time.Since(start)
	return t, nil
}

// recoveryTook reads, from sessiond's JSON log, how long its last Recover
// took (the "recovered journals" line, logged at info level).
func recoveryTook(logPath, msg string) (time.Duration, bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var took time.Duration
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"`+msg+`"`)) {
			continue
		}
		var line struct {
			Took json.RawMessage `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		// zap's JSON encoder writes durations as float seconds by
		// default; accept a duration string too.
		var secs float64
		var str string
		switch {
		case json.Unmarshal(line.Took, &secs) == nil:
			took, found = time.Duration(secs*float64(time.Second)), true
		case json.Unmarshal(line.Took, &str) == nil:
			if d, err := time.ParseDuration(str); err == nil {
				took, found = d, true
			}
		}
	}
	return took, found
}

// recoveryVerify flushes every session and checks that its canonical file
// holds exactly the lines sent, in order.
func recoveryVerify(ctx context.Context, socket, ddir, projectKey string, sessions []*recoverySession) error {
	c, err := client.Dial(socket, client.WithRetry(1, 0))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.FlushAll(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	l := layout.Layout{Root: filepath.Join(ddir, "root")}
	var errs []error
	for _, s := range sessions {
		path := l.TranscriptPath(layout.Key{ProjectKey: projectKey, SessionID: s.id})
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
func waitReplayed(ctx context.Context, p *daemonProc, served time.Duration) (time.Duration, *sessiondv1.StatusResponse, error) {
	start := time.Now().Add(-served)
	deadline := time.Now().Add(recoveryStartTimeout)
	for {
		st, err := statusOf(ctx, p.socket)
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
