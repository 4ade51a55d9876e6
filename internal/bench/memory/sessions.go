package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// sessionsPart is part 1: many sessions known, some active.
type sessionsPart struct {
	env      *harness.Env
	sz       memSizes
	sc       *harness.Scenario
	emptyRSS int64
	dir      string
	root     string
	keys     []client.Session
	want     []harness.Acc // what each session holds: lines and bytes with newlines
	onDisk   int64
	p        *harness.Daemon
	c        *client.Client
	knownRSS int64
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/memMiB) }

func (m *sessionsPart) row(cells ...string) { m.sc.Table.Rows = append(m.sc.Table.Rows, cells) }

func memSessions(ctx context.Context, env *harness.Env, sz memSizes, sc *harness.Scenario) (emptyRSS int64, err error) {
	m := &sessionsPart{env: env, sz: sz, sc: sc, dir: filepath.Join(env.Dir, "sessions")}
	m.root = filepath.Join(m.dir, "root")
	if err := m.empty(ctx); err != nil {
		return 0, err
	}
	if err := m.writeKnown(); err != nil {
		return 0, err
	}
	if m.p, err = harness.StartDaemon(ctx, env.Sessiond, m.dir, env.SessiondArgs); err != nil {
		return 0, err
	}
	defer func() {
		if m.p != nil {
			m.p.Stop(30 * time.Second)
		}
	}()
	if m.c, err = client.Dial(m.p.Socket); err != nil {
		return 0, err
	}
	defer m.c.Close()
	if err := m.known(ctx); err != nil {
		return 0, err
	}
	added, err := m.active(ctx)
	if err != nil {
		return 0, err
	}
	if env.Verify {
		if err := m.verify(ctx, added); err != nil {
			return 0, err
		}
	}
	err = m.p.Stop(60 * time.Second)
	m.p = nil
	if err != nil {
		return 0, err
	}
	return m.emptyRSS, os.RemoveAll(m.dir)
}

// empty measures the baseline: the daemon with nothing to know.
func (m *sessionsPart) empty(ctx context.Context) error {
	emptyDir := filepath.Join(m.env.Dir, "empty")
	if err := os.MkdirAll(filepath.Join(emptyDir, "root"), 0o700); err != nil {
		return err
	}
	p, err := harness.StartDaemon(ctx, m.env.Sessiond, emptyDir, m.env.SessiondArgs)
	if err != nil {
		return err
	}
	// Let the start-up allocations (index warm-up goroutine, gRPC server)
	// settle so the baseline is what an idle daemon holds.
	time.Sleep(300 * time.Millisecond)
	emptyRSS, emptyHWM, err := harness.ProcMem(p.Pid())
	if stopErr := p.Stop(30 * time.Second); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	m.emptyRSS = emptyRSS
	m.row("daemon, empty root, after start", mib(emptyRSS), mib(emptyHWM), "-", "-", "baseline")
	return os.RemoveAll(emptyDir)
}

// writeKnown writes the known sessions as another program would have,
// before the daemon starts.
func (m *sessionsPart) writeKnown() error {
	rng := rand.New(rand.NewPCG(m.env.Seed, 1))
	m.keys = make([]client.Session, m.sz.known)
	m.want = make([]harness.Acc, m.sz.known)
	t0 := time.Now()
	for i := range m.keys {
		m.keys[i] = client.Session{ProjectKey: fmt.Sprintf("-sessiond-bench-mem-p%03d", i%m.sz.projects), ID: harness.NewUUID(rng)}
		var buf []byte
		for j := range m.sz.perKnown {
			buf = harness.AppendEntry(buf, 200+rng.IntN(2048-200+1), m.keys[i].ID, harness.NewUUID(rng), uint64(j))
			buf = append(buf, '\n')
		}
		path := harness.TranscriptPath(m.root, m.keys[i])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			return err
		}
		m.want[i] = harness.Acc{Entries: uint64(m.sz.perKnown), Bytes: uint64(len(buf))}
		m.onDisk += int64(len(buf))
	}
	m.env.Logf("[%s] wrote %d sessions (%.0f MB) in %v", Name, m.sz.known, float64(m.onDisk)/1e6, time.Since(t0).Round(time.Millisecond))
	return nil
}

// known lists every session ("known" means indexed: the listing waits for,
// or does, the indexing the daemon starts on its own) and measures the
// daemon then.
func (m *sessionsPart) known(ctx context.Context) error {
	t0 := time.Now()
	infos, _, err := m.c.ListSessions(ctx, client.ListOptions{})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if len(infos) != m.sz.known {
		return fmt.Errorf("the daemon lists %d sessions, %d on disk", len(infos), m.sz.known)
	}
	indexed := time.Since(t0)
	knownRSS, knownHWM, err := harness.ProcMem(m.p.Pid())
	if err != nil {
		return err
	}
	m.knownRSS = knownRSS
	m.row(fmt.Sprintf("daemon, %d sessions known, none active", m.sz.known), mib(knownRSS), mib(knownHWM),
		mib(knownRSS-m.emptyRSS), "-", fmt.Sprintf("growth over empty; listed all after %v", indexed.Round(time.Millisecond)))
	return nil
}

