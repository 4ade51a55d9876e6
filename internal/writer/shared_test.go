package writer

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sessionstore"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// cliTurn is what the Claude Code CLI writes of one turn into its
// transcript, as measured: chained entries, lines without uuid (some
// identical from turn to turn), and api-request lines it never mirrors.
type cliTurn struct {
	lines    []string // in the order the CLI writes them
	mirrored []string // what the SDK mirrors of them, in order
}

func newCLITurn(k layout.Key, n int, parent string) (cliTurn, string) {
	u1, u2 := uuid.NewString(), uuid.NewString()
	user := chained(k, u1, parent, fmt.Sprintf("prompt %d", n))
	asst := strings.Replace(chained(k, u2, u1, fmt.Sprintf("answer %d", n)), `"type":"user"`, `"type":"assistant"`, 1)
	queue := fmt.Sprintf(`{"type":"queue-operation","operation":"dequeue","timestamp":"2026-01-01T00:00:0%dZ","sessionId":%q}`, n, k.SessionID)
	latch := fmt.Sprintf(`{"type":"atis-latch","sessionId":%q}`, k.SessionID)
	api := fmt.Sprintf(`{"type":"api-request","requestId":"req_%d","sessionId":%q}`, n, k.SessionID)
	last := fmt.Sprintf(`{"type":"last-prompt","lastPrompt":"prompt %d","sessionId":%q}`, n, k.SessionID)
	t := cliTurn{
		lines:    []string{queue, latch, user, api, asst, latch, last},
		mirrored: []string{queue, latch, user, asst, latch, last},
	}
	return t, u2
}

// cliWrite appends lines to k's transcript as the CLI does (open with
// O_APPEND, write, close; no sync).
func (e *env) cliWrite(k layout.Key, data string) {
	e.t.Helper()
	p := e.lay.TranscriptPath(k)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		e.t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		e.t.Fatal(err)
	}
}

func joinLines(lines []string) string { return strings.Join(lines, "\n") + "\n" }

// mirror appends lines to k as the SDK's SessionStore does for an agent
// whose config dir is sessiond's root, and checks that each was answered
// as a duplicate.
func mirror(t *testing.T, m *Manager, k layout.Key, opt sessionstore.AppendOptions, lines ...string) *AppendResult {
	t.Helper()
	opt.SharedFile = true
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	res, err := m.AppendBatch(bg, k, raw, opt)
	if err != nil {
		t.Fatalf("mirrored append to %s: %v", k, err)
	}
	for i, r := range res.Results {
		if r.Outcome != Duplicate {
			t.Fatalf("mirrored entry %d (%s) was stored again; the CLI's copy is in the file already", i, lines[i])
		}
	}
	return res
}

