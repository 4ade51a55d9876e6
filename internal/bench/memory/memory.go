// Package memory measures the daemon's memory with many sessions known and
// some active, and while it reads a transcript with very large lines.
package memory

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/testharness"
)

// The memory scenario measures the two memory targets on a sessiond
// the scenario starts itself, from /proc (VmRSS, VmHWM reset through
// clear_refs) and, for sessionctl, from wait4's rusage:
//
//  1. 10,000 sessions known (canonical files written before the daemon
//     starts and indexed by it) and 1,000 of them active (a trickle of
//     appends keeps their writers open): peak RSS <= 200 MiB. The same run
//     measures, as its baselines, the daemon with an empty root and with
//     the 10,000 known but none active.
//  2. Reading a 200 MB transcript holding a few very large lines: the
//     daemon's growth while it serves Read (whole, and tail), and
//     sessionctl show's own peak RSS, each at most 2x the largest line plus
//     a constant. The constant is justified by the same figures measured
//     on a small transcript in the same run.

// Name is the scenario's name in the suite (--scenarios).
const Name = "memory"

// Title describes the scenario in the report.
const Title = "10,000 sessions known / 1,000 active; reading a 200 MB transcript"

const memMiB = 1 << 20

// memConstant is the constant the read targets allow above 2x the largest
// line. It has to hold what any Go gRPC process needs whatever it reads:
// the runtime and its heap goal slack, gRPC's transport buffers and one
// ~1 MiB read batch (internal/writer gathers 1 MiB before sending) decoded
// and re-encoded. The scenario measures that in the same run by reading a
// small transcript (daemon growth, sessionctl's whole RSS) and reports it
// next to this figure.
const memConstant = 32 * memMiB

// memSizes are the scenario's sizes after scaling.
type memSizes struct {
	known, active, projects int
	perKnown                int           // entries in each known session
	trickle                 time.Duration // how long the active sessions are kept busy
	clients                 int           // connections doing the trickle
	bigBytes                int64         // the large transcript
	largest                 int           // its largest line
	smallBytes              int64         // the small transcript (baseline)
	tail                    uint32
}

func memSizesFor(env *harness.Env) memSizes {
	sz := memSizes{
		known:      int(env.Scaled(10000, 20)),
		active:     int(env.Scaled(1000, 4)),
		perKnown:   20,
		trickle:    time.Duration(env.Scaled(int64(10*time.Second), int64(500*time.Millisecond))),
		clients:    8,
		bigBytes:   env.Scaled(200_000_000, 2_000_000),
		largest:    int(env.Scaled(8*memMiB, 64<<10)),
		smallBytes: 1 * memMiB,
		tail:       10,
	}
	sz.projects = max(1, sz.known/200)
	sz.clients = min(sz.clients, sz.active)
	return sz
}

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sz := memSizesFor(env)
	sc := &harness.Scenario{Name: Name, Table: &harness.Table{
		Columns: []string{"step", "daemon rss MiB", "daemon peak MiB", "growth MiB", "limit MiB", "detail"}}}
	sc.Title = fmt.Sprintf("%d sessions known / %d active; reading a %.0f MB transcript (largest line %.1f MiB)",
		sz.known, sz.active, float64(sz.bigBytes)/1e6, float64(sz.largest)/memMiB)
	emptyRSS, err := memSessions(ctx, env, sz, sc)
	if err != nil {
		return sc, fmt.Errorf("sessions: %w", err)
	}
	if err := memReads(ctx, env, sz, emptyRSS, sc); err != nil {
		return sc, fmt.Errorf("reads: %w", err)
	}
	return sc, nil
}

// ---- part 1: many sessions known, some active ----

