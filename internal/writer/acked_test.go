package writer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript/damage"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// chained is an entry of a conversation: uuid, parent, session, text.
func chained(k layout.Key, id, parent, text string) string {
	p := "null"
	if parent != "" {
		p = `"` + parent + `"`
	}
	return fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":%s,"sessionId":%q,"message":{"role":"user","content":%q}}`, id, p, k.SessionID, text)
}

// conversation appends n chained entries to k, in batches of per, each
// batch flushed (a compaction, a ledger record), and returns them with
// their uuids. Every fifth entry is a uuid-less title line instead.
func conversation(t *testing.T, m *Manager, k layout.Key, n, per int, prefix string, parent string) (lines, ids []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if i%5 == 4 {
			lines = append(lines, fmt.Sprintf(`{"type":"custom-title","customTitle":"%s title %d","sessionId":%q}`, prefix, i, k.SessionID))
			ids = append(ids, "")
		} else {
			id := uuid.NewString()
			lines = append(lines, chained(k, id, parent, fmt.Sprintf("%s %d", prefix, i)))
			ids = append(ids, id)
			parent = id
		}
		if (i+1)%per == 0 || i == n-1 {
			mustAppendTo(t, m, k, lines[len(lines)-((i)%per+1):]...)
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	return lines, ids
}

// lastUUID is the last non-empty id.
func lastUUID(ids []string) string {
	for i := len(ids) - 1; i >= 0; i-- {
		if ids[i] != "" {
			return ids[i]
		}
	}
	return ""
}

// rewrite replaces k's canonical file as a tool that loaded it and saves
// it back does: open("w") (truncate, write), no rename.
func (e *env) rewrite(k layout.Key, lines []string) {
	e.t.Helper()
	if err := os.WriteFile(e.lay.TranscriptPath(k), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// ackFinding returns the acknowledged_missing problem of k's check, and
// whether the check was clean.
func ackFinding(t *testing.T, m *Manager, k layout.Key) (*damage.Problem, bool) {
	t.Helper()
	res, err := m.Repairs().Check(bg, k)
	if err != nil {
		t.Fatal(err)
	}
	var found *damage.Problem
	for i, p := range res.Report.Problems {
		if p.Kind == damage.KindAcknowledgedMissing {
			if found != nil {
				t.Fatalf("two acknowledged_missing findings: %+v", res.Report.Problems)
			}
			found = &res.Report.Problems[i]
		}
	}
	return found, res.Report.Clean()
}

// uuidsOf lists the uuids of lines.
func uuidsOf(lines []string) []string {
	var out []string
	for _, l := range lines {
		if id, ok := rawjson.TopLevelString([]byte(l), "uuid"); ok {
			out = append(out, id)
		}
	}
	return out
}

// TestForeignTruncatingRewrite: a tool loads the transcript and saves its
// copy back with open("w"), shorter, with lines of its own. check must say
// which acknowledged entries are missing (exit 1: not clean), Status must
// list the transcript, repair must put them back in acknowledged order,
// each once, after the last acknowledged entry the file kept and before the
// tool's lines, and check is clean after. A uuid-less line the tool wrote
// back in another JSON spelling is not missing; one it dropped is.
func TestForeignTruncatingRewrite(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	acked, ids := conversation(t, m, k, 30, 7, "acked", "")
	const kept = 17
	// The tool's copy: the first 17 lines, one of them spelled its own
	// way, then two lines of its own chained to the last it kept.
	copyLines := append([]string(nil), acked[:kept]...)
	var v any
	json.Unmarshal([]byte(copyLines[14]), &v) // a custom-title line (i%5 == 4)
	pretty, _ := json.MarshalIndent(v, "", "")
	copyLines[14] = strings.ReplaceAll(string(pretty), "\n", " ")
	f1, f2 := uuid.NewString(), uuid.NewString()
	foreign := []string{chained(k, f1, lastUUID(ids[:kept]), "tool 1"), chained(k, f2, f1, "tool 2")}
	e.rewrite(k, append(copyLines, foreign...))

	p, clean := ackFinding(t, m, k)
	if p == nil || clean {
		t.Fatalf("check after a truncating rewrite: finding %v, clean %v; want acknowledged_missing, damaged", p, clean)
	}
	var wantIDs []string
	for i := kept; i < len(acked); i++ {
		if ids[i] != "" {
			wantIDs = append(wantIDs, ids[i])
		} else {
			wantIDs = append(wantIDs, ledger.IDOf(ledger.Pos{}, "", []byte(acked[i])).String())
		}
	}
	if !slices.Equal(p.IDs, wantIDs) {
		t.Fatalf("the finding names %v, want the %d dropped entries in acknowledged order %v", p.IDs, len(wantIDs), wantIDs)
	}
	if !strings.Contains(p.Message, fmt.Sprintf("%d entries", len(wantIDs))) || !strings.Contains(p.Message, "repair puts them back") {
		t.Fatalf("the finding's message: %s", p.Message)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Key != k || ms[0].Count != len(wantIDs) {
		t.Fatalf("Stats().Missing = %+v, want %s with %d", ms, k, len(wantIDs))
	}

	out, err := m.Repairs().Repair(bg, k, false)
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	for _, a := range out.Result.Actions {
		if a.Kind == damage.ActionRestore {
			restored++
		}
	}
	if restored != len(wantIDs) || out.Backup == "" {
		t.Fatalf("repair restored %d (backup %q), want %d: %+v", restored, out.Backup, len(wantIDs), out.Result.Actions)
	}
	want := append(append(append([]string(nil), copyLines...), acked[kept:]...), foreign...)
	if got := e.canonicalLines(k); !slices.Equal(got, want) {
		t.Fatalf("after repair the file is\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p, clean := ackFinding(t, m, k); p != nil || !clean {
		t.Fatalf("check after repair: %v, clean %v", p, clean)
	}
	if ms := m.Stats().Missing; len(ms) != 0 {
		t.Fatalf("Stats().Missing after repair: %+v", ms)
	}
	// Again: nothing to do, nothing doubled.
	if out, err := m.Repairs().Repair(bg, k, false); err != nil || out.Result.Changed {
		t.Fatalf("second repair: %v, changed %v", err, out.Result.Changed)
	}
}

// TestForeignRewriteKeepsPending: a rewrite while entries are still only
// in the journal loses none of them (they follow the rewritten content), and
// the compacted ones it dropped are reported, then put back in order.
func TestForeignRewriteKeepsPending(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	a, aIDs := conversation(t, m, k, 6, 6, "a", "")
	var b []string
	parent := lastUUID(aIDs)
	for i := 0; i < 3; i++ {
		id := uuid.NewString()
		b = append(b, chained(k, id, parent, fmt.Sprintf("b %d", i)))
		parent = id
	}
	mustAppendTo(t, m, k, b...) // pending
	e.rewrite(k, a[:2])
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if got, want := e.canonicalLines(k), append(append([]string(nil), a[:2]...), b...); !slices.Equal(got, want) {
		t.Fatalf("after the rewrite and a flush:\n%s\nwant the pending entries kept after the rewritten content:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Found by the compaction itself, before any check.
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 4 {
		t.Fatalf("Stats().Missing after the compaction = %+v, want 4 of %s", ms, k)
	}
	if _, err := m.Repairs().Repair(bg, k, false); err != nil {
		t.Fatal(err)
	}
	if got, want := e.canonicalLines(k), append(append([]string(nil), a...), b...); !slices.Equal(got, want) {
		t.Fatalf("after repair:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAcknowledgedMissingFoundAtOpen: a rewrite while no writer runs is
// found when one opens the session, and the finding survives a restart
// (Status lists it at once) until repair.
func TestAcknowledgedMissingFoundAtOpen(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	acked, _ := conversation(t, m, k, 8, 4, "x", "")
	closeManager(t, m)
	e.rewrite(k, acked[:3])

	m = e.manager()
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 0 {
		t.Fatalf("found before anything opened the session: %+v", ms)
	}
	if err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 5 || ms[0].Key != k {
		t.Fatalf("Stats().Missing after a read opened the session = %+v, want 5 of %s", ms, k)
	}
	closeManager(t, m)

	m = e.manager()
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 5 {
		t.Fatalf("after a restart Stats().Missing = %+v, want the finding kept", ms)
	}
	if _, err := m.Repairs().Repair(bg, k, false); err != nil {
		t.Fatal(err)
	}
	if got := e.canonicalLines(k); !slices.Equal(got, acked) {
		t.Fatalf("after repair:\n%s", strings.Join(got, "\n"))
	}
	closeManager(t, m)
	m = e.manager()
	defer closeManager(t, m)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 0 {
		t.Fatalf("after repair and a restart Stats().Missing = %+v", ms)
	}
}

// TestAcknowledgedMissingAfterRetention: once the journal no longer holds
// the bytes (past the retention), check still names the missing entries
// from the ledger and says repair cannot bring them back; repair leaves
// the finding standing.
func TestAcknowledgedMissingAfterRetention(t *testing.T) {
	e := newEnv(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	e.cfg.Clock = clk
	e.cfg.JournalRetention = time.Hour
	e.cfg.JournalSegmentSize = 4096
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	acked, _ := conversation(t, m, k, 10, 5, strings.Repeat("p", 600), "")
	if st := m.Stats(); st.RetainedSegments == 0 {
		t.Fatalf("nothing retained: %+v", st)
	}
	// Time passes; another session's appends roll the journal on and expire
	// what is retained.
	clk.Advance(2 * time.Hour)
	other := newKey()
	for i := 0; i < 20; i++ {
		mustAppendTo(t, m, other, line(other, uuid.NewString(), strings.Repeat("o", 600)))
		if i%5 == 4 {
			if _, err := m.Flush(bg, other); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.rewrite(k, acked[:2])
	p, clean := ackFinding(t, m, k)
	if p == nil || clean || len(p.IDs) != 8 || !strings.Contains(p.Message, "cannot bring them back") {
		t.Fatalf("check past the retention: %+v, clean %v; want 8 missing that repair cannot bring back", p, clean)
	}
	if _, err := m.Repairs().Repair(bg, k, false); err != nil {
		t.Fatal(err)
	}
	if p, _ := ackFinding(t, m, k); p == nil || len(p.IDs) != 8 {
		t.Fatalf("after repair the finding is %+v, want it standing", p)
	}
	if ms := m.Stats().Missing; len(ms) != 1 {
		t.Fatalf("Stats().Missing = %+v", ms)
	}
}

// TestLedgerCountsEachEntryOnce: the ledger knows an entry by where it was
// logged, so an entry recorded twice (a compaction that crashed between
// its ledger record and its marker is done again) counts once, and two
// identical uuid-less entries count twice.
func TestLedgerCountsEachEntryOnce(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	tag := `{"type":"tag","tag":"same"}`
	mustAppendTo(t, m, k, tag, tag)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Read(e.fs, e.lay, k)
	if err != nil || led == nil || len(led.IDs) != 2 {
		t.Fatalf("ledger: %+v, %v", led, err)
	}
	// The same record again, as a redone compaction writes it.
	if err := m.do(bg, k, func(s *session.State) error { return s.Book().Append(s.Canon(), 0, led.IDs) }); err != nil {
		t.Fatal(err)
	}
	if led, _ := ledger.Read(e.fs, e.lay, k); len(led.IDs) != 2 || led.Records != 2 {
		t.Fatalf("after a repeated record: %d entries in %d records, want 2 in 2", len(led.IDs), led.Records)
	}
	e.rewrite(k, []string{tag})
	if p, _ := ackFinding(t, m, k); p == nil || len(p.IDs) != 1 {
		t.Fatalf("one of two identical acknowledged lines dropped: finding %+v, want 1 missing", p)
	}
	if _, err := m.Repairs().Repair(bg, k, false); err != nil {
		t.Fatal(err)
	}
	if got := e.canonicalLines(k); !slices.Equal(got, []string{tag, tag}) {
		t.Fatalf("after repair: %q", got)
	}
}

// TestLedgerTornTail: a ledger record cut short (a crash while it was
// written, never synced whole) is ignored and written over.
func TestLedgerTornTail(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	acked, _ := conversation(t, m, k, 4, 4, "t", "")
	closeManager(t, m)
	path := e.lay.AckedPath(k)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	torn := frameTorn(t, k)
	if err := os.WriteFile(path, append(append([]byte(nil), whole...), torn...), 0o600); err != nil {
		t.Fatal(err)
	}
	m = e.manager()
	defer closeManager(t, m)
	more, _ := conversation(t, m, k, 2, 2, "u", "")
	led, err := ledger.Read(e.fs, e.lay, k)
	if err != nil || len(led.IDs) != 6 {
		t.Fatalf("after a torn tail and a new record: %d entries, %v; want 6", len(led.IDs), err)
	}
	e.rewrite(k, acked)
	if p, _ := ackFinding(t, m, k); p == nil || len(p.IDs) != 2 || !slices.Equal(p.IDs[:1], uuidsOf(more[:1])) {
		t.Fatalf("finding %+v, want the 2 entries of the record written after the torn one", p)
	}
}

// frameTorn is the first half of a valid ledger record of k.
func frameTorn(t *testing.T, k layout.Key) []byte {
	t.Helper()
	dir := t.TempDir()
	L := layout.Layout{Root: dir, StateDir: dir}
	b := ledger.NewStore(ledger.Config{FS: fsys.OS, Layout: L, Clock: clock.Real, Logger: zap.NewNop()}).Book(k, zap.NewNop(), nil)
	if err := b.Append(ledger.Fingerprint{Size: 1}, 0, []ledger.ID{ledger.IDOf(ledger.Pos{Seg: 99, Off: 64}, uuid.NewString(), nil)}); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(L.AckedPath(k))
	if err != nil {
		t.Fatal(err)
	}
	return rec[:len(rec)/2]
}

// afterRenameOnto returns hooks that run fn once, right after a rename
// onto target.
func afterRenameOnto(target string, fn func()) fstest.Hooks {
	var once sync.Once
	return fstest.Hooks{After: func(c fstest.Call, err error) {
		if err == nil && c.Name == "rename" && c.NewPath == target {
			once.Do(fn)
		}
	}}
}

// agentAppend appends line to path as an agent does: open, write, close.
func agentAppend(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// An agent's line written to the old file during a compaction's rename is
// rescued into the journal; it must reach the file before the agent's next
// line, written to the new file a moment later, or the agent's lines come
// out of order. And a line the agent writes to the old file after the
// rescue (opened before the rename, written after: an agent descheduled in
// between) must not be lost. e2e's TestForeignAppendRace meets both under
// load.
func TestForeignLinesDuringRenameKeepTheirOrder(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "written during the rename", true: "written after the rescue"}[late], func(t *testing.T) {
			e := newEnv(t)
			k := newKey()
			path := e.lay.TranscriptPath(k)
			hook := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
			e.fs = hook
			m := e.manager()
			defer closeManager(t, m)
			mine1, mine2 := chained(k, uuid.NewString(), "", "mine 1"), chained(k, uuid.NewString(), "", "mine 2")
			a, b := chained(k, uuid.NewString(), "", "agent A"), chained(k, uuid.NewString(), "", "agent B")
			mustAppendTo(t, m, k, mine1)
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			mustAppendTo(t, m, k, mine2)
			// The agent opens the transcript before the compaction's rename.
			old, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			agentLines := func() {
				if _, err := old.WriteString(a + "\n"); err != nil {
					t.Fatal(err)
				}
				agentAppend(t, path, b) // opened after the rename: the new file
			}
			if !late {
				hook.SetHooks(afterRenameOnto(path, agentLines))
			}
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			if late {
				agentLines()
			}
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			want := []string{mine1, mine2, a, b}
			if got := e.canonicalLines(k); !slices.Equal(got, want) {
				t.Fatalf("the file holds\n%s\nwant the agent's lines kept, in their order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Rescued lines are the agent's, never acknowledged by
			// sessiond: not in the ledger.
			led, err := ledger.Read(e.fs, e.lay, k)
			if err != nil || len(led.IDs) != 2 {
				t.Fatalf("ledger holds %d entries (%v), want sessiond's 2", len(led.IDs), err)
			}
		})
	}
}

// faultEnv is an env whose Manager works through a FaultFS over the real
// filesystem.
func faultEnv(t *testing.T) (*env, *fstest.FaultFS) {
	e := newEnv(t)
	ff := fstest.NewFaultFS(fsys.OS)
	e.fs = ff
	return e, ff
}

// A writer opening a transcript another program rewrote compares it with
// the session's ledger: with the ledger unreadable the open fails (an
// open that went on would say nothing of the entries the rewrite lost),
// and the retry finds them.
func TestLedgerUnreadableAtOpen(t *testing.T) {
	e, ff := faultEnv(t)
	m := e.manager()
	k := newKey()
	acked, _ := conversation(t, m, k, 8, 4, "x", "")
	closeManager(t, m)
	e.rewrite(k, acked[:3])
	m = e.manager()
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(e.lay.AckedPath(k)), Err: syscall.EMFILE, Sticky: true})
	err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil })
	wantUnreadable(t, "open with the ledger unreadable", err, syscall.EMFILE)
	ff.Clear()
	if err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 5 {
		t.Fatalf("Stats().Missing once the ledger reads again = %+v, want 5 of %s", ms, k)
	}
}

// A compaction that finds the transcript rewritten by another program and
// cannot read the ledger to compare must fail, and its retry compare first:
// going on would make its ledger record name the rewritten file as holding
// every acknowledged entry, and neither the retry nor the next open would
// compare again, so the lost entries would never be reported.
func TestLedgerUnreadableAfterRewrite(t *testing.T) {
	e, ff := faultEnv(t)
	m := e.manager()
	k := newKey()
	a, _ := conversation(t, m, k, 6, 6, "a", "")
	mustAppendTo(t, m, k, line(k, uuid.NewString(), "pending")) // the next compaction has work
	e.rewrite(k, a[:2])
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(e.lay.AckedPath(k)), Err: syscall.EMFILE})
	_, err := m.Flush(bg, k)
	wantUnreadable(t, "compaction with the ledger unreadable", err, syscall.EMFILE)
	ff.Clear()
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 4 {
		t.Fatalf("Stats().Missing after the retried compaction = %+v, want 4 of %s", ms, k)
	}
	closeManager(t, m)
	os.RemoveAll(e.lay.MissingDir()) // only the ledger can say it now
	m = e.manager()
	defer closeManager(t, m)
	if err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 4 {
		t.Fatalf("Stats().Missing after a restart = %+v, want the 4 found again", ms)
	}
}

// The notes of missing entries are read at start: one that cannot be read
// is a recovery failure status shows, not a transcript said to be whole.
func TestMissingNoteUnreadableAtStart(t *testing.T) {
	e, ff := faultEnv(t)
	m := e.manager()
	k := newKey()
	acked, _ := conversation(t, m, k, 8, 4, "x", "")
	closeManager(t, m)
	e.rewrite(k, acked[:3])
	m = e.manager()
	if err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)

	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(e.lay.MissingPath(k)), Err: syscall.EMFILE, Sticky: true})
	m = e.manager()
	rep, err := m.Recover(bg)
	if err != nil || len(rep.Failed) != 1 {
		t.Fatalf("Recover with the note unreadable: %v %v; want one failure", err, rep.Failed)
	}
	wantUnreadable(t, "the note's read", rep.Failed[0], syscall.EMFILE)
	if re := m.Stats().RecoveryErrors; len(re) != 1 || !strings.Contains(re[0], "missing") {
		t.Fatalf("status says %q, want the note's failure", re)
	}
	closeManager(t, m)
	ff.Clear()
	m = e.manager()
	defer closeManager(t, m)
	if rep, err := m.Recover(bg); err != nil || len(rep.Failed) != 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	if ms := m.Stats().Missing; len(ms) != 1 || ms[0].Count != 5 {
		t.Fatalf("Stats().Missing after a start that read the note = %+v", ms)
	}
}

// A ledger damaged in the middle (a record that does not validate, with a
// whole one written after it) is read up to the damage, as a torn tail
// is; but the compaction that cuts what follows keeps a copy of the whole
// ledger first: the records after the damage are acknowledged entries.
func TestLedgerDamagedKeptBeforeCut(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	path := e.lay.AckedPath(k)
	var ends []int64
	parent := ""
	for i := 0; i < 3; i++ {
		_, ids := conversation(t, m, k, 2, 2, fmt.Sprint("r", i), parent)
		parent = lastUUID(ids)
		led, err := ledger.Read(e.fs, e.lay, k)
		if err != nil || led == nil {
			t.Fatalf("ledger after record %d: %v", i, err)
		}
		ends = append(ends, led.End)
	}
	closeManager(t, m)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[(ends[0]+ends[1])/2] ^= 0xff // inside the second record
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if led, err := ledger.Read(e.fs, e.lay, k); err != nil || led.End != ends[0] || led.Damaged == nil {
		t.Fatalf("damaged ledger read as %+v, %v; want it whole up to %d, and damaged", led, err, ends[0])
	}
	m = e.manager()
	defer closeManager(t, m)
	conversation(t, m, k, 2, 2, "after", parent)
	dir := filepath.Join(e.lay.StateDir, session.DamagedDir, k.ProjectKey, k.SessionID)
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("copies kept in %s: %v %v; want the damaged ledger's", dir, ents, err)
	}
	if kept, _ := os.ReadFile(filepath.Join(dir, ents[0].Name())); !bytes.Equal(kept, b) {
		t.Fatalf("the copy holds %d bytes, not the damaged ledger's %d", len(kept), len(b))
	}
	if led, err := ledger.Read(e.fs, e.lay, k); err != nil || led.Damaged != nil || led.Records != 2 {
		t.Fatalf("ledger after the cut: %+v, %v; want the first record and the new one", led, err)
	}
}

// Status lists a finding while its transcript exists: one whose Lstat
// fails (for another reason than its absence) still lacks the entries.
func TestMissingListedWhileTranscriptUnreadable(t *testing.T) {
	e, ff := faultEnv(t)
	m := e.manager()
	k := newKey()
	acked, _ := conversation(t, m, k, 8, 4, "x", "")
	closeManager(t, m)
	e.rewrite(k, acked[:3])
	m = e.manager()
	defer closeManager(t, m)
	if err := m.Read(bg, k, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ff.Inject(fstest.Fault{Op: fstest.OpStat, Path: onPath(e.lay.TranscriptPath(k)), Err: syscall.EIO, Sticky: true})
	if ms := m.ledger.Missing(); len(ms) != 1 || ms[0].Count != 5 {
		t.Fatalf("Missing with the transcript's Lstat failing = %+v, want 5 of %s", ms, k)
	}
}