// readServed is every line Read serves of k.
func readServed(t *testing.T, m *Manager, k layout.Key) []string {
	t.Helper()
	var got []string
	err := m.Read(bg, k, ReadOptions{}, func(es []Entry) error {
		for _, e := range es {
			got = append(got, string(e.Data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantOnce checks that the transcript, on disk and as Read serves it,
// is exactly want.
func (e *env) wantOnce(m *Manager, k layout.Key, want []string) {
	e.t.Helper()
	if got := readServed(e.t, m, k); !slices.Equal(got, want) {
		e.t.Fatalf("Read serves\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := m.Flush(bg, k); err != nil {
		e.t.Fatal(err)
	}
	if got := e.canonicalLines(k); !slices.Equal(got, want) {
		e.t.Fatalf("the transcript holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSharedFileMirroredLinesOnce(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	var want []string
	parent := ""
	for n := 1; n <= 3; n++ {
		turn, leaf := newCLITurn(k, n, parent)
		parent = leaf
		e.cliWrite(k, joinLines(turn.lines))
		want = append(want, turn.lines...)
		res := mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored...)
		if res.Entries != uint64(len(want)) || res.Absorbed != uint64(len(turn.lines)) {
			t.Fatalf("turn %d: entries %d, absorbed %d; want %d and %d", n, res.Entries, res.Absorbed, len(want), len(turn.lines))
		}
		e.wantOnce(m, k, want)
	}
}

// TestSharedFileCompactionBeforeMirror: a compaction (sessiond's own
// entries pending) takes in the CLI's lines before their mirrored copies
// arrive: they are answered as duplicates still.
func TestSharedFileCompactionBeforeMirror(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	turn1, leaf := newCLITurn(k, 1, "")
	e.cliWrite(k, joinLines(turn1.lines))
	mirror(t, m, k, sessionstore.AppendOptions{}, turn1.mirrored...)
	title := fmt.Sprintf(`{"type":"custom-title","customTitle":"mine","sessionId":%q}`, k.SessionID)
	mustAppendTo(t, m, k, title) // pending, so the next compaction absorbs
	turn2, _ := newCLITurn(k, 2, leaf)
	e.cliWrite(k, joinLines(turn2.lines))
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	mirror(t, m, k, sessionstore.AppendOptions{}, turn2.mirrored...)
	want := slices.Concat(turn1.lines, turn2.lines, []string{title})
	e.wantOnce(m, k, want)
}

// TestSharedFileHalfWrittenLine: the CLI's last line is cut in half when
// the append of the lines before it arrives; its rest comes later, then
// its mirrored copy. The writer is open already (the half line is left for
// later), or opens on that append (it finds the half line as it reads the
// file).
func TestSharedFileHalfWrittenLine(t *testing.T) {
	for _, opened := range []bool{true, false} {
		t.Run(fmt.Sprintf("opened=%v", opened), func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			defer closeManager(t, m)
			k := newKey()
			var want []string
			parent := ""
			if opened {
				turn, leaf := newCLITurn(k, 1, "")
				e.cliWrite(k, joinLines(turn.lines))
				mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored...)
				want, parent = turn.lines, leaf
			}
			turn, _ := newCLITurn(k, 2, parent)
			last := turn.lines[len(turn.lines)-1]
			before := turn.lines[:len(turn.lines)-1]
			cut := len(last) / 2
			e.cliWrite(k, joinLines(before)+last[:cut])
			mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored[:len(turn.mirrored)-1]...)
			if got := readServed(t, m, k); opened && !slices.Equal(got, append(slices.Clone(want), before...)) {
				t.Fatalf("with the CLI's last line half written, Read serves\n%s\nwant the whole lines before it", strings.Join(got, "\n"))
			}
			e.cliWrite(k, last[cut:]+"\n")
			mirror(t, m, k, sessionstore.AppendOptions{}, last)
			e.wantOnce(m, k, append(want, turn.lines...))
		})
	}
}

// TestSharedFileIdenticalLinesWithoutUUID: the CLI writes the same line
// without uuid twice; each mirrored copy matches one, and a third copy
// the CLI did not write is stored.
func TestSharedFileIdenticalLinesWithoutUUID(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	latch := fmt.Sprintf(`{"type":"atis-latch","sessionId":%q}`, k.SessionID)
	e.cliWrite(k, joinLines([]string{latch, latch}))
	mirror(t, m, k, sessionstore.AppendOptions{}, latch)
	mirror(t, m, k, sessionstore.AppendOptions{}, latch)
	e.cliWrite(k, joinLines([]string{latch}))
	mirror(t, m, k, sessionstore.AppendOptions{}, latch)
	e.wantOnce(m, k, []string{latch, latch, latch})
	res, err := m.AppendBatch(bg, k, [][]byte{[]byte(latch)}, sessionstore.AppendOptions{SharedFile: true})
	if err != nil || res.Results[0].Outcome != Stored {
		t.Fatalf("a fourth copy the CLI never wrote: %+v %v; want it stored", res, err)
	}
	e.wantOnce(m, k, []string{latch, latch, latch, latch})
}

// TestSharedFileStoreAppendOfOldLineStored: a title appended through the
// store (the SDK's renameSession, not a mirrored line), identical to one
// the CLI wrote earlier, is a new line and is stored.
func TestSharedFileStoreAppendOfOldLineStored(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	title := fmt.Sprintf(`{"type":"custom-title","customTitle":"again","sessionId":%q}`, k.SessionID)
	turn, _ := newCLITurn(k, 1, "")
	lines := append(slices.Clone(turn.lines), title)
	e.cliWrite(k, joinLines(lines))
	// The mirror of the turn, without the title: it stays unmatched.
	mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored...)
	res, err := m.AppendBatch(bg, k, [][]byte{[]byte(title)}, sessionstore.AppendOptions{})
	if err != nil || res.Results[0].Outcome != Stored {
		t.Fatalf("a title appended through the store, as an older line: %+v %v; want it stored", res, err)
	}
	e.wantOnce(m, k, append(lines, title))
}

// TestSharedFileAcrossRestart: the writer retires (sessiond restarts, or
// was killed) between the CLI's lines and their mirrored copies.
func TestSharedFileAcrossRestart(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("kill=%v", kill), func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			k := newKey()
			turn1, leaf := newCLITurn(k, 1, "")
			e.cliWrite(k, joinLines(turn1.lines))
			mirror(t, m, k, sessionstore.AppendOptions{}, turn1.mirrored...)
			turn2, leaf := newCLITurn(k, 2, leaf)
			e.cliWrite(k, joinLines(turn2.lines))
			if kill {
				crash(t, m)
			} else {
				closeManager(t, m)
			}
			turn3, _ := newCLITurn(k, 3, leaf)
			e.cliWrite(k, joinLines(turn3.lines[:2]))
			m = e.manager()
			defer closeManager(t, m)
			if _, err := m.Recover(bg); err != nil {
				t.Fatal(err)
			}
			mirror(t, m, k, sessionstore.AppendOptions{}, turn2.mirrored...)
			e.cliWrite(k, joinLines(turn3.lines[2:]))
			mirror(t, m, k, sessionstore.AppendOptions{}, turn3.mirrored...)
			want := slices.Concat(turn1.lines, turn2.lines, turn3.lines)
			e.wantOnce(m, k, want)
			// Matched before the restart, turn 1's lines are not taken
			// for unmatched ones after it: a copy the CLI never wrote is
			// stored.
			latch := turn1.lines[1]
			res, err := m.AppendBatch(bg, k, [][]byte{[]byte(latch)}, sessionstore.AppendOptions{SharedFile: true})
			if err != nil || res.Results[0].Outcome != Stored {
				t.Fatalf("a copy of an old line the CLI did not write again: %+v %v; want it stored", res, err)
			}
		})
	}
}

// TestSharedFileSummaries: the summary of a mirrored batch, folded from
// the lines before the CLI's turn, is stored though every entry was a
// duplicate, and covers the transcript as it is then.
func TestSharedFileSummaries(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	var covers, version uint64
	parent := ""
	for n := 1; n <= 3; n++ {
		turn, leaf := newCLITurn(k, n, parent)
		parent = leaf
		e.cliWrite(k, joinLines(turn.lines))
		sum := &sessionstore.SummaryUpdate{Data: []byte(fmt.Sprintf(`{"turn":%d}`, n)), ExpectedVersion: version, Covers: covers, CheckCoverage: true, Folder: "ts"}
		res := mirror(t, m, k, sessionstore.AppendOptions{BatchID: uuid.NewString(), Summary: sum}, turn.mirrored...)
		if res.SummaryVersion != version+1 || res.Absorbed != uint64(len(turn.lines)) {
			t.Fatalf("turn %d: summary version %d, absorbed %d; want %d, %d", n, res.SummaryVersion, res.Absorbed, version+1, len(turn.lines))
		}
		version, covers = res.SummaryVersion, res.Entries
	}
	// A summary that misses lines nobody claimed is refused, as before.
	e.cliWrite(k, `{"type":"api-request","requestId":"req_x"}`+"\n")
	mustAppendTo(t, m, k, fmt.Sprintf(`{"type":"tag","tag":"x","sessionId":%q}`, k.SessionID))
	sum := &sessionstore.SummaryUpdate{Data: []byte(`{}`), ExpectedVersion: version, Covers: covers, CheckCoverage: true, Folder: "ts"}
	_, err := m.AppendBatch(bg, k, [][]byte{[]byte(`{"type":"tag","tag":"y"}`)}, sessionstore.AppendOptions{Summary: sum, SharedFile: true})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a summary missing a line stored without one: %v; want a conflict", err)
	}
}

