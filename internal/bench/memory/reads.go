package memory

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// readsPart is part 2: reading a large transcript, against the same reads
// of a small one.
type readsPart struct {
	env      *harness.Env
	sz       memSizes
	sc       *harness.Scenario
	emptyRSS int64
	ctl      string // sessionctl binary, "" when it could not be built
	dir      string
	root     string
	project  string
	rng      *rand.Rand
	p        *harness.Daemon
	c        *client.Client
	base     int64 // daemon rss before any read
	small    *memFile
	sGrowth  int64 // daemon growth reading the small transcript
	ctlSmall int64 // sessionctl's peak showing it
	big      *memFile
	limitMiB float64
	lim      string
	label    string
}

func (m *readsPart) row(cells ...string) { m.sc.Table.Rows = append(m.sc.Table.Rows, cells) }

func memReads(ctx context.Context, env *harness.Env, sz memSizes, emptyRSS int64, sc *harness.Scenario) error {
	m := &readsPart{env: env, sz: sz, sc: sc, emptyRSS: emptyRSS, dir: filepath.Join(env.Dir, "reads"),
		project: "-sessiond-bench-mem-read", rng: rand.New(rand.NewPCG(env.Seed, 100))}
	m.root = filepath.Join(m.dir, "root")
	var err error
	if m.ctl, err = memSessionctl(ctx, env); err != nil {
		sc.Notes = append(sc.Notes, fmt.Sprintf("sessionctl show not measured: %v", err))
	}
	defer func() {
		if m.c != nil {
			m.c.Close()
		}
		if m.p != nil {
			m.p.Stop(30 * time.Second)
		}
	}()
	for _, step := range []func(context.Context) error{m.start, m.baselines, m.writeBig, m.readBig, m.showBig, m.tailBig, m.indexAtStart} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	m.notes()
	err = m.p.Stop(60 * time.Second)
	m.p = nil
	if err != nil {
		return err
	}
	return os.RemoveAll(m.dir)
}

// start writes the small transcript (lines of at most 16 KiB, so its reads
// show what reading costs whatever the lines: the constant), starts the
// daemon on it and measures the daemon before any read.
func (m *readsPart) start(ctx context.Context) error {
	var err error
	m.small, err = memWriteTranscript(m.root, client.Session{ProjectKey: m.project, ID: harness.NewUUID(m.rng)}, m.sz.smallBytes, 16<<10, int(m.sz.tail), m.rng)
	if err != nil {
		return fmt.Errorf("write the small transcript: %w", err)
	}
	if m.p, err = harness.StartDaemon(ctx, m.env.Sessiond, m.dir, m.env.SessiondArgs); err != nil {
		return err
	}
	if m.c, err = client.Dial(m.p.Socket); err != nil {
		return err
	}
	// The listing waits for the start-up indexing, which must not run
	// during the measured steps.
	if infos, _, err := m.c.ListSessions(ctx, client.ListOptions{ProjectKey: m.project}); err != nil || len(infos) != 1 {
		return fmt.Errorf("the daemon lists %d sessions in %s, 1 on disk (%v)", len(infos), m.project, err)
	}
	time.Sleep(200 * time.Millisecond)
	base, baseHWM, err := harness.ProcMem(m.p.Pid())
	if err != nil {
		return err
	}
	m.base = base
	m.row("daemon, small transcript indexed, before any read", mib(base), mib(baseHWM), "-", "-",
		"growth below = peak during the step - rss right before it")
	return nil
}

// measure runs fn with the daemon's peak reset and returns its growth over
// its rss right before the step (what this read needs on top of what the
// daemon holds), and cum, over base: memory an earlier step freed but the
// Go runtime has not yet returned to the system counts there, so it is
// shown too.
func (m *readsPart) measure(fn func() error) (rss, hwm, growth, cum int64, err error) {
	pid := m.p.Pid()
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
	return rss, hwm, hwm - before, hwm - m.base, err
}

