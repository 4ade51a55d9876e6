package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestJournalReplayAfterAbort: entries acknowledged but never compacted
// (the process died) are replayed at the next start, exactly once.
func TestJournalReplayAfterAbort(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	ctx := context.Background()
	if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), entry("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), entry("", "n", "2")}); err != nil {
		t.Fatal(err)
	}
	crash(t, m)
	if n := len(e.canonicalLines(k)); n != 2 {
		t.Fatalf("canonical has %d lines before recovery, want 2", n)
	}
	m = e.manager()
	rep, err := m.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 1 || rep.Entries != 2 {
		t.Fatalf("recover report %+v", rep)
	}
	if n := len(e.canonicalLines(k)); n != 4 {
		t.Fatalf("after recovery %d lines, want 4", n)
	}
	// A second recovery finds nothing to do and duplicates nothing.
	closeManager(t, m)
	m = e.manager()
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	if n := len(e.canonicalLines(k)); n != 4 {
		t.Fatalf("after second recovery %d lines, want 4", n)
	}
}

// TestCheckJournalsServesBeforeReplay: after CheckJournals alone (what
// sessiond does before it serves) every acknowledged entry is read back
// from the journals and listed, with the canonical files not yet written;
// Replay then moves them there, counting ReplayPending down. Damage in
// the journal is refused at start; accepted, it is reported by CheckJournals,
// the damaged batch is lost and the same session's later batches are
// replayed.
func TestCheckJournalsServesBeforeReplay(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	ctx := context.Background()
	keys := []layout.Key{newKey(), newKey(), newKey(), newKey()}
	want := map[layout.Key][]string{}
	for i, k := range keys {
		for b := 0; b <= i; b++ {
			lines := [][]byte{entry(uuid.NewString(), "n", fmt.Sprint(b)), entry(uuid.NewString())}
			if _, err := m.Append(ctx, k, lines); err != nil {
				t.Fatal(err)
			}
			for _, l := range lines {
				want[k] = append(want[k], string(l))
			}
		}
	}
	// Damage the first batch of the last session in the shared log: the
	// writes after it are intact, so this is corruption, not a torn tail.
	bad := keys[3]
	ep, ok := m.logs.Log().Epoch(bad)
	if !ok {
		t.Fatal("no stream for the last session")
	}
	first := ep.Batches[0].Entries[0]
	crash(t, m)
	jp := filepath.Join(e.lay.JournalDir(), fmt.Sprintf("%016x.wal", first.Seg))
	data, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	data[first.Off+30] ^= 0x55
	if err := os.WriteFile(jp, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// The damage lost acknowledged entries: the start is refused, unless
	// told to accept the loss.
	if _, err := New(e.cfg); !errors.Is(err, journal.ErrLost) {
		t.Fatalf("New over a damaged log: %v, want journal.ErrLost", err)
	}
	e.cfg.AcceptJournalLoss = true
	m = e.manager()
	defer closeManager(t, m)
	rep, todo, err := m.CheckJournals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Reported twice (the damage, and the loss it caused); the damaged
	// session's batches after the damage are still read, so all four are
	// replayed.
	if rep.Checked != 4 || len(todo) != 4 || len(rep.Failed) != 2 || !errors.Is(rep.Failed[0], errdefs.ErrCorrupt) || !errors.Is(rep.Failed[1], errdefs.ErrCorrupt) {
		t.Fatalf("check: %+v, %d to replay", rep, len(todo))
	}
	if st := m.Stats(); st.ReplayPending != 4 || len(st.RecoveryErrors) != 2 || st.RecoveredSessions != 0 {
		t.Fatalf("stats after the check: %+v", st)
	}
	want[bad] = want[bad][2:] // the damaged first batch is lost
	for _, k := range keys[:3] {
		if _, err := os.Stat(e.lay.TranscriptPath(k)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: transcript written before the replay (%v)", k, err)
		}
		var got []string
		err := m.Read(ctx, k, ReadOptions{}, func(es []Entry) error {
			for _, x := range es {
				got = append(got, string(x.Data))
			}
			return nil
		})
		if err != nil || strings.Join(got, "\n") != strings.Join(want[k], "\n") {
			t.Fatalf("%s read before the replay: %d entries (%v), want %d", k, len(got), err, len(want[k]))
		}
		info, err := catalogOf(m).Info(ctx, k)
		if err != nil || info.Entries != uint64(len(want[k])) {
			t.Fatalf("%s listed before the replay: %+v, %v", k, info, err)
		}
	}
	// An agent writes to a session before its turn in the replay: the new
	// entry follows the journaled ones.
	late := entry(uuid.NewString(), "n", "late")
	if _, err := m.Append(ctx, keys[1], [][]byte{late}); err != nil {
		t.Fatal(err)
	}
	want[keys[1]] = append(want[keys[1]], string(late))
	r := m.Replay(ctx, todo)
	if r.Sessions != 4 || len(r.Failed) != 0 {
		t.Fatalf("replay: %+v", r)
	}
	// The writers the reads and the append opened retired with their
	// turn: nobody else was using them.
	if st := m.Stats(); st.ReplayPending != 0 || st.RecoveredSessions != 4 || st.ActiveSessions != 0 {
		t.Fatalf("stats after the replay: %+v", st)
	}
	for _, k := range keys {
		if got := e.canonicalLines(k); strings.Join(got, "\n") != strings.Join(want[k], "\n") {
			t.Fatalf("%s after the replay: %d lines, want %d", k, len(got), len(want[k]))
		}
	}
}

// Recover sweeps temps wherever sessiond writes them, not only the
// compaction temps at the top of each project folder: an archive mark's and
// a pulled title file's (in the session folder, where listings look), a
// subagent's compaction temp (in subagents/), a kept repair copy's temp and
// an intent's temp would otherwise stay for good.
func TestRecoverSweepsTempsInSessionFolders(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(1, "")
	sess := crashLayout.SessionDir(k)
	temps := []string{
		path.Join(sess, ".archived.json.tmp-abcd1234"),
		path.Join(sess, ".custom-title.json.tmp-abcd1234"),
		path.Join(sess, "subagents", ".agent-a.compact-12345678.tmp"),
		path.Join(crashLayout.StateDir, "repairs", k.ProjectKey, k.SessionID, ".20260101T000000.000000000Z.jsonl.tmp"),
		path.Join(crashLayout.StateDir, "intents", ".6a4c8e2a-0000-4000-8000-000000000000.json.tmp"),
	}
	keep := []string{crashLayout.TranscriptPath(k), path.Join(sess, "archived.json"), path.Join(sess, "custom-title.json"), path.Join(sess, "subagents", "agent-a.jsonl")}
	for _, p := range append(slices.Clone(temps), keep...) {
		c.WriteFile(p, []byte(`{"type":"user"}`+"\n"), 0o600)
	}
	m := newCrashManager(t, c, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	for _, p := range temps {
		if _, err := c.Stat(p); err == nil {
			t.Errorf("temp file still there after Recover: %s", p)
		}
	}
	for _, p := range keep {
		if _, err := c.Stat(p); err != nil {
			t.Errorf("Recover removed %s: %v", p, err)
		}
	}
}

// A process killed between a compaction's rename and its folder sync leaves
// the new canonical file in the page cache only. Recovery, finding the
// compaction marker matching, replaces the journal (the only durable copy
// of the entries) with a new generation, so it must first sync the file and
// its folder: a power loss would otherwise take the rename back and the
// entries with it.
func TestRecoverMakesCompactionRenameDurable(t *testing.T) {
	c := fstest.NewCrashFS()
	k := fixedKey(3, "")
	entry := line(k, "00000000-0000-4000-8000-000000000001", "acked")
	work := func(c *fstest.CrashFS) {
		m := newCrashManager(t, c, nil)
		if _, err := m.Append(bg, k, [][]byte{[]byte(entry)}); err == nil {
			m.Flush(bg, k)
		}
		abortManager(m)
	}
	at := opIndex(t, c, work, func(ev fstest.Event) bool {
		return ev.Op == fstest.OpRename && ev.Path == crashLayout.TranscriptPath(k)
	})
	c.CrashAt(at + 1) // renamed, folder not synced
	work(c)
	killed := c.KillClone()
	m := newCrashManager(t, killed, nil)
	if _, err := m.Recover(bg); err != nil {
		t.Fatal(err)
	}
	abortManager(m)
	if got := recoverAndRead(t, killed.CrashClone(nil), k); !strings.Contains(got, entry) {
		t.Fatalf("power loss after recovery lost the acknowledged entry; file: %q", got)
	}
}

// TestJournalWithoutItsRecordIsReported: a journal whose acknowledgement
// record is gone or unreadable cannot be checked for losses; the start
// goes on, serves every entry, and says so where a person looks (the
// check's failures, Stats.RecoveryErrors, which status and check --all
// show), naming the record. The next start, with a new record, is clean.
func TestJournalWithoutItsRecordIsReported(t *testing.T) {
	for _, damage := range []string{"removed", "zeroed"} {
		t.Run(damage, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			ctx := context.Background()
			k := newKey()
			if _, err := m.Append(ctx, k, [][]byte{entry(uuid.NewString()), entry(uuid.NewString())}); err != nil {
				t.Fatal(err)
			}
			closeManager(t, m)
			rec := filepath.Join(e.lay.JournalDir(), journal.AckFile)
			if damage == "removed" {
				if err := os.Remove(rec); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(rec, make([]byte, 128<<10), 0o600); err != nil {
				t.Fatal(err)
			}
			m = e.manager()
			rep, todo, err := m.CheckJournals(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Failed) != 1 || !errors.Is(rep.Failed[0], errdefs.ErrCorrupt) || !strings.Contains(rep.Failed[0].Error(), rec) {
				t.Fatalf("check: %v, want the record named once", rep.Failed)
			}
			if st := m.Stats(); len(st.RecoveryErrors) != 1 || !strings.Contains(st.RecoveryErrors[0], "cannot be told") {
				t.Fatalf("stats: %q", st.RecoveryErrors)
			}
			if r := m.Replay(ctx, todo); len(r.Failed) != 0 {
				t.Fatalf("replay: %+v", r)
			}
			closeManager(t, m)
			if n := len(e.canonicalLines(k)); n != 2 {
				t.Fatalf("%d lines, want 2", n)
			}
			m = e.manager()
			defer closeManager(t, m)
			if rep, _, err := m.CheckJournals(ctx); err != nil || len(rep.Failed) != 0 {
				t.Fatalf("the next start: %v %v", rep.Failed, err)
			}
		})
	}
}