// TestSharedFileMatchedLinesDurable: the CLI does not sync its lines; a
// mirrored append answered from them is acknowledged only once they are
// durable, so a power loss right after the answer keeps them (the writer
// opens on that append, finding the file there, or is open already and
// finds it grown).
func TestSharedFileMatchedLinesDurable(t *testing.T) {
	for _, opened := range []bool{false, true} {
		t.Run(fmt.Sprintf("opened=%v", opened), func(t *testing.T) {
			c := fstest.NewCrashFS()
			m := newCrashManager(t, c, nil)
			k := newKey()
			path := crashLayout.TranscriptPath(k)
			cli := func(lines []string) {
				if err := fsys.MkdirAll(c, filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				f, err := c.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write([]byte(joinLines(lines))); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			var want []string
			parent := ""
			if opened {
				turn, leaf := newCLITurn(k, 1, "")
				cli(turn.lines)
				mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored...)
				want, parent = turn.lines, leaf
			}
			turn, _ := newCLITurn(k, 2, parent)
			cli(turn.lines)
			mirror(t, m, k, sessionstore.AppendOptions{}, turn.mirrored...)
			want = append(want, turn.lines...)
			c.Crash()
			abortManager(m)
			if got := recoverAndRead(t, c.CrashClone(nil), k); got != joinLines(want) {
				t.Fatalf("after a power loss the transcript holds\n%s\nwant every line the acknowledged appends were matched with", got)
			}
		})
	}
}

// TestSharedFileMatchesTheValue: the Python and Ruby adapters re-encode
// what the CLI wrote, numbers in their own form; the mirrored copy is the
// same line still. A line with another value is not.
func TestSharedFileMatchesTheValue(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	cli := fmt.Sprintf(`{"type":"cost-state","sessionId":%q,"costUSD":0.00005,"tiny":5e-7,"n":2}`, k.SessionID)
	e.cliWrite(k, cli+"\n")
	python := fmt.Sprintf(`{"type":"cost-state","sessionId":%q,"costUSD":5e-05,"tiny":5e-07,"n":2}`, k.SessionID)
	ruby := fmt.Sprintf(`{"type":"cost-state","sessionId":%q,"costUSD":5.0e-05,"tiny":5.0e-07,"n":2}`, k.SessionID)
	mirror(t, m, k, sessionstore.AppendOptions{}, python)
	e.cliWrite(k, cli+"\n")
	mirror(t, m, k, sessionstore.AppendOptions{}, ruby)
	other := strings.Replace(python, `"n":2`, `"n":3`, 1)
	e.cliWrite(k, cli+"\n")
	res, err := m.AppendBatch(bg, k, [][]byte{[]byte(other)}, sessionstore.AppendOptions{SharedFile: true})
	if err != nil || res.Results[0].Outcome != Stored {
		t.Fatalf("a line with another value than the CLI's: %+v %v; want it stored", res, err)
	}
	e.wantOnce(m, k, []string{cli, cli, cli, other})
}

// closeWriter ends the writer of k as how says: its idle retirement
// ("retire"), sessiond stopping and starting again ("restart"), or killed
// ("kill", its writers aborted as SIGKILL leaves them); it returns the
// Manager that serves k next.
func (e *env) closeWriter(m *Manager, k layout.Key, how string) *Manager {
	e.t.Helper()
	switch how {
	case "retire":
		if _, err := m.flush(bg, k, session.RetireIfDone, "test"); err != nil {
			e.t.Fatal(err)
		}
		if m.IsActive(k) {
			e.t.Fatal("the writer did not retire")
		}
		return m
	case "restart":
		closeManager(e.t, m)
	case "kill":
		crash(e.t, m)
	}
	m = e.manager()
	if _, err := m.Recover(bg); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// TestSharedFileUnmatchedAcrossClose: the writer takes in the CLI's lines
// of two turns as the first turn's mirrored batch arrives, then closes
// (retires, sessiond restarts, or is killed) before the second turn's
// batch arrives: its lines without uuid are still matched, and those the
// first batch matched before the close are not matched again (a copy the
// CLI did not write again is stored).
func TestSharedFileUnmatchedAcrossClose(t *testing.T) {
	for _, how := range []string{"retire", "restart", "kill"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			k := newKey()
			turn1, leaf := newCLITurn(k, 1, "")
			turn2, _ := newCLITurn(k, 2, leaf)
			e.cliWrite(k, joinLines(slices.Concat(turn1.lines, turn2.lines)))
			mirror(t, m, k, sessionstore.AppendOptions{BatchID: uuid.NewString()}, turn1.mirrored...)
			m = e.closeWriter(m, k, how)
			defer closeManager(t, m)
			mirror(t, m, k, sessionstore.AppendOptions{BatchID: uuid.NewString()}, turn2.mirrored...)
			want := slices.Concat(turn1.lines, turn2.lines)
			e.wantOnce(m, k, want)
			// turn 1's queue line (its timestamp its own) was matched
			// before the close.
			queue := turn1.mirrored[0]
			res, err := m.AppendBatch(bg, k, [][]byte{[]byte(queue)}, sessionstore.AppendOptions{SharedFile: true})
			if err != nil || res.Results[0].Outcome != Stored {
				t.Fatalf("a copy of a line matched before the close, the CLI did not write again: %+v %v; want it stored", res, err)
			}
		})
	}
}

