package recovery

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestRecoveryScenario runs the recovery scenario at a tiny scale against a
// real sessiond: a few sessions of the full per-session size in a
// write-ahead log of small segments (so that recovery reads several),
// SIGKILL, restart. It checks what the scenario claims about the files,
// never a speed.
func TestRecoveryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out strings.Builder
	env := &harness.Env{Sessiond: bin, Dir: dir, Verify: true, Scale: 0.004, Seed: 11, Log: io.Discard,
		SessiondArgs: []string{"--journal-segment-size", strconv.Itoa(1 << 20)}}
	sc, err := Run(ctx, env)
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if sc.Name != Name {
		t.Fatalf("scenario %q", sc.Name)
	}
	const sessions = 4 // 1000 * 0.004
	perSession := int64(recoveryTotalBytes / recoverySessions)

	// The table: two sequential reads, the log's segments, the recovery to
	// serving and exec to the log read, the recovery to every transcript
	// current and the daemon's own replay time, the write baseline and the
	// append phase.
	if sc.Table == nil || len(sc.Table.Rows) != 9 {
		t.Fatalf("table %+v", sc.Table)
	}
	rows := map[string][]string{}
	for _, r := range sc.Table.Rows {
		if len(r) != len(sc.Table.Columns) {
			t.Fatalf("row %q has %d cells, %d columns", r, len(r), len(sc.Table.Columns))
		}
		rows[strings.Fields(r[0])[0]+" "+strings.Fields(r[0])[1]] = r
		for _, cell := range r[1:4] {
			if v, err := strconv.ParseFloat(strings.TrimSuffix(cell, "%"), 64); err != nil || v <= 0 {
				t.Errorf("row %q: cell %q not a positive figure", r[0], cell)
			}
		}
	}
	// Every byte read or replayed is a byte of the log or a copy of that
	// size: the same MB figure in the rows that read the log.
	rec, seq, jr, wr := rows["sessiond recovery:"], rows["sequential read,"], rows["read the"], rows["write +"]
	full := rows["exec ->"]
	if rec == nil || seq == nil || jr == nil || wr == nil || full == nil || rows["of which"] == nil || rows["append phase"] == nil {
		t.Fatalf("missing rows in %v", sc.Table.Rows)
	}
	// Serving comes first, every transcript current after it.
	if a, _ := strconv.ParseFloat(rec[3], 64); a > benchtest.Float(t, full[3]) || full[1] != rec[1] {
		t.Errorf("serving after %s s of %s MB, transcripts current after %s s of %s MB", rec[3], rec[1], full[3], full[1])
	}
	if rec[1] != seq[1] || rec[1] != jr[1] || rec[1] != wr[1] {
		t.Errorf("MB recovered %s, sequential file %s, log read %s, written %s: want equal", rec[1], seq[1], jr[1], wr[1])
	}
	// The log holds every entry, framed: more than the entries' bytes.
	if mb, _ := strconv.ParseFloat(rec[1], 64); mb*1e6 < float64(sessions*perSession) {
		t.Errorf("%s MB of log for %d sessions of %d bytes", rec[1], sessions, perSession)
	}
	// ~4.3 MB in segments of 1 MiB (each may end one write past it):
	// several segments, the same count read by the baseline and recovery.
	if n, err := strconv.Atoi(rec[2]); err != nil || n < 2 || jr[2] != rec[2] || !strings.Contains(jr[0], "read the "+rec[2]+" log segments") {
		t.Errorf("log segments: recovery %s, read %s (%q); want the same, at least 2", rec[2], jr[2], jr[0])
	}
	if of := rows["of which"]; of != nil && of[2] != rec[2] {
		t.Errorf("row %q: %s segments, recovery %s", of[0], of[2], rec[2])
	}
	var ofWhich int
	for _, r := range sc.Table.Rows {
		if strings.HasPrefix(r[0], "  of which exec -> the log read") {
			ofWhich++
			// Exec to the log read is part of exec to serving.
			if benchtest.Float(t, r[3]) > benchtest.Float(t, rec[3]) {
				t.Errorf("log read after %s s, serving after %s s", r[3], rec[3])
			}
		}
	}
	if ofWhich != 1 {
		t.Errorf("%d rows for exec -> the log read, want 1: %v", ofWhich, sc.Table.Rows)
	}
	// To serving, and to every transcript current, which comes later: a
	// lower share of the read speed.
	if len(sc.Checks) != 2 {
		t.Fatalf("checks %+v", sc.Checks)
	}
	for _, c := range sc.Checks {
		if c.Value <= 0 || c.Limit != 50 || c.Unit != "%" || !c.AtLeast {
			t.Errorf("check %+v", c)
		}
	}
	if sc.Checks[1].Value > sc.Checks[0].Value {
		t.Errorf("every transcript current at %.1f%% of the read speed, serving at %.1f%%: the replay ends after serving", sc.Checks[1].Value, sc.Checks[0].Value)
	}
	notes := strings.Join(sc.Notes, "\n")
	if !strings.Contains(notes, "Verified: yes: 4 sessions") {
		t.Errorf("notes do not say verified: %q", sc.Notes)
	}
	if want := "--journal-max-size " + strconv.Itoa(recoveryNoCompact); !strings.Contains(notes, want) || !strings.Contains(notes, "holding 4 sessions") {
		t.Errorf("notes do not say %q and that the log held 4 sessions: %q", want, sc.Notes)
	}

	// Independently of the scenario's own hash check: each canonical file
	// holds whole, distinct entries of the session, at least the
	// per-session size; and no per-session journal was ever written.
	ddir := filepath.Join(dir, "daemon")
	canon, _ := filepath.Glob(filepath.Join(ddir, "root", "projects", "*", "*.jsonl"))
	if len(canon) != sessions {
		t.Fatalf("%d canonical files, want %d", len(canon), sessions)
	}
	for _, p := range canon {
		sid := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var size, seq int64
		r := bufio.NewReaderSize(f, 2<<20)
		for {
			line, err := r.ReadBytes('\n')
			if err == io.EOF {
				if len(line) != 0 {
					t.Errorf("%s: torn last line", p)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			size += int64(len(line))
			var e struct {
				UUID      string `json:"uuid"`
				SessionID string `json:"sessionId"`
				Seq       int64  `json:"seq"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("%s: line %d: %v", p, seq+1, err)
			}
			if e.SessionID != sid || e.Seq != seq || seen[e.UUID] {
				t.Fatalf("%s: line %d: session %s, seq %d, uuid %s seen before %v", p, seq+1, e.SessionID, e.Seq, e.UUID, seen[e.UUID])
			}
			seen[e.UUID] = true
			seq++
		}
		f.Close()
		if size < perSession {
			t.Errorf("%s: %d bytes, want at least %d", p, size, perSession)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sequential.bin")); !os.IsNotExist(err) {
		t.Errorf("the baseline file was left behind: %v", err)
	}
}