// active keeps sz.active sessions busy and measures the daemon's peak; it
// returns what was appended to each.
func (m *sessionsPart) active(ctx context.Context) ([]harness.Acc, error) {
	added, total, err := m.trickle(ctx)
	if err != nil {
		return nil, err
	}
	st, err := m.c.Status(ctx)
	if err != nil {
		return nil, err
	}
	activeRSS, activeHWM, err := harness.ProcMem(m.p.Pid())
	if err != nil {
		return nil, err
	}
	sz := m.sz
	if int(st.GetActiveSessions()) < sz.active {
		return nil, fmt.Errorf("only %d sessions active after the trickle, %d written to", st.GetActiveSessions(), sz.active)
	}
	m.row(fmt.Sprintf("daemon, %d known, %d active", sz.known, sz.active), mib(activeRSS), mib(activeHWM),
		mib(activeHWM-m.emptyRSS), "200.0",
		fmt.Sprintf("peak since start; growth over empty; %d appends by %d clients in %v; %d writers open",
			total, sz.clients, sz.trickle, st.GetActiveSessions()))
	ch := harness.NewCheck(fmt.Sprintf("peak RSS, %d known / %d active", sz.known, sz.active), float64(activeHWM)/memMiB, 200, "MiB", false)
	ch.Note = fmt.Sprintf("empty daemon %.1f MiB, %d known idle %.1f MiB", float64(m.emptyRSS)/memMiB, sz.known, float64(m.knownRSS)/memMiB)
	m.sc.Checks = append(m.sc.Checks, ch)
	m.sc.Notes = append(m.sc.Notes, fmt.Sprintf(
		"sessions: %d canonical files of %d entries (200 B-2 KiB each, %.0f MB in all) in %d projects, written before the daemon starts; "+
			"then %d clients append one entry (200 B-2 KiB) at a time round robin to %d of them for %v; "+
			"peak = VmHWM since the daemon started (indexing included)",
		sz.known, sz.perKnown, float64(m.onDisk)/1e6, sz.projects, sz.clients, sz.active, sz.trickle))
	return added, nil
}

// trickle: clients each own active/clients sessions and append one entry
// to each in turn, so every writer stays open (well within --idle-retire)
// and each sees appends every few hundred ms.
func (m *sessionsPart) trickle(ctx context.Context) ([]harness.Acc, int, error) {
	sz := m.sz
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
			appends[ci], errs[ci] = m.trickleClient(ctx, tctx, ci, added)
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range appends {
		total += n
	}
	return added, total, errors.Join(errs...)
}

// trickleClient is client ci of the trickle until tctx ends (every session
// it owns gets at least one append, however short the trickle).
func (m *sessionsPart) trickleClient(ctx, tctx context.Context, ci int, added []harness.Acc) (int, error) {
	sz := m.sz
	cl, err := client.Dial(m.p.Socket)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	r := rand.New(rand.NewPCG(m.env.Seed, uint64(2+ci)))
	var line []byte
	appends := 0
	for round := 0; ; round++ {
		for s := ci; s < sz.active; s += sz.clients {
			if round > 0 && tctx.Err() != nil {
				return appends, nil
			}
			k := m.keys[s]
			line = harness.AppendEntry(line[:0], 200+r.IntN(2048-200+1), k.ID, harness.NewUUID(r), uint64(sz.perKnown)+added[s].Entries)
			if _, err := cl.Append(ctx, k, line); err != nil {
				return appends, fmt.Errorf("append to %s: %w", k, err)
			}
			added[s].Entries++
			added[s].Bytes += uint64(len(line)) + 1
			appends++
		}
	}
}

// verify checks every session is listed with its entries and bytes, and
// the active ones hold every acknowledged entry.
func (m *sessionsPart) verify(ctx context.Context, added []harness.Acc) error {
	if err := m.c.FlushAll(ctx, func(*sessiondv1.FlushedSession) error { return nil }); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	for s := range added {
		m.want[s].Entries += added[s].Entries
		m.want[s].Bytes += added[s].Bytes
	}
	infos, _, err := m.c.ListSessions(ctx, client.ListOptions{})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if len(infos) != m.sz.known {
		return fmt.Errorf("after the trickle the daemon lists %d sessions, %d on disk", len(infos), m.sz.known)
	}
	byID := map[string]*sessiondv1.SessionInfo{}
	for _, in := range infos {
		byID[in.GetSession().GetSessionId()] = in
	}
	for i, k := range m.keys {
		in := byID[k.ID]
		if in == nil || in.GetEntries() != m.want[i].Entries || in.GetBytes() != m.want[i].Bytes {
			return fmt.Errorf("session %s: listed as %v, want %d entries, %d bytes", k, in, m.want[i].Entries, m.want[i].Bytes)
		}
	}
	for s := range added {
		path := harness.TranscriptPath(m.root, m.keys[s])
		n, err := harness.CountLines(path)
		if err != nil {
			return err
		}
		if n != m.want[s] {
			return fmt.Errorf("%s holds %d entries (%d bytes), want %d (%d bytes)", path, n.Entries, n.Bytes, m.want[s].Entries, m.want[s].Bytes)
		}
	}
	m.sc.Notes = append(m.sc.Notes, fmt.Sprintf("verified: %d sessions listed with their entries and bytes; the %d active ones hold every acknowledged entry",
		m.sz.known, m.sz.active))
	return nil
}