// TestSharedFileUnmatchedMatchedOnceAcrossClose: a line the CLI wrote
// twice, one copy matched before the writer closed: after it, one more
// mirrored copy matches, the next does not.
func TestSharedFileUnmatchedMatchedOnceAcrossClose(t *testing.T) {
	for _, how := range []string{"retire", "restart", "kill"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			k := newKey()
			latch := fmt.Sprintf(`{"type":"atis-latch","sessionId":%q}`, k.SessionID)
			e.cliWrite(k, joinLines([]string{latch, latch}))
			mirror(t, m, k, sessionstore.AppendOptions{}, latch)
			m = e.closeWriter(m, k, how)
			mirror(t, m, k, sessionstore.AppendOptions{}, latch)
			m = e.closeWriter(m, k, how)
			defer func() { closeManager(t, m) }()
			res, err := m.AppendBatch(bg, k, [][]byte{[]byte(latch)}, sessionstore.AppendOptions{SharedFile: true})
			if err != nil || res.Results[0].Outcome != Stored {
				t.Fatalf("a third copy, the CLI wrote two: %+v %v; want it stored", res, err)
			}
			e.wantOnce(m, k, []string{latch, latch, latch})
		})
	}
}

// TestSharedFileUnmatchedAcrossPowerLoss: the mirrored batch of the CLI's
// first turn arrives once the CLI wrote two turns (on disk), and the power
// goes out at each point where what is durable changes, during that
// append or after its answer; a disk keeping part of what was not synced
// too (random seeds). After recovery the adapter sends the batch again
// (same batch id: its answer may be lost), then the second turn's: every
// entry is a duplicate, and the transcript holds each of the CLI's lines
// once, no matter where the power went out.
func TestSharedFileUnmatchedAcrossPowerLoss(t *testing.T) {
	base := fstest.NewCrashFS()
	k := newKey()
	turn1, leaf := newCLITurn(k, 1, "")
	turn2, _ := newCLITurn(k, 2, leaf)
	want := slices.Concat(turn1.lines, turn2.lines)
	path := crashLayout.TranscriptPath(k)
	if err := fsys.MkdirAll(base, filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := base.WriteFile(path, []byte(joinLines(want)), 0o600); err != nil {
		t.Fatal(err)
	}
	batch1 := sessionstore.AppendOptions{BatchID: uuid.NewString()}
	send := func(m *Manager, opt sessionstore.AppendOptions, lines []string) (*AppendResult, error) {
		raw := make([][]byte, len(lines))
		for i, l := range lines {
			raw[i] = []byte(l)
		}
		opt.SharedFile = true
		return m.AppendBatch(bg, k, raw, opt)
	}
	// Points inside New (the journal's start) crash at the first
	// operation after it, as runToCrash does.
	run := func(c *fstest.CrashFS, at int64) {
		m := newCrashManager(t, c, nil)
		if at > 0 {
			c.CrashAt(max(at, c.Ops()+1))
		}
		send(m, batch1, turn1.mirrored)
		abortManager(m)
	}
	check := func(t *testing.T, v *fstest.CrashFS) {
		m := newCrashManager(t, v, nil)
		defer closeQuietly(m)
		if rep, err := m.Recover(bg); err != nil || len(rep.Failed) > 0 {
			t.Fatalf("Recover: %v %v", err, rep.Failed)
		}
		mirror(t, m, k, batch1, turn1.mirrored...)
		mirror(t, m, k, sessionstore.AppendOptions{BatchID: uuid.NewString()}, turn2.mirrored...)
		if _, err := m.Flush(bg, k); err != nil {
			t.Fatal(err)
		}
		if b, _ := v.ReadFile(path); string(b) != joinLines(want) {
			t.Fatalf("the transcript holds\n%s\nwant each of the CLI's lines once:\n%s", b, joinLines(want))
		}
	}
	points := persistencePoints(base, func(c *fstest.CrashFS) { run(c, 0) })
	for _, p := range points {
		c := base.KillClone()
		run(c, p)
		c.Crash()
		t.Run(fmt.Sprintf("op%d/synced", p), func(t *testing.T) { check(t, c.CrashClone(nil)) })
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("op%d/seed%d", p, seed), func(t *testing.T) { check(t, c.CrashClone(seedRNG(seed))) })
		}
	}
	if len(points) < 5 {
		t.Fatalf("only %d crash points: the append did not run", len(points))
	}
}