func memSessions(ctx context.Context, env *harness.Env, sz memSizes, sc *harness.Scenario) (emptyRSS int64, err error) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/memMiB) }
	row := func(cells ...string) { sc.Table.Rows = append(sc.Table.Rows, cells) }

	// Baseline: the daemon with nothing to know.
	emptyDir := filepath.Join(env.Dir, "empty")
	if err := os.MkdirAll(filepath.Join(emptyDir, "root"), 0o700); err != nil {
		return 0, err
	}
	p, err := harness.StartDaemon(ctx, env.Sessiond, emptyDir, env.SessiondArgs)
	if err != nil {
		return 0, err
	}
	// Let the start-up allocations (index warm-up goroutine, gRPC server)
	// settle so the baseline is what an idle daemon holds.
	time.Sleep(300 * time.Millisecond)
	emptyRSS, emptyHWM, err := harness.ProcMem(p.Cmd.Process.Pid)
	if stopErr := p.Stop(30 * time.Second); err == nil {
		err = stopErr
	}
	if err != nil {
		return 0, err
	}
	row("daemon, empty root, after start", mib(emptyRSS), mib(emptyHWM), "-", "-", "baseline")
	os.RemoveAll(emptyDir)

	// The known sessions, written as another program would have, before
	// the daemon starts.
	dir := filepath.Join(env.Dir, "sessions")
	root := filepath.Join(dir, "root")
	rng := rand.New(rand.NewPCG(env.Seed, 1))
	keys := make([]layout.Key, sz.known)
	want := make([]harness.Acc, sz.known) // what each session holds: lines and bytes with newlines
	t0 := time.Now()
	var onDisk int64
	for i := range keys {
		keys[i] = layout.Key{ProjectKey: fmt.Sprintf("-sessiond-bench-mem-p%03d", i%sz.projects), SessionID: harness.NewUUID(rng)}
		var buf []byte
		for j := range sz.perKnown {
			buf = harness.AppendEntry(buf, 200+rng.IntN(2048-200+1), keys[i].SessionID, harness.NewUUID(rng), uint64(j))
			buf = append(buf, '\n')
		}
		path := layout.Layout{Root: root}.TranscriptPath(keys[i])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return 0, err
		}
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			return 0, err
		}
		want[i] = harness.Acc{Entries: uint64(sz.perKnown), Bytes: uint64(len(buf))}
		onDisk += int64(len(buf))
	}
	env.Logf("[%s] wrote %d sessions (%.0f MB) in %v", Name, sz.known, float64(onDisk)/1e6, time.Since(t0).Round(time.Millisecond))

	p, err = harness.StartDaemon(ctx, env.Sessiond, dir, env.SessiondArgs)
	if err != nil {
		return 0, err
	}
	defer func() {
		if p != nil {
			p.Stop(30 * time.Second)
		}
	}()
	pid := p.Cmd.Process.Pid
	c, err := client.Dial(p.Socket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// "Known" means indexed: a listing names every session. The listing
	// waits for (or does) the indexing the daemon starts on its own.
	t0 = time.Now()
	infos, _, err := c.ListSessions(ctx, client.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list: %w", err)
	}
	if len(infos) != sz.known {
		return 0, fmt.Errorf("the daemon lists %d sessions, %d on disk", len(infos), sz.known)
	}
	indexed := time.Since(t0)
	knownRSS, knownHWM, err := harness.ProcMem(pid)
	if err != nil {
		return 0, err
	}
	row(fmt.Sprintf("daemon, %d sessions known, none active", sz.known), mib(knownRSS), mib(knownHWM),
		mib(knownRSS-emptyRSS), "-", fmt.Sprintf("growth over empty; listed all after %v", indexed.Round(time.Millisecond)))

	// The trickle: clients each own active/clients sessions and append one
	// entry to each in turn, so every writer stays open (well within
	// --idle-retire) and each sees appends every few hundred ms.
	added := make([]harness.Acc, sz.active)
	tctx, cancel := context.WithTimeout(ctx, sz.trickle)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, sz.clients)
	appends := make([]int, sz.clients)
	for ci := range sz.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Dial(p.Socket)
			if err != nil {
				errs[ci] = err
				return
			}
			defer cl.Close()
			r := rand.New(rand.NewPCG(env.Seed, uint64(2+ci)))
			var line []byte
			for round := 0; ; round++ {
				for s := ci; s < sz.active; s += sz.clients {
					// Every session gets at least one append, however
					// short the trickle.
					if round > 0 && tctx.Err() != nil {
						return
					}
					k := keys[s]
					line = harness.AppendEntry(line[:0], 200+r.IntN(2048-200+1), k.SessionID, harness.NewUUID(r), uint64(sz.perKnown)+added[s].Entries)
					if _, err := cl.Append(ctx, client.Session{ProjectKey: k.ProjectKey, ID: k.SessionID}, line); err != nil {
						errs[ci] = fmt.Errorf("append to %s: %w", k, err)
						return
					}
					added[s].Entries++
					added[s].Bytes += uint64(len(line)) + 1
					appends[ci]++
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return 0, err
	}
	activeRSS, activeHWM, err := harness.ProcMem(pid)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, n := range appends {
		total += n
	}
	if int(st.GetActiveSessions()) < sz.active {
		return 0, fmt.Errorf("only %d sessions active after the trickle, %d written to", st.GetActiveSessions(), sz.active)
	}
	row(fmt.Sprintf("daemon, %d known, %d active", sz.known, sz.active), mib(activeRSS), mib(activeHWM),
		mib(activeHWM-emptyRSS), "200.0",
		fmt.Sprintf("peak since start; growth over empty; %d appends by %d clients in %v; %d writers open",
			total, sz.clients, sz.trickle, st.GetActiveSessions()))
	ch := harness.NewCheck(fmt.Sprintf("peak RSS, %d known / %d active", sz.known, sz.active), float64(activeHWM)/memMiB, 200, "MiB", false)
	ch.Note = fmt.Sprintf("empty daemon %.1f MiB, %d known idle %.1f MiB", float64(emptyRSS)/memMiB, sz.known, float64(knownRSS)/memMiB)
	sc.Checks = append(sc.Checks, ch)
	sc.Notes = append(sc.Notes, fmt.Sprintf(
		"sessions: %d canonical files of %d entries (200 B-2 KiB each, %.0f MB in all) in %d projects, written before the daemon starts; "+
			"then %d clients append one entry (200 B-2 KiB) at a time round robin to %d of them for %v; "+
			"peak = VmHWM since the daemon started (indexing included)",
		sz.known, sz.perKnown, float64(onDisk)/1e6, sz.projects, sz.clients, sz.active, sz.trickle))

	if env.Verify {
		if err := c.FlushAll(ctx, func(*sessiondv1.FlushedSession) error { return nil }); err != nil {
			return 0, fmt.Errorf("flush: %w", err)
		}
		for s := range added {
			want[s].Entries += added[s].Entries
			want[s].Bytes += added[s].Bytes
		}
		infos, _, err := c.ListSessions(ctx, client.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("list: %w", err)
		}
		if len(infos) != sz.known {
			return 0, fmt.Errorf("after the trickle the daemon lists %d sessions, %d on disk", len(infos), sz.known)
		}
		byID := map[string]*sessiondv1.SessionInfo{}
		for _, in := range infos {
			byID[in.GetSession().GetSessionId()] = in
		}
		for i, k := range keys {
			in := byID[k.SessionID]
			if in == nil || in.GetEntries() != want[i].Entries || in.GetBytes() != want[i].Bytes {
				return 0, fmt.Errorf("session %s: listed as %v, want %d entries, %d bytes", k, in, want[i].Entries, want[i].Bytes)
			}
		}
		for s := range added {
			path := layout.Layout{Root: root}.TranscriptPath(keys[s])
			n, err := harness.CountLines(path)
			if err != nil {
				return 0, err
			}
			if n != want[s] {
				return 0, fmt.Errorf("%s holds %d entries (%d bytes), want %d (%d bytes)", path, n.Entries, n.Bytes, want[s].Entries, want[s].Bytes)
			}
		}
		sc.Notes = append(sc.Notes, fmt.Sprintf("verified: %d sessions listed with their entries and bytes; the %d active ones hold every acknowledged entry",
			sz.known, sz.active))
	}
	err = p.Stop(60 * time.Second)
	p = nil
	if err != nil {
		return 0, err
	}
	return emptyRSS, os.RemoveAll(dir)
}

