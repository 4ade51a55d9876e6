package listing

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// scenario is the listing scenario's state from one step to the next.
type scenario struct {
	env      *harness.Env
	n        int
	root     string
	sessions []listSession
	total    int64
	largest  int64
	metas    map[string]int
	// the SDK
	one, sdk          *sdkListRun
	sdkCalls          []float64
	sdkBest, sdkFirst time.Duration
	// sessiond
	d                              *harness.Daemon
	c                              *client.Client
	ready, cold, coldEnd, warmAt   time.Duration
	warmBeforeCold, warmDuringCold bool
	wl                             warmLog
	coldList, warmList             []*sessiondv1.SessionInfo
	warm                           []time.Duration
}

// Run measures the scenario: the folder, the SDK's listings of it, then
// sessiond's on the same folder.
func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	sc := &harness.Scenario{}
	m := &scenario{env: env, n: int(env.Scaled(listSessions, 20)), root: filepath.Join(env.Dir, "root"), metas: map[string]int{}}
	defer m.close()
	for _, step := range []func(context.Context) error{m.folder, m.sdkListings, m.startSessiond, m.firstListing, m.waitWarm, m.warmListings, m.verify} {
		if err := step(ctx); err != nil {
			return sc, err
		}
	}
	m.report(sc)
	return sc, nil
}

func (m *scenario) close() {
	if m.c != nil {
		m.c.Close()
	}
	if m.d != nil {
		m.d.Stop(30 * time.Second)
	}
}

// folder builds the projects folder, before sessiond exists.
func (m *scenario) folder(ctx context.Context) error {
	if err := checkListSDK(m.env.SDKDir); err != nil {
		return fmt.Errorf("cannot compare with the official SDK: %w", err)
	}
	fixtures, err := findFixtures(m.env.SDKDir)
	if err != nil {
		return err
	}
	ts, err := loadListTemplates(fixtures)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if m.sessions, err = buildListFolder(ctx, m.root, m.env.Seed, m.n, ts); err != nil {
		return fmt.Errorf("building the projects folder: %w", err)
	}
	for _, s := range m.sessions {
		m.total += s.size
		m.largest = max(m.largest, s.size)
		m.metas[s.meta]++
	}
	m.env.Logf("[listing] %d sessions, %.1f MB, built in %v", m.n, float64(m.total)/1e6, time.Since(t0).Round(time.Millisecond))
	return nil
}

// sdkListings runs the SDK in node: one process with a single call, for
// node's whole wall time, and one with sdkReps calls; the best of all calls
// is the figure compared.
func (m *scenario) sdkListings(ctx context.Context) error {
	var err error
	if m.one, err = runSDKList(ctx, m.env.SDKDir, m.root, 1); err != nil {
		return err
	}
	if m.sdk, err = runSDKList(ctx, m.env.SDKDir, m.root, sdkReps); err != nil {
		return err
	}
	m.sdkCalls = append(slices.Clone(m.one.TimesMs), m.sdk.TimesMs...)
	m.sdkBest = time.Duration(slices.Min(m.sdkCalls) * float64(time.Millisecond))
	m.sdkFirst = time.Duration(m.one.TimesMs[0] * float64(time.Millisecond))
	m.env.Logf("[listing] SDK listSessions: best %v of %d, node wall %v", m.sdkBest.Round(time.Millisecond), len(m.sdkCalls), m.one.Wall.Round(time.Millisecond))
	return nil
}

func (m *scenario) logPath() string { return filepath.Join(m.env.Dir, "sessiond.log") }

// startSessiond starts sessiond on the same folder. At info level it logs
// the end of its start-up indexing, which is how the bench learns that
// the index is warm (Status does not say).
func (m *scenario) startSessiond(ctx context.Context) error {
	args := append(slices.Clone(m.env.SessiondArgs), "--log-level", "info")
	start := time.Now()
	var err error
	if m.d, err = harness.StartDaemon(ctx, m.env.Sessiond, m.env.Dir, args); err != nil {
		return err
	}
	m.ready = time.Since(start)
	m.c, err = client.Dial(m.d.Socket)
	return err
}

// firstListing is issued as soon as sessiond answers.
func (m *scenario) firstListing(ctx context.Context) error {
	var err error
	if m.wl, err = readWarmLog(m.logPath()); err != nil {
		return err
	}
	m.warmBeforeCold = m.wl.seen
	t := time.Now()
	if m.coldList, err = listAll(ctx, m.c); err != nil {
		return fmt.Errorf("first ListSessions: %w", err)
	}
	m.cold = time.Since(t)
	m.coldEnd = m.sinceStart()
	if m.wl, err = readWarmLog(m.logPath()); err != nil {
		return err
	}
	m.warmDuringCold = !m.warmBeforeCold && m.wl.seen
	return nil
}

func (m *scenario) sinceStart() time.Duration { return time.Since(m.d.Harness.Started()) }

// waitWarm waits for the start-up indexing to end (polling the log).
func (m *scenario) waitWarm(ctx context.Context) error {
	for !m.wl.seen {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if m.sinceStart() > 5*time.Minute {
			return fmt.Errorf("sessiond did not log the end of its start-up indexing within 5 minutes (%s)", m.logPath())
		}
		time.Sleep(2 * time.Millisecond)
		var err error
		if m.wl, err = readWarmLog(m.logPath()); err != nil {
			return err
		}
	}
	// Only known to the polling's precision when the bench was waiting for
	// it; otherwise the log's own figure (WarmIndex's duration) is all
	// there is.
	if !m.warmBeforeCold && !m.warmDuringCold {
		m.warmAt = m.sinceStart()
	}
	return nil
}