// TestSharedFileUnmatchedBound: a session the CLI writes alone, lines
// without uuid that nothing mirrors, holds no more than MaxUnmatched of
// them, in memory and after a restart: the oldest go first (its mirrored
// copy arriving late is stored), the ledger records no more than the
// last MaxUnmatched of a run of them.
func TestSharedFileUnmatchedBound(t *testing.T) {
	const bound = 4096 // files.MaxUnmatched, as the README states it
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	n := 3 * bound
	cli := make([]string, n)
	for i := range cli {
		cli[i] = fmt.Sprintf(`{"type":"queue-operation","n":%d,"sessionId":%q}`, i, k.SessionID)
	}
	e.cliWrite(k, joinLines(cli))
	oldest, kept := cli[n-bound-1], cli[n-bound]
	res, err := m.AppendBatch(bg, k, [][]byte{[]byte(oldest), []byte(kept)}, sessionstore.AppendOptions{SharedFile: true})
	if err != nil || res.Results[0].Outcome != Stored || res.Results[1].Outcome != Duplicate {
		t.Fatalf("a line past the bound, then the oldest one kept: %+v %v; want stored, then a duplicate", res, err)
	}
	if fi, err := os.Stat(e.lay.AckedPath(k)); err != nil || fi.Size() > int64(bound)*17+1024 {
		t.Fatalf("the ledger after %d lines without uuid: %v %v; want the last %d recorded only", n, fi.Size(), err, bound)
	}
	m = e.closeWriter(m, k, "restart")
	defer closeManager(t, m)
	dropped, next := cli[n-bound-2], cli[n-bound+1]
	res, err = m.AppendBatch(bg, k, [][]byte{[]byte(dropped), []byte(next)}, sessionstore.AppendOptions{SharedFile: true})
	if err != nil || res.Results[0].Outcome != Stored || res.Results[1].Outcome != Duplicate {
		t.Fatalf("after a restart, a line dropped and one kept: %+v %v; want stored, then a duplicate", res, err)
	}
}