// read reads f through the client, checking the order of the entries (and
// with a tail, each against the file's line).
func (m *readsPart) read(ctx context.Context, f *memFile, opt client.ReadOptions) (*memSink, error) {
	s := newMemSink(m.env.Verify)
	next := uint64(0)
	if opt.Tail > 0 && f.lines > uint64(opt.Tail) {
		next = f.lines - uint64(opt.Tail)
	}
	first := next
	err := m.c.Read(ctx, f.key, opt, func(e *sessiondv1.Entry) error {
		if e.GetIndex() != next {
			return fmt.Errorf("entry %d served where %d was due", e.GetIndex(), next)
		}
		if opt.Tail > 0 && m.env.Verify && sha256.Sum256(e.GetData()) != f.tail[next-first] {
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

func (m *readsPart) verified(s *memSink, f *memFile) error {
	if !m.env.Verify {
		return nil
	}
	return s.check(f)
}

// show runs sessionctl show on f and returns sessionctl's peak RSS.
func (m *readsPart) show(ctx context.Context, f *memFile) (peak int64, err error) {
	s := newMemSink(m.env.Verify)
	peak, err = memRunPeak(ctx, s, m.ctl, "--socket", m.p.Socket, "show", "--project", f.key.ProjectKey, f.key.ID)
	if err == nil {
		err = m.verified(s, f)
	}
	return peak, err
}

// readWhole reads f from its start and checks every byte.
func (m *readsPart) readWhole(ctx context.Context, f *memFile) func() error {
	return func() error {
		s, err := m.read(ctx, f, client.ReadOptions{})
		if err == nil {
			err = m.verified(s, f)
		}
		return err
	}
}

// baselines makes the steps on the small transcript.
func (m *readsPart) baselines(ctx context.Context) error {
	sRSS, sHWM, sGrowth, _, err := m.measure(m.readWhole(ctx, m.small))
	if err != nil {
		return err
	}
	m.sGrowth = sGrowth
	m.row(fmt.Sprintf("Read %.1f MB transcript (baseline)", float64(m.small.bytes)/1e6), mib(sRSS), mib(sHWM), mib(sGrowth), "-",
		fmt.Sprintf("%d lines, largest %d B", m.small.lines, m.small.largest))
	if m.ctl == "" {
		return nil
	}
	sRSS, sHWM, sShowGrowth, _, err := m.measure(func() error {
		var err error
		m.ctlSmall, err = m.show(ctx, m.small)
		return err
	})
	if err != nil {
		return err
	}
	m.row("sessionctl show, same (baseline)", mib(sRSS), mib(sHWM), mib(sShowGrowth), "-",
		fmt.Sprintf("sessionctl peak rss %s MiB", mib(m.ctlSmall)))
	return nil
}

// writeBig writes the large transcript while the daemon runs, as another
// program would, so the reads below are the first to touch it and no
// start-up indexing of it inflates the baseline.
func (m *readsPart) writeBig(context.Context) error {
	t0 := time.Now()
	var err error
	m.big, err = memWriteTranscript(m.root, client.Session{ProjectKey: m.project, ID: harness.NewUUID(m.rng)}, m.sz.bigBytes, m.sz.largest, int(m.sz.tail), m.rng)
	if err != nil {
		return fmt.Errorf("write the large transcript: %w", err)
	}
	m.env.Logf("[%s] wrote a %.0f MB transcript (%d lines, largest %d B) in %v", Name,
		float64(m.big.bytes)/1e6, m.big.lines, m.big.largest, time.Since(t0).Round(time.Millisecond))
	limit := int64(2*m.big.largest) + memConstant
	m.limitMiB = float64(limit) / memMiB
	m.lim = fmt.Sprintf("%.1f", m.limitMiB)
	m.label = fmt.Sprintf("%.0f MB", float64(m.big.bytes)/1e6)
	return nil
}

func (m *readsPart) readBig(ctx context.Context) error {
	t0 := time.Now()
	rss, hwm, growth, cum, err := m.measure(m.readWhole(ctx, m.big))
	if err != nil {
		return err
	}
	m.row("Read "+m.label+" (first: opens the session)", mib(rss), mib(hwm), mib(growth), m.lim,
		fmt.Sprintf("%d lines in %v; %s MiB over the rss before any read", m.big.lines, time.Since(t0).Round(time.Millisecond), mib(cum)))
	m.sc.Checks = append(m.sc.Checks, harness.NewCheck("daemon growth, Read "+m.label, float64(growth)/memMiB, m.limitMiB, "MiB", false))
	return nil
}

func (m *readsPart) showBig(ctx context.Context) error {
	if m.ctl == "" {
		return nil
	}
	var ctlBig int64
	t0 := time.Now()
	rss, hwm, growth, cum, err := m.measure(func() error {
		var err error
		ctlBig, err = m.show(ctx, m.big)
		return err
	})
	if err != nil {
		return err
	}
	// sessionctl is a new process each time: its growth is its peak over
	// the peak of the same command on the small transcript, which holds
	// the runtime, the binary's pages and the connection.
	ctlGrowth := ctlBig - m.ctlSmall
	m.row("sessionctl show "+m.label, mib(rss), mib(hwm), mib(growth), m.lim,
		fmt.Sprintf("sessionctl peak rss %s MiB, growth over the baseline show %s MiB; %v; daemon %s MiB over the rss before any read",
			mib(ctlBig), mib(ctlGrowth), time.Since(t0).Round(time.Millisecond), mib(cum)))
	ch := harness.NewCheck("sessionctl show "+m.label+": its growth", float64(ctlGrowth)/memMiB, m.limitMiB, "MiB", false)
	ch.Note = fmt.Sprintf("peak rss %.1f MiB, %.1f MiB on the small transcript", float64(ctlBig)/memMiB, float64(m.ctlSmall)/memMiB)
	m.sc.Checks = append(m.sc.Checks, ch, harness.NewCheck("daemon growth, show "+m.label, float64(growth)/memMiB, m.limitMiB, "MiB", false))
	return nil
}

func (m *readsPart) tailBig(ctx context.Context) error {
	tail := m.sz.tail
	rss, hwm, growth, cum, err := m.measure(func() error {
		s, err := m.read(ctx, m.big, client.ReadOptions{Tail: tail})
		if err == nil && s.lines != min(uint64(tail), m.big.lines) {
			err = fmt.Errorf("tail %d served %d entries", tail, s.lines)
		}
		return err
	})
	if err != nil {
		return err
	}
	m.row(fmt.Sprintf("Read %s, tail %d", m.label, tail), mib(rss), mib(hwm), mib(growth), m.lim,
		fmt.Sprintf("%s MiB over the rss before any read", mib(cum)))
	m.sc.Checks = append(m.sc.Checks, harness.NewCheck(fmt.Sprintf("daemon growth, Read %s tail %d", m.label, tail), float64(growth)/memMiB, m.limitMiB, "MiB", false))
	return nil
}

// indexAtStart: indexing reads the transcript too, so a daemon started on
// this folder indexes both transcripts before its first listing answers.
// Its baseline is the empty daemon of part 1.
func (m *readsPart) indexAtStart(ctx context.Context) error {
	m.c.Close()
	m.c = nil
	err := m.p.Stop(60 * time.Second)
	m.p = nil
	if err != nil {
		return err
	}
	if m.p, err = harness.StartDaemon(ctx, m.env.Sessiond, m.dir, m.env.SessiondArgs); err != nil {
		return err
	}
	t0 := time.Now()
	if m.c, err = client.Dial(m.p.Socket); err != nil {
		return err
	}
	infos, _, err := m.c.ListSessions(ctx, client.ListOptions{ProjectKey: m.project})
	if err != nil || len(infos) != 2 {
		return fmt.Errorf("the restarted daemon lists %d sessions in %s, 2 on disk (%v)", len(infos), m.project, err)
	}
	took := time.Since(t0)
	big := m.big
	for _, in := range infos {
		if in.GetSession().GetSessionId() == big.key.ID && (in.GetEntries() != big.lines || in.GetBytes() != uint64(big.bytes)) {
			return fmt.Errorf("the large transcript is listed with %d entries, %d bytes; it holds %d, %d", in.GetEntries(), in.GetBytes(), big.lines, big.bytes)
		}
	}
	rss, hwm, err := harness.ProcMem(m.p.Pid())
	if err != nil {
		return err
	}
	growth := hwm - m.emptyRSS
	m.row("daemon restarted, indexes both (peak since start)", mib(rss), mib(hwm), mib(growth), m.lim,
		fmt.Sprintf("growth over the empty daemon; listed after %v", took.Round(time.Millisecond)))
	m.sc.Checks = append(m.sc.Checks, harness.NewCheck("daemon growth, indexing "+m.label+" at start", float64(growth)/memMiB, m.limitMiB, "MiB", false))
	return nil
}

func (m *readsPart) notes() {
	how := "sessionctl's peak from GNU time's %M (its own fork, so the bench process's pages do not count)"
	if memTimeBin() == "" {
		how = "sessionctl's peak sampled from /proc every 2 ms (no GNU time found): a lower bound"
	}
	sz, big := m.sz, m.big
	m.sc.Notes = append(m.sc.Notes, fmt.Sprintf(
		"reads: a %.0f MB transcript of %d lines (sizes of dist:agent capped at %d B, plus lines of %d, %d and %d B at 1/4, 1/2, 3/4), "+
			"written while the daemon runs; limit = 2 x largest line (%d B) + %d MiB. Daemon growth = its peak during the step - its rss "+
			"right before the step (the detail column gives it over the rss before the first read); sessionctl growth = its peak - its peak showing the small transcript; %s. The constant covers "+
			"what any read costs whatever its lines (GC slack, gRPC buffers, 1 MiB read batches decoded and re-encoded); "+
			"measured in this run on a %.1f MB transcript: daemon growth %.1f MiB, sessionctl peak rss %.1f MiB",
		float64(big.bytes)/1e6, big.lines, max(sz.largest/4, harness.MinEntry), sz.largest/2, sz.largest/2, sz.largest, big.largest, memConstant/memMiB,
		how, float64(m.small.bytes)/1e6, float64(m.sGrowth)/memMiB, float64(m.ctlSmall)/memMiB))
	if m.env.Verify {
		m.sc.Notes = append(m.sc.Notes, "verified: every read served the file's lines in order, byte for byte (sha256), and the tail its last lines")
	}
}
