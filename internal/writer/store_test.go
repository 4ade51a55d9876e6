package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
)

// AppendOptions and SummaryUpdate are package sessionstore's, which the
// tests here append with.
type (
	AppendOptions = sessionstore.AppendOptions
	SummaryUpdate = sessionstore.SummaryUpdate
)

func appendOpt(t *testing.T, m *Manager, k layout.Key, opt AppendOptions, lines ...string) (*AppendResult, error) {
	t.Helper()
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	return m.AppendBatch(bg, k, raw, opt)
}

func transcriptLines(t *testing.T, c *fstest.CrashFS, k layout.Key) []string {
	t.Helper()
	b, _ := c.ReadFile(crashLayout.TranscriptPath(k))
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestBatchIDStoredOnce: a batch resent with its id is answered as a
// duplicate and stores nothing, even when its entries carry no uuid; the
// same entries under another id (or none) are stored again. The ids are
// remembered through a power loss right after the acknowledgement, through
// the compaction that drops the journal, and through a restart.
func TestBatchIDStoredOnce(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	k := fixedKey(1, "")
	entry := `{"type":"queue-operation","operation":"enqueue"}` // no uuid, as half a CLI session's lines
	r, err := appendOpt(t, m, k, AppendOptions{BatchID: "b1"}, entry)
	if err != nil || r.DuplicateBatch || r.Results[0].Outcome != Stored {
		t.Fatalf("first append: %+v, %v", r, err)
	}
	check := func(m *Manager, what string) {
		t.Helper()
		r, err := appendOpt(t, m, k, AppendOptions{BatchID: "b1"}, entry)
		if err != nil || !r.DuplicateBatch || r.Results[0].Outcome != Duplicate {
			t.Fatalf("%s: resent batch b1 = %+v, %v; want a duplicate batch", what, r, err)
		}
	}
	check(m, "same process")
	for _, opt := range []AppendOptions{{BatchID: "b2"}, {}} {
		if r, err := appendOpt(t, m, k, opt, entry); err != nil || r.DuplicateBatch || r.Results[0].Outcome != Stored {
			t.Fatalf("identical batch with id %q: %+v, %v; want it stored", opt.BatchID, r, err)
		}
	}

	// Power loss right after the acknowledgements: only what was synced.
	abortManager(m)
	v := c.CrashClone(nil)
	m = newCrashManager(t, v, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	check(m, "after a power loss")
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	check(m, "after the compaction")
	closeManager(t, m)
	if _, err := v.ReadFile(crashLayout.StorePath(k)); err != nil {
		t.Fatalf("no store sidecar after the compaction: %v", err)
	}
	m = newCrashManager(t, v, nil)
	check(m, "after a restart")
	closeManager(t, m)
	if got := transcriptLines(t, v, k); len(got) != 3 {
		t.Fatalf("transcript has %d lines, want 3 (b1 once, b2, no id): %q", len(got), got)
	}
}

// TestBatchIDInvalid: a batch id must be printable ASCII of at most 128
// bytes.
func TestBatchIDInvalid(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	for _, id := range []string{"has space", strings.Repeat("x", 129), "tab\there", "é"} {
		if _, err := appendOpt(t, m, fixedKey(1, ""), AppendOptions{BatchID: id}, `{}`); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "batch_id") {
			t.Errorf("batch id %q: %v, want an invalid argument naming batch_id", id, err)
		}
	}
}

// TestSummaryCompareAndSwap: a summary is stored with its batch when it was
// folded from the session's current version, and refused with the batch
// (nothing stored) otherwise. ListSummaries gives it with the session's
// listing mtime; it survives a power loss, a compaction and a restart, goes
// with a delete and comes back with a restore.
func TestSummaryCompareAndSwap(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	k := fixedKey(1, "")
	sum := func(n int) *SummaryUpdate {
		return &SummaryUpdate{Data: []byte(fmt.Sprintf(`{"n":%d}`, n)), ExpectedVersion: uint64(n - 1)}
	}
	r, err := appendOpt(t, m, k, AppendOptions{Summary: sum(1)}, `{"type":"user","uuid":"u1"}`)
	if err != nil || r.SummaryVersion != 1 {
		t.Fatalf("first summary: %+v, %v", r, err)
	}
	stale := &SummaryUpdate{Data: []byte(`{"n":99}`), ExpectedVersion: 0}
	_, err = appendOpt(t, m, k, AppendOptions{Summary: stale}, `{"type":"user","uuid":"u2"}`)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "fold onto the current summary") {
		t.Fatalf("stale summary: %v, want a conflict", err)
	}
	if r, err := appendOpt(t, m, k, AppendOptions{Summary: sum(2)}, `{"type":"user","uuid":"u3"}`); err != nil || r.SummaryVersion != 2 {
		t.Fatalf("second summary: %+v, %v", r, err)
	}
	// A subagent transcript has no summary of its own and leaves the
	// session's alone.
	sub := fixedKey(1, "subagents/agent-a1")
	if _, err := appendOpt(t, m, sub, AppendOptions{Summary: sum(3)}, `{"isSidechain":true}`); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("summary on a subpath: %v, want invalid argument", err)
	}
	if _, err := appendOpt(t, m, sub, AppendOptions{}, `{"isSidechain":true}`); err != nil {
		t.Fatal(err)
	}
	want := func(m *Manager, what string, data string, version uint64) {
		t.Helper()
		sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", "")
		if err != nil {
			t.Fatalf("%s: ListSummaries: %v", what, err)
		}
		if data == "" {
			if len(sums) != 0 {
				t.Fatalf("%s: summaries %+v, want none", what, sums)
			}
			return
		}
		if len(sums) != 1 || string(sums[0].Data) != data || sums[0].Version != version || sums[0].Key != k {
			t.Fatalf("%s: summaries %+v, want %s at version %d", what, sums, data, version)
		}
		infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{ProjectKey: k.ProjectKey})
		if err != nil || len(infos) != 1 || infos[0].ModifiedMs != sums[0].ModifiedMs {
			t.Fatalf("%s: List %+v (%v) disagrees with the summary's mtime %d", what, infos, err, sums[0].ModifiedMs)
		}
	}
	want(m, "live", `{"n":2}`, 2)
	if got := transcriptLines(t, c, k); len(got) != 0 && !(len(got) == 1 && got[0] == "") {
		// Nothing compacted yet (IdleCompact is an hour); the refused
		// batch must not be in the journal either: checked after recovery.
		t.Logf("transcript before compaction: %q", got)
	}

	abortManager(m)
	v := c.CrashClone(nil)
	m = newCrashManager(t, v, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	want(m, "after a power loss", `{"n":2}`, 2)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	if got := transcriptLines(t, v, k); len(got) != 2 || strings.Contains(strings.Join(got, ""), "u2") {
		t.Fatalf("transcript %q: want u1 and u3, not the refused u2", got)
	}
	m = newCrashManager(t, v, nil)
	defer closeManager(t, m)
	want(m, "after a restart", `{"n":2}`, 2)
	if sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, ""); err != nil || len(sums) != 1 {
		t.Fatalf("one session's summary: %+v, %v", sums, err)
	}
	if sums, err := catalogOf(m).ListSummaries(bg, "-other-project", "", ""); err != nil || len(sums) != 0 {
		t.Fatalf("another project's summaries: %+v, %v", sums, err)
	}
	if _, err := m.Trash().Delete(bg, k, false); err != nil {
		t.Fatal(err)
	}
	want(m, "after delete", "", 0)
	if err := m.Trash().Restore(bg, k); err != nil {
		t.Fatal(err)
	}
	want(m, "after restore", `{"n":2}`, 2)
}