// ---- part 2: reading a large transcript ----

// memFile describes a transcript the scenario wrote.
type memFile struct {
	key     layout.Key
	path    string
	bytes   int64
	lines   uint64
	largest int
	sum     [32]byte   // sha256 of the whole file
	tail    [][32]byte // sha256 of each of the last lines, oldest first
}

// memWriteTranscript writes a transcript of about size bytes whose line
// sizes follow dist:agent capped at largest/4, plus one line of largest
// bytes at 3/4 and two of largest/2 at 1/4 and 1/2 of the file (real tool
// results reach 12 MB). The last line is cut so the file has exactly size
// bytes.
func memWriteTranscript(root string, key layout.Key, size int64, largest int, tail int, rng *rand.Rand) (*memFile, error) {
	f := &memFile{key: key, path: layout.Layout{Root: root}.TranscriptPath(key)}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, memMiB)
	h := sha256.New()
	dist := harness.AgentSizes
	marks := []struct {
		at   int64
		size int
	}{{size / 4, largest / 2}, {size / 2, largest / 2}, {size * 3 / 4, largest}}
	var line []byte
	for f.bytes < size {
		n := min(dist.Size(rng), max(largest/4, harness.MinEntry))
		if len(marks) > 0 && f.bytes >= marks[0].at {
			n = marks[0].size
			marks = marks[1:]
		}
		if left := size - f.bytes - 1; int64(n) > left || left-int64(n) < harness.MinEntry+1 {
			n = int(left) // the last line fills the file exactly
		}
		line = harness.AppendEntry(line[:0], n, key.SessionID, harness.NewUUID(rng), f.lines)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return nil, err
		}
		h.Write(line)
		lh := sha256.Sum256(line[:len(line)-1])
		if f.tail = append(f.tail, lh); len(f.tail) > tail {
			f.tail = f.tail[1:]
		}
		f.bytes += int64(len(line))
		f.lines++
		f.largest = max(f.largest, len(line)-1)
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	copy(f.sum[:], h.Sum(nil))
	return f, out.Close()
}