func (m *scenario) warmListings(ctx context.Context) error {
	m.warm = make([]time.Duration, listReps)
	for i := range m.warm {
		t := time.Now()
		var err error
		if m.warmList, err = listAll(ctx, m.c); err != nil {
			return fmt.Errorf("ListSessions: %w", err)
		}
		m.warm[i] = time.Since(t)
	}
	m.env.Logf("[listing] sessiond: first listing %v (warm-up done before it: %v), warm best %v",
		m.cold.Round(time.Millisecond), m.warmBeforeCold, bestDur(m.warm).Round(time.Millisecond))
	return nil
}

// verify: both list the same sessions, in the same order, with the same
// metadata; and they are the sessions written.
func (m *scenario) verify(context.Context) error {
	if !m.env.Verify {
		return nil
	}
	if err := verifyListing(m.sessions, m.sdk.Result, m.warmList); err != nil {
		return fmt.Errorf("verify (warm listing): %w", err)
	}
	if err := verifyListing(m.sessions, m.sdk.Result, m.coldList); err != nil {
		return fmt.Errorf("verify (first listing): %w", err)
	}
	if err := verifyListing(m.sessions, m.one.Result, m.warmList); err != nil {
		return fmt.Errorf("verify (SDK single-call run): %w", err)
	}
	return nil
}

// report fills sc's table, target and notes.
func (m *scenario) report(sc *harness.Scenario) {
	warmBest := bestDur(m.warm)
	sc.Table = m.table(warmBest)
	sc.Checks = append(sc.Checks, harness.NewCheck(fmt.Sprintf("listing %d sessions: sessiond warm ListSessions >= 10x faster than SDK listSessions", m.n),
		float64(m.sdkBest)/float64(warmBest), 10, "x", true))
	var metaText []string
	for _, k := range slices.Sorted(maps.Keys(m.metas)) {
		metaText = append(metaText, fmt.Sprintf("%s %d", k, m.metas[k]))
	}
	sc.Notes = append(sc.Notes,
		fmt.Sprintf("Folder: %d sessions over %d projects, %.1f MB in all (mean %.0f KB, largest %.1f MB), cut from the real transcripts of shared/fixtures (fresh session ids and uuids); sizes 70%% 4-32 KiB, 25%% 32-128 KiB, 5%% 128-512 KiB, 1 in 500 2-5 MiB. Summary sources: %s.",
			m.n, len(listProjects), float64(m.total)/1e6, float64(m.total)/float64(m.n)/1e3, float64(m.largest)/1e6, strings.Join(metaText, ", ")),
		fmt.Sprintf("The page cache is warm for both: the folder was just written (and is read by the SDK first). SDK %s on node %s, listSessions() with no options (every project).", m.sdk.SDK, m.sdk.Node),
		"sessiond is started after the folder exists, so its first listing and its start-up WarmIndex index files it never wrote (reading each whole); the warm listings read no transcript, only stat each file.",
	)
	if m.env.Verify {
		sc.Notes = append(sc.Notes, fmt.Sprintf("Verified: the SDK and sessiond (first and warm listings) list the same %d session ids in the same order, with equal summary, title, first prompt, cwd, git branch, tag, created, modified and size.", m.n))
	}
}

func (m *scenario) table(warmBest time.Duration) *harness.Table {
	ratio := func(x time.Duration) string { return fmt.Sprintf("%.1fx", float64(m.sdkBest)/float64(x)) }
	warmState := "no, it was still running when the listing returned (both indexed)"
	switch {
	case m.warmBeforeCold:
		warmState = "yes, before the listing was issued"
	case m.warmDuringCold:
		warmState = "no, it ended while the listing ran"
	}
	// When the warm-up ended before the bench polled for it, only a bound
	// is known: it was over when the first listing returned.
	warmAtText := "<= " + msOf(m.coldEnd)
	if m.warmAt > 0 {
		warmAtText = msOf(m.warmAt)
	}
	median := medianDur(m.warm)
	return &harness.Table{
		Columns: []string{"listing", "ms", "SDK best / this", "how"},
		Rows: [][]string{
			{"SDK listSessions(), best", msOf(m.sdkBest), "1.0x", fmt.Sprintf("the call alone, timed inside node; best of %d calls in 2 processes (all: %s ms)", len(m.sdkCalls), joinMs(m.sdkCalls))},
			{"SDK listSessions(), fresh process", msOf(m.sdkFirst), ratio(m.sdkFirst), "the only call of a new node process"},
			{"node wall, one listSessions()", msOf(m.one.Wall), ratio(m.one.Wall), fmt.Sprintf("process start to exit, start-up + import %.0f ms included", m.one.ImportMs)},
			{"sessiond start -> answering", msOf(m.ready), "", "exec to the first Status answered"},
			{"sessiond first ListSessions", msOf(m.cold), ratio(m.cold), "issued as soon as Status answered; warm-up done before it: " + warmState},
			{"sessiond start -> index warm", warmAtText, "", fmt.Sprintf("exec to the 'indexed sessions on disk' log line (polled, 2 ms); WarmIndex itself took %.0f ms; the first listing ended %s ms after exec", m.wl.took*1000, msOf(m.coldEnd))},
			{"sessiond ListSessions, warm, best", msOf(warmBest), ratio(warmBest), fmt.Sprintf("over gRPC with the Go client, all %d sessions in one call, best of %d", len(m.warmList), listReps)},
			{"sessiond ListSessions, warm, median", msOf(median), ratio(median), ""},
		},
	}
}