// TestSummaryFoldsNeverLost: two appenders folding onto one session's
// summary with compare-and-swap (as two agent processes' adapters do) lose
// no fold: the final count is every entry stored.
func TestSummaryFoldsNeverLost(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	const per = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for {
					sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, "")
					if err != nil {
						errs <- err
						return
					}
					n, version := 0, uint64(0)
					if len(sums) == 1 {
						var s struct{ N int }
						json.Unmarshal(sums[0].Data, &s)
						n, version = s.N, sums[0].Version
					}
					_, err = m.AppendBatch(bg, k, [][]byte{[]byte(`{"type":"x"}`)}, AppendOptions{
						Summary: &SummaryUpdate{Data: []byte(fmt.Sprintf(`{"n":%d}`, n+1)), ExpectedVersion: version}})
					if errors.Is(err, errdefs.ErrConflict) {
						continue // another appender won: refold
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", "")
	if err != nil || len(sums) != 1 || string(sums[0].Data) != fmt.Sprintf(`{"n":%d}`, 2*per) {
		t.Fatalf("final summary %+v (%v), want n=%d", sums, err, 2*per)
	}
	infos, _, _ := catalogOf(m).List(bg, catalog.ListOptions{ProjectKey: k.ProjectKey})
	if len(infos) != 1 || infos[0].Entries != 2*per {
		t.Fatalf("entries %+v, want %d", infos, 2*per)
	}
}

// TestSummaryStaleAfterOtherAppends: a summary is reported with the
// session's mtime while it covers every line (so listSessions uses it
// without reading the session), and with an older one once a line was
// added without a new summary (so listSessions reads the session, as it
// must: the summary no longer describes it). A compaction, which moves the
// file's mtime, does not make a current summary stale.
func TestSummaryStaleAfterOtherAppends(t *testing.T) {
	c := fstest.NewCrashFS()
	// The files' mtimes come from the system clock: the fake one starts
	// well before them.
	clk := clock.NewFake(time.Now().Add(-time.Hour))
	wl := &workload{cfg: func(c *Config) { c.Clock = clk }}
	m := newCrashManager(t, c, wl)
	k := fixedKey(1, "")
	mtimes := func(what string) (summary, session int64) {
		t.Helper()
		sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, "")
		infos, _, err2 := catalogOf(m).List(bg, catalog.ListOptions{ProjectKey: k.ProjectKey})
		if err != nil || err2 != nil || len(sums) != 1 || len(infos) != 1 {
			t.Fatalf("%s: %v %v %v %v", what, sums, err, infos, err2)
		}
		return sums[0].ModifiedMs, infos[0].ModifiedMs
	}
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: &SummaryUpdate{Data: []byte(`{"n":1}`)}}, `{"type":"user","uuid":"a"}`); err != nil {
		t.Fatal(err)
	}
	if s, l := mtimes("after a summary"); s != l {
		t.Fatalf("current summary mtime %d, session %d: want equal", s, l)
	}
	clk.Advance(5 * time.Millisecond)
	if _, err := appendOpt(t, m, k, AppendOptions{}, `{"type":"custom-title","customTitle":"renamed by sessionctl"}`); err != nil {
		t.Fatal(err)
	}
	if s, l := mtimes("after a line without summary"); s >= l {
		t.Fatalf("stale summary mtime %d, session %d: want it older", s, l)
	}
	clk.Advance(5 * time.Millisecond)
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: &SummaryUpdate{Data: []byte(`{"n":2}`), ExpectedVersion: 1}}, `{"type":"user","uuid":"b"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	m = newCrashManager(t, c, wl)
	defer closeManager(t, m)
	if s, l := mtimes("after compaction and restart"); s != l {
		t.Fatalf("current summary mtime %d, session %d after compaction: want equal", s, l)
	}
}

// TestAgentMetaBecomesSidecar: the last agent_metadata entry of a subagent
// transcript becomes its .meta.json (without "type") when compacted, and
// the entries stay in the transcript, as the store must return them.
func TestAgentMetaBecomesSidecar(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	k := fixedKey(1, "subagents/agent-x")
	mustAppendTo(t, m, k, `{"type":"agent_metadata","agentType":"Explore","toolUseId":"toolu_1"}`, `{"type":"user","isSidechain":true,"uuid":"s1"}`)
	mustAppendTo(t, m, k, `{"type":"agent_metadata","agentType":"Explore","toolUseId":"toolu_1","finished":true}`)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	meta, err := c.ReadFile(strings.TrimSuffix(crashLayout.TranscriptPath(k), ".jsonl") + ".meta.json")
	if err != nil || string(meta) != `{"agentType":"Explore","toolUseId":"toolu_1","finished":true}` {
		t.Fatalf(".meta.json = %q, %v", meta, err)
	}
	if got := transcriptLines(t, c, k); len(got) != 3 {
		t.Fatalf("transcript %q, want the 3 entries", got)
	}
	// A main transcript's agent_metadata-typed entry makes no sidecar.
	m = newCrashManager(t, c, nil)
	main := fixedKey(1, "")
	mustAppendTo(t, m, main, `{"type":"agent_metadata","agentType":"x"}`)
	if _, err := m.Flush(bg, main); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	if _, err := c.ReadFile(strings.TrimSuffix(crashLayout.TranscriptPath(main), ".jsonl") + ".meta.json"); err == nil {
		t.Fatal("a main transcript got a .meta.json")
	}
}

// TestSummaryFullOfEscapables: a summary at the size limit made of the
// characters JSON encoders like to escape (<, >, &, U+2028) is stored with
// its batch: its Meta record stays under the journal's limit. The writer
// goes on taking appends.
func TestSummaryFullOfEscapables(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	body := strings.Repeat("<&>\u2028", (sessionstore.MaxSummaryBytes-20)/6)
	data := []byte(`{"firstPrompt":"` + body + `"}`)
	if len(data) > sessionstore.MaxSummaryBytes {
		t.Fatalf("test summary is %d bytes", len(data))
	}
	r, err := appendOpt(t, m, k, AppendOptions{BatchID: "b1", Summary: &SummaryUpdate{Data: data}}, `{"type":"user","uuid":"u1"}`)
	if err != nil || r.SummaryVersion != 1 {
		t.Fatalf("append with a %d-byte summary of escapables: %+v, %v", len(data), r, err)
	}
	sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, "")
	if err != nil || len(sums) != 1 || string(sums[0].Data) != string(data) {
		t.Fatalf("summary read back: %v (%d summaries)", err, len(sums))
	}
	if _, err := appendOpt(t, m, k, AppendOptions{}, `{"type":"user","uuid":"u2"}`); err != nil {
		t.Fatalf("the next append: %v", err)
	}
}

// TestSummaryCoverage: a summary that says how many lines it was folded
// from is refused (nothing stored) when lines were added without a summary
// since; ListSummaries says how many lines the stored summary covers and
// the transcript holds, and a summary folded from the whole transcript is
// then taken.
func TestSummaryCoverage(t *testing.T) {
	m := newCrashManager(t, fstest.NewCrashFS(), nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	cover := func(data string, expected, covers uint64) *SummaryUpdate {
		return &SummaryUpdate{Data: []byte(data), ExpectedVersion: expected, Covers: covers, CheckCoverage: true}
	}
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: cover(`{"n":1}`, 0, 0)}, `{"type":"user","uuid":"a"}`); err != nil {
		t.Fatal(err)
	}
	// A rename by sessionctl: a line without a summary.
	if _, err := appendOpt(t, m, k, AppendOptions{}, `{"type":"custom-title","customTitle":"T"}`); err != nil {
		t.Fatal(err)
	}
	_, err := appendOpt(t, m, k, AppendOptions{Summary: cover(`{"n":2}`, 1, 1)}, `{"type":"user","uuid":"b"}`)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "folded from 1 lines, the transcript holds 2") {
		t.Fatalf("a fold that misses the rename: %v, want a conflict", err)
	}
	sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, "")
	if err != nil || len(sums) != 1 || sums[0].Covers != 1 || sums[0].Entries != 2 {
		t.Fatalf("ListSummaries = %+v, %v; want covers 1 of 2 lines", sums, err)
	}
	// Folded from the whole transcript: taken.
	if r, err := appendOpt(t, m, k, AppendOptions{Summary: cover(`{"n":3}`, 1, 2)}, `{"type":"user","uuid":"b"}`); err != nil || r.SummaryVersion != 2 {
		t.Fatalf("a whole fold: %+v, %v", r, err)
	}
	if sums, _ := catalogOf(m).ListSummaries(bg, k.ProjectKey, k.SessionID, ""); len(sums) != 1 || sums[0].Covers != 3 || sums[0].Entries != 3 {
		t.Fatalf("after the whole fold: %+v", sums)
	}
}

// TestBatchIDForgottenAfterMemory: a batch id is remembered for
// sessionstore.BatchIDMemory of the writer's clock; after that a resent batch is
// stored again.
func TestBatchIDForgottenAfterMemory(t *testing.T) {
	clk := clock.NewFake(time.Now())
	m := newCrashManager(t, fstest.NewCrashFS(), &workload{cfg: func(c *Config) { c.Clock = clk }})
	defer closeManager(t, m)
	k := fixedKey(1, "")
	opt := AppendOptions{BatchID: "batch-1"}
	send := func(what string, wantDup bool, wantEntries uint64) {
		t.Helper()
		res, err := appendOpt(t, m, k, opt, `{"type":"user","message":"no uuid"}`)
		if err != nil || res.DuplicateBatch != wantDup || res.Entries != wantEntries {
			t.Fatalf("%s: %+v %v; want duplicate %v, %d entries", what, res, err, wantDup, wantEntries)
		}
	}
	send("first", false, 1)
	clk.Advance(sessionstore.BatchIDMemory - time.Second)
	send("resent within the memory", true, 1)
	clk.Advance(time.Second)
	send("resent after the memory", false, 2)
}

// TestSummaryFolders: each SDK folds its own summary into a folder of its
// own, with its own version, compare-and-swap and coverage: a session
// appended by two SDKs in turn keeps both summaries, through a power loss,
// a compaction and a restart. A ninth named folder takes the place of the
// one stored longest ago; a folder name outside the rule is refused.
func TestSummaryFolders(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	k := fixedKey(1, "")
	fold := func(folder, data string, expected, covers uint64) *SummaryUpdate {
		return &SummaryUpdate{Folder: folder, Data: []byte(data), ExpectedVersion: expected, Covers: covers, CheckCoverage: true}
	}
	// Python, then Ruby, then Python again: each folds from the whole
	// transcript the first time (its coverage is its own) and then onto
	// its own version.
	steps := []struct {
		folder, data string
		expected     uint64
		covers       uint64
		line         string
		want         uint64
	}{
		{"claude-agent-sdk-python", `{"py":1}`, 0, 0, `{"type":"user","uuid":"p1"}`, 1},
		{"claude-agent-sdk-ruby", `{"rb":1}`, 0, 1, `{"type":"user","uuid":"r1"}`, 1},
		{"claude-agent-sdk-python", `{"py":2}`, 1, 2, `{"type":"user","uuid":"p2"}`, 2},
		{"", `{"plain":1}`, 0, 3, `{"type":"user","uuid":"x1"}`, 1},
	}
	for i, s := range steps {
		r, err := appendOpt(t, m, k, AppendOptions{Summary: fold(s.folder, s.data, s.expected, s.covers)}, s.line)
		if err != nil || r.SummaryVersion != s.want {
			t.Fatalf("step %d (%s): %+v, %v; want version %d", i, s.folder, r, err, s.want)
		}
	}
	// The Ruby summary is stale in versions of its own, not in Python's.
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: fold("claude-agent-sdk-ruby", `{"rb":9}`, 2, 4)}, `{"type":"user","uuid":"r9"}`); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("ruby summary folded from python's version: %v, want a conflict", err)
	}
	// And its coverage is the transcript's line count, as for any summary.
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: fold("claude-agent-sdk-ruby", `{"rb":9}`, 1, 2)}, `{"type":"user","uuid":"r9"}`); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("ruby summary covering 2 of 4 lines: %v, want a conflict", err)
	}
	want := func(m *Manager, what string) {
		t.Helper()
		for folder, data := range map[string]string{"claude-agent-sdk-python": `{"py":2}`, "claude-agent-sdk-ruby": `{"rb":1}`, "": `{"plain":1}`, "claude-agent-sdk-typescript": ""} {
			sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", folder)
			if err != nil {
				t.Fatalf("%s: ListSummaries(%q): %v", what, folder, err)
			}
			if data == "" {
				if len(sums) != 0 {
					t.Fatalf("%s: folder %q: %+v, want none", what, folder, sums)
				}
				continue
			}
			if len(sums) != 1 || string(sums[0].Data) != data || sums[0].Folder != folder || sums[0].Entries != 4 {
				t.Fatalf("%s: folder %q: %+v, want %s over 4 lines", what, folder, sums, data)
			}
		}
	}
	want(m, "live")
	abortManager(m)
	v := c.CrashClone(nil)
	m = newCrashManager(t, v, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	want(m, "after a power loss")
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	m = newCrashManager(t, v, nil)
	defer closeManager(t, m)
	want(m, "after a compaction and a restart")

	for _, bad := range []string{"has space", "a/b", strings.Repeat("x", 65), "é"} {
		if _, err := appendOpt(t, m, k, AppendOptions{Summary: fold(bad, `{}`, 0, 4)}, `{}`); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "summary folder") {
			t.Errorf("folder %q: %v, want an invalid argument naming the summary folder", bad, err)
		}
	}
	lines := uint64(4)
	for i := 0; i < sessionstore.MaxFolders; i++ {
		f := fmt.Sprintf("sdk-%d", i)
		if _, err := appendOpt(t, m, k, AppendOptions{Summary: fold(f, `{}`, 0, lines)}, fmt.Sprintf(`{"uuid":"f%d"}`, i)); err != nil {
			t.Fatalf("folder %s: %v", f, err)
		}
		lines++
	}
	for _, f := range []string{"claude-agent-sdk-python", "claude-agent-sdk-ruby"} {
		if sums, _ := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", f); len(sums) != 0 {
			t.Errorf("folder %s after %d newer folders: %+v, want it gone", f, sessionstore.MaxFolders, sums)
		}
	}
	if sums, _ := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", ""); len(sums) != 1 {
		t.Errorf("the empty folder after %d named ones: %+v, want it kept", sessionstore.MaxFolders, sums)
	}
}