// memSink counts (and with verify, hashes) what a reader is served.
type memSink struct {
	h     hash.Hash
	bytes int64
	lines uint64
}

func newMemSink(verify bool) *memSink {
	s := &memSink{}
	if verify {
		s.h = sha256.New()
	}
	return s
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.h != nil {
		s.h.Write(p)
	}
	s.bytes += int64(len(p))
	s.lines += uint64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}

func (s *memSink) check(f *memFile) error {
	if s.bytes != f.bytes || s.lines != f.lines {
		return fmt.Errorf("%d lines (%d bytes) served, the file holds %d (%d bytes)", s.lines, s.bytes, f.lines, f.bytes)
	}
	if s.h != nil && !bytes.Equal(s.h.Sum(nil), f.sum[:]) {
		return fmt.Errorf("what was served differs from the file (sha256)")
	}
	return nil
}

func memReads(ctx context.Context, env *harness.Env, sz memSizes, emptyRSS int64, sc *harness.Scenario) error {
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/memMiB) }
	row := func(cells ...string) { sc.Table.Rows = append(sc.Table.Rows, cells) }

	ctl, err := memSessionctl(ctx, env)
	if err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("sessionctl show not measured: %v", err))
	}

	dir := filepath.Join(env.Dir, "reads")
	root := filepath.Join(dir, "root")
	rng := rand.New(rand.NewPCG(env.Seed, 100))
	project := "-sessiond-bench-mem-read"
	// The small transcript: lines of at most 4 KiB, so its reads show what
	// reading costs whatever the lines (the constant).
	small, err := memWriteTranscript(root, layout.Key{ProjectKey: project, SessionID: harness.NewUUID(rng)}, sz.smallBytes, 16<<10, int(sz.tail), rng)
	if err != nil {
		return fmt.Errorf("write the small transcript: %w", err)
	}

	p, err := harness.StartDaemon(ctx, env.Sessiond, dir, env.SessiondArgs)
	if err != nil {
		return err
	}
	defer func() {
		if p != nil {
			p.Stop(30 * time.Second)
		}
	}()
	pid := p.Cmd.Process.Pid
	c, err := client.Dial(p.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	// The listing waits for the start-up indexing, which must not run
	// during the measured steps.
	if infos, _, err := c.ListSessions(ctx, client.ListOptions{ProjectKey: project}); err != nil || len(infos) != 1 {
		return fmt.Errorf("the daemon lists %d sessions in %s, 1 on disk (%v)", len(infos), project, err)
	}
	time.Sleep(200 * time.Millisecond)
	base, baseHWM, err := harness.ProcMem(pid)
	if err != nil {
		return err
	}
	row("daemon, small transcript indexed, before any read", mib(base), mib(baseHWM), "-", "-",
		"growth below = peak during the step - rss right before it")

	// measure runs fn with the daemon's peak reset and returns its growth
	// over its rss right before the step (what this read needs on top of
	// what the daemon holds), and cum, over base: memory an earlier step
	// freed but the Go runtime has not yet returned to the system counts
	// there, so it is shown too.
	measure := func(fn func() error) (rss, hwm, growth, cum int64, err error) {
		before, _, err := harness.ProcMem(pid)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		if err := harness.ResetHWM(pid); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("reset the daemon's VmHWM: %w", err)
		}
		if err := fn(); err != nil {
			return 0, 0, 0, 0, err
		}
		rss, hwm, err = harness.ProcMem(pid)
		return rss, hwm, hwm - before, hwm - base, err
	}
	read := func(f *memFile, opt client.ReadOptions) (*memSink, error) {
		s := newMemSink(env.Verify)
		next := uint64(0)
		if opt.Tail > 0 && f.lines > uint64(opt.Tail) {
			next = f.lines - uint64(opt.Tail)
		}
		first := next
		err := c.Read(ctx, client.Session{ProjectKey: f.key.ProjectKey, ID: f.key.SessionID}, opt, func(e *sessiondv1.Entry) error {
			if e.GetIndex() != next {
				return fmt.Errorf("entry %d served where %d was due", e.GetIndex(), next)
			}
			if opt.Tail > 0 && env.Verify && sha256.Sum256(e.GetData()) != f.tail[next-first] {
				return fmt.Errorf("tail: entry %d differs from the file's line", next)
			}
			next++
			s.Write(e.GetData())
			s.Write([]byte{'\n'})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f.key, err)
		}
		return s, nil
	}
	verified := func(s *memSink, f *memFile) error {
		if !env.Verify {
			return nil
		}
		return s.check(f)
	}
	show := func(f *memFile) (peak int64, err error) {
		s := newMemSink(env.Verify)
		peak, err = memRunPeak(ctx, s, ctl, "--socket", p.Socket, "show", "--project", f.key.ProjectKey, f.key.SessionID)
		if err == nil {
			err = verified(s, f)
		}
		return peak, err
	}

	// readWhole reads f from its start and checks every byte.
	readWhole := func(f *memFile) func() error {
		return func() error {
			s, err := read(f, client.ReadOptions{})
			if err == nil {
				err = verified(s, f)
			}
			return err
		}
	}

	// The baselines: the same steps on the small transcript.
	sRSS, sHWM, sGrowth, _, err := measure(readWhole(small))
	if err != nil {
		return err
	}
	row(fmt.Sprintf("Read %.1f MB transcript (baseline)", float64(small.bytes)/1e6), mib(sRSS), mib(sHWM), mib(sGrowth), "-",
		fmt.Sprintf("%d lines, largest %d B", small.lines, small.largest))
	var ctlSmall int64
	if ctl != "" {
		var sShowGrowth int64
		sRSS, sHWM, sShowGrowth, _, err = measure(func() error {
			ctlSmall, err = show(small)
			return err
		})
		if err != nil {
			return err
		}
		row("sessionctl show, same (baseline)", mib(sRSS), mib(sHWM), mib(sShowGrowth), "-",
			fmt.Sprintf("sessionctl peak rss %s MiB", mib(ctlSmall)))
	}

	// The large transcript appears while the daemon runs, as one another
	// program wrote, so the reads below are the first to touch it and no
	// start-up indexing of it inflates the baseline.
	t0 := time.Now()
	big, err := memWriteTranscript(root, layout.Key{ProjectKey: project, SessionID: harness.NewUUID(rng)}, sz.bigBytes, sz.largest, int(sz.tail), rng)
	if err != nil {
		return fmt.Errorf("write the large transcript: %w", err)
	}
	env.Logf("[%s] wrote a %.0f MB transcript (%d lines, largest %d B) in %v", Name,
		float64(big.bytes)/1e6, big.lines, big.largest, time.Since(t0).Round(time.Millisecond))
	limit := int64(2*big.largest) + memConstant
	limitMiB := float64(limit) / memMiB
	lim := fmt.Sprintf("%.1f", limitMiB)
	label := fmt.Sprintf("%.0f MB", float64(big.bytes)/1e6)

	t0 = time.Now()
	rss, hwm, growth, cum, err := measure(readWhole(big))
	if err != nil {
		return err
	}
	row("Read "+label+" (first: opens the session)", mib(rss), mib(hwm), mib(growth), lim,
		fmt.Sprintf("%d lines in %v; %s MiB over the rss before any read", big.lines, time.Since(t0).Round(time.Millisecond), mib(cum)))
	sc.Checks = append(sc.Checks, harness.NewCheck("daemon growth, Read "+label, float64(growth)/memMiB, limitMiB, "MiB", false))

	if ctl != "" {
		var ctlBig int64
		t0 = time.Now()
		rss, hwm, growth, cum, err = measure(func() error {
			ctlBig, err = show(big)
			return err
		})
		if err != nil {
			return err
		}
		// sessionctl is a new process each time: its growth is its peak
		// over the peak of the same command on the small transcript, which
		// holds the runtime, the binary's pages and the connection.
		ctlGrowth := ctlBig - ctlSmall
		row("sessionctl show "+label, mib(rss), mib(hwm), mib(growth), lim,
			fmt.Sprintf("sessionctl peak rss %s MiB, growth over the baseline show %s MiB; %v; daemon %s MiB over the rss before any read",
				mib(ctlBig), mib(ctlGrowth), time.Since(t0).Round(time.Millisecond), mib(cum)))
		ch := harness.NewCheck("sessionctl show "+label+": its growth", float64(ctlGrowth)/memMiB, limitMiB, "MiB", false)
		ch.Note = fmt.Sprintf("peak rss %.1f MiB, %.1f MiB on the small transcript", float64(ctlBig)/memMiB, float64(ctlSmall)/memMiB)
		sc.Checks = append(sc.Checks, ch, harness.NewCheck("daemon growth, show "+label, float64(growth)/memMiB, limitMiB, "MiB", false))
	}

	rss, hwm, growth, cum, err = measure(func() error {
		s, err := read(big, client.ReadOptions{Tail: sz.tail})
		if err == nil && s.lines != min(uint64(sz.tail), big.lines) {
			err = fmt.Errorf("tail %d served %d entries", sz.tail, s.lines)
		}
		return err
	})
	if err != nil {
		return err
	}
	row(fmt.Sprintf("Read %s, tail %d", label, sz.tail), mib(rss), mib(hwm), mib(growth), lim,
		fmt.Sprintf("%s MiB over the rss before any read", mib(cum)))
	sc.Checks = append(sc.Checks, harness.NewCheck(fmt.Sprintf("daemon growth, Read %s tail %d", label, sz.tail), float64(growth)/memMiB, limitMiB, "MiB", false))

	// Indexing reads the transcript too: a daemon started on this folder
	// indexes both transcripts before its first listing answers. Its
	// baseline is the empty daemon of part 1.
	err = p.Stop(60 * time.Second)
	p = nil
	if err != nil {
		return err
	}
	if p, err = harness.StartDaemon(ctx, env.Sessiond, dir, env.SessiondArgs); err != nil {
		return err
	}
	t0 = time.Now()
	c, err = client.Dial(p.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	infos, _, err := c.ListSessions(ctx, client.ListOptions{ProjectKey: project})
	if err != nil || len(infos) != 2 {
		return fmt.Errorf("the restarted daemon lists %d sessions in %s, 2 on disk (%v)", len(infos), project, err)
	}
	took := time.Since(t0)
	for _, in := range infos {
		if in.GetSession().GetSessionId() == big.key.SessionID && (in.GetEntries() != big.lines || in.GetBytes() != uint64(big.bytes)) {
			return fmt.Errorf("the large transcript is listed with %d entries, %d bytes; it holds %d, %d", in.GetEntries(), in.GetBytes(), big.lines, big.bytes)
		}
	}
	rss, hwm, err = harness.ProcMem(p.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	growth = hwm - emptyRSS
	row("daemon restarted, indexes both (peak since start)", mib(rss), mib(hwm), mib(growth), lim,
		fmt.Sprintf("growth over the empty daemon; listed after %v", took.Round(time.Millisecond)))
	sc.Checks = append(sc.Checks, harness.NewCheck("daemon growth, indexing "+label+" at start", float64(growth)/memMiB, limitMiB, "MiB", false))

	how := "sessionctl's peak from GNU time's %M (its own fork, so the bench process's pages do not count)"
	if memTimeBin() == "" {
		how = "sessionctl's peak sampled from /proc every 2 ms (no GNU time found): a lower bound"
	}
	sc.Notes = append(sc.Notes, fmt.Sprintf(
		"reads: a %.0f MB transcript of %d lines (sizes of dist:agent capped at %d B, plus lines of %d, %d and %d B at 1/4, 1/2, 3/4), "+
			"written while the daemon runs; limit = 2 x largest line (%d B) + %d MiB. Daemon growth = its peak during the step - its rss "+
			"right before the step (the detail column gives it over the rss before the first read); sessionctl growth = its peak - its peak showing the small transcript; %s. The constant covers "+
			"what any read costs whatever its lines (GC slack, gRPC buffers, 1 MiB read batches decoded and re-encoded); "+
			"measured in this run on a %.1f MB transcript: daemon growth %.1f MiB, sessionctl peak rss %.1f MiB",
		float64(big.bytes)/1e6, big.lines, max(sz.largest/4, harness.MinEntry), sz.largest/2, sz.largest/2, sz.largest, big.largest, memConstant/memMiB,
		how, float64(small.bytes)/1e6, float64(sGrowth)/memMiB, float64(ctlSmall)/memMiB))
	if env.Verify {
		sc.Notes = append(sc.Notes, "verified: every read served the file's lines in order, byte for byte (sha256), and the tail its last lines")
	}
	err = p.Stop(60 * time.Second)
	p = nil
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// memTimeBin returns GNU time's path, or "".
func memTimeBin() string {
	p, err := exec.LookPath("time")
	if err != nil {
		return ""
	}
	if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("GNU")) {
		return ""
	}
	return p
}

// memRunPeak runs name with args, its standard output going to out, and
// returns its peak RSS. The rusage of a child the Go runtime starts is no
// use: it forks with CLONE_VM, and exec records the parent's high-water
// mark as the child's, so ru_maxrss is at least the bench process's own
// peak. GNU time forks for real from a small process and reports the
// child's ru_maxrss; without it, /proc/<pid>/status is sampled.
func memRunPeak(ctx context.Context, out io.Writer, name string, args ...string) (int64, error) {
	var stderr bytes.Buffer
	if tb := memTimeBin(); tb != "" {
		f, err := os.CreateTemp("", "sessiond-bench-time-")
		if err != nil {
			return 0, err
		}
		f.Close()
		defer os.Remove(f.Name())
		cmd := exec.CommandContext(ctx, tb, append([]string{"-f", "%M", "-o", f.Name(), name}, args...)...)
		cmd.Stdout, cmd.Stderr = out, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(stderr.Bytes()))
		}
		b, err := os.ReadFile(f.Name())
		if err != nil {
			return 0, err
		}
		var kb int64
		if _, err := fmt.Sscan(string(b), &kb); err != nil || kb <= 0 {
			return 0, fmt.Errorf("GNU time printed %q for %s's peak rss", b, filepath.Base(name))
		}
		return kb << 10, nil
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		// VmHWM only grows, so the last sample before the exit is the
		// peak but for the final instants.
		if _, hwm, err := harness.ProcMem(cmd.Process.Pid); err == nil {
			peak = max(peak, hwm)
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(stderr.Bytes()))
			}
			return peak, nil
		case <-tick.C:
		}
	}
}

// memSessionctl finds sessionctl next to the sessiond binary (where `go
// build -o bin/ ./cmd/...` puts it), else builds it into the scenario's
// folder, which works when the tool runs from the module's source tree.
func memSessionctl(ctx context.Context, env *harness.Env) (string, error) {
	p := filepath.Join(filepath.Dir(env.Sessiond), "sessionctl")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	if err := testharness.BuildInto(ctx, env.Dir, testharness.BuildOptions{}, "sessionctl"); err != nil {
		return "", fmt.Errorf("no sessionctl next to %s, and building it failed: %w", env.Sessiond, err)
	}
	return filepath.Join(env.Dir, "sessionctl"), nil
}