// TestSharedFileOpenTailBeforeCompaction: the CLI wrote a turn while no
// writer was open; the writer opens for an append through the store (a
// title, not mirrored) and compacts before any mirrored batch arrives.
// The compaction's record names the file past the CLI's lines, so it
// notes them first: after a restart the mirrored batch still matches.
func TestSharedFileOpenTailBeforeCompaction(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	k := newKey()
	turn, _ := newCLITurn(k, 1, "")
	e.cliWrite(k, joinLines(turn.lines))
	title := fmt.Sprintf(`{"type":"custom-title","customTitle":"mine","sessionId":%q}`, k.SessionID)
	mustAppendTo(t, m, k, title)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	m = e.closeWriter(m, k, "restart")
	defer closeManager(t, m)
	mirror(t, m, k, sessionstore.AppendOptions{BatchID: uuid.NewString()}, turn.mirrored...)
	e.wantOnce(m, k, append(slices.Clone(turn.lines), title))
}

// TestFlushTakesInAnotherProgramsLines: with nothing journaled, a Flush
// still makes sessiond's view current with the file: lines another
// program appended (the CLI resumed in ~/.claude with no store) are
// served by Read at once, not only once the writer reopens.
func TestFlushTakesInAnotherProgramsLines(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	mine := string(entry(uuid.NewString()))
	if _, err := m.Append(bg, k, [][]byte{[]byte(mine)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	theirs := []string{string(entry(uuid.NewString())), `{"type":"last-prompt","lastPrompt":"say hi"}`}
	f, err := os.OpenFile(e.lay.TranscriptPath(k), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(theirs, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readServed(t, m, k); len(got) != 1 {
		t.Fatalf("before the flush Read serves %d lines, want the 1 sessiond knows (this test's premise)", len(got))
	}
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	want := append([]string{mine}, theirs...)
	if got := readServed(t, m, k); !slices.Equal(got, want) {
		t.Fatalf("after the flush Read serves\n%q\nwant\n%q", got, want)
	}
	// The uuid the other program wrote is known: appending it is a duplicate.
	res, err := m.Append(bg, k, [][]byte{[]byte(theirs[0])})
	if err != nil || res.Results[0].Outcome != Duplicate {
		t.Fatalf("appending the other program's line again: %+v %v, want a duplicate", res, err)
	}
}

// TestFlushAfterAnotherProgramRemovedTheFile: a Flush with nothing
// journaled whose transcript another program removed (or cut) succeeds and
// changes nothing: taking lines in is for a file that grew; the rest is
// left to the next compaction's and the next open's checks.
func TestFlushAfterAnotherProgramRemovedTheFile(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	for _, cut := range []bool{false, true} {
		// Another program's transcript, opened by a Read: the writer
		// knows lines past the ledger's last record, not noted yet.
		k := newKey()
		p := e.lay.TranscriptPath(k)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(string(entry(uuid.NewString()))+"\n"+string(entry(uuid.NewString()))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if n := len(readServed(t, m, k)); n != 2 {
			t.Fatalf("Read serves %d lines of the other program's transcript, want 2", n)
		}
		var err error
		if cut {
			err = os.Truncate(p, 10)
		} else {
			err = os.Remove(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(p)
		what := map[bool]string{false: "removal", true: "cut"}[cut]
		if _, err := m.Flush(bg, k); err != nil {
			t.Fatalf("flush after another program's %s: %v", what, err)
		}
		after, err := os.ReadFile(p)
		switch {
		case !cut && !errors.Is(err, fs.ErrNotExist):
			t.Fatalf("flush after another program's removal: the transcript is there again (%d bytes, %v)", len(after), err)
		case cut && (err != nil || !bytes.Equal(after, before)):
			t.Fatalf("flush after another program's cut changed the file: %q (%v), was %q", after, err, before)
		}
	}
}
