package compaction

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

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
