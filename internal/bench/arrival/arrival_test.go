package arrival

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/benchtest"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestArrivalScenario runs the scenario at a tiny scale against a real
// sessiond and checks that every row is produced and holds together, and
// that every acknowledged entry is in its transcript. It judges no figure.
//
// The floor run (the echo server) must show in the table with its rows,
// its file holding every acknowledged line (Verify).
func TestArrivalScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs sessiond")
	}
	t.Parallel()
	bin := benchtest.Sessiond(t)
	scale := 0.004 // 4 sessions, 3 s windows; 40 live sessions
	if !benchtest.Small() {
		scale = 0.01
	}
	// Windows of 3 s: entries are compacted within 2 s instead of the
	// default 30, so the watcher finds them all in the drain.
	env := &harness.Env{Sessiond: bin, Dir: t.TempDir(), Scale: scale, Verify: true, Seed: 9, Log: io.Discard,
		SessiondArgs: []string{"--compact-within", "2s"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc, err := Run(ctx, env)
	var out strings.Builder
	harness.WriteScenario(&out, sc)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	vs, _ := variants(env)
	rows := map[string]map[string][]string{} // run -> measurement -> row
	for _, r := range sc.Table.Rows {
		if rows[r[0]] == nil {
			rows[r[0]] = map[string][]string{}
		}
		rows[r[0]][r[1]] = r
	}
	for _, v := range vs {
		got := rows[v.label]
		want := 7
		switch {
		case v.memory:
			want = 9
		case v.floor:
			want = 5
		}
		if len(got) != want {
			t.Errorf("%s: %d rows, want %d\n%s", v.label, len(got), want, out.String())
			continue
		}
		figures := func(what string, n int) []float64 {
			r := got[what]
			if r == nil {
				t.Fatalf("%s: no row %q", v.label, what)
			}
			parts := strings.Split(r[2], " / ")
			if len(parts) != n {
				t.Fatalf("%s: %q is %q", v.label, what, r[2])
			}
			var fs []float64
			for _, p := range parts {
				fs = append(fs, benchtest.Float(t, p))
			}
			return fs
		}
		rate := figures("appends/s: achieved / offered", 2)
		if rate[0] <= 0 || rate[1] != float64(v.sessions)/v.think.Seconds() {
			t.Errorf("%s: rate %v", v.label, rate)
		}
		lat := figures("append latency p50 / p99 / max, ms", 3)
		if lat[0] <= 0 || lat[0] > lat[1] || lat[1] > lat[2] {
			t.Errorf("%s: latency %v", v.label, lat)
		}
		if cpu := figures("daemon CPU, % of one core", 1); cpu[0] < 0 || cpu[0] > 100*float64(runtime.NumCPU()) {
			t.Errorf("%s: CPU %v", v.label, cpu)
		}
		// The daemon holds at least its socket, its log and the
		// clients' connections.
		if fds := figures("daemon descriptors, max / of them deleted files", 2); fds[0] < float64(min(conns, v.sessions))+2 || fds[1] > fds[0] {
			t.Errorf("%s: descriptors %v", v.label, fds)
		}
		// Everything appended went through the log (or the durable
		// floor's file) at least once; the gRPC-alone floor keeps nothing.
		keeps := !v.floor || v.durable
		if w := figures("bytes written / bytes appended", 1); keeps && w[0] < 0.5 {
			t.Errorf("%s: bytes written over appended %v", v.label, w)
		}
		if v.floor {
			continue
		}
		if c := figures("compactions/s", 1); c[0] < 0 {
			t.Errorf("%s: compactions/s %v", v.label, c)
		}
		// Every watched entry was found in its transcript, within the
		// drain and in order of the figures.
		st := figures("transcript staleness max / p99, s", 2)
		if st[1] > st[0] || st[0] > staleLimitSecs+10 || !strings.Contains(got["transcript staleness max / p99, s"][3], "; 0 never found") {
			t.Errorf("%s: staleness %v (%s)", v.label, st, got["transcript staleness max / p99, s"][3])
		}
		if v.memory {
			rss := figures("daemon RSS / peak, MiB", 2)
			if rss[0] <= 0 || rss[1] < rss[0] {
				t.Errorf("%s: RSS %v", v.label, rss)
			}
			figures("RSS per live session, KiB", 1)
		}
	}
	// Targets: five on the 1 KiB run at mean 1 s, four at mean 5 s
	// (CPU is stated at mean 1 s), none on the info runs.
	if len(sc.Checks) != 9 {
		t.Errorf("%d targets: %+v", len(sc.Checks), sc.Checks)
	}
	if !strings.Contains(strings.Join(sc.Notes, "\n"), "sessiond's own CPU at mean 1 s, 1 KiB: ") {
		t.Errorf("no note of sessiond's CPU beyond the floor in %q", sc.Notes)
	}
	if !strings.Contains(strings.Join(sc.Notes, "\n"), "Verified: yes") {
		t.Errorf("notes %q", sc.Notes)
	}
}

// TestWatcherFindsEntries: the staleness watcher finds entries appended to
// a transcript and those of a file replaced by a new one, and counts what
// it never found with its age at the end.
func TestWatcherFindsEntries(t *testing.T) {
	root := t.TempDir()
	s := client.Session{ProjectKey: "-p", ID: "0b1c6a2e-7f43-4b8e-9d2a-2f1e5c3d4b6a"}
	path := harness.TranscriptPath(root, s)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ids := []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"}
	line := func(id string) string { return string(harness.AppendEntry(nil, 300, s.ID, id, 0)) + "\n" }
	w := newWatcher(root, []client.Session{s})
	start := time.Now().Add(-time.Second)
	w.acked(ids, start)
	if err := w.poll(); err != nil || w.pending() != 3 {
		t.Fatalf("no file yet: %d pending (%v)", w.pending(), err)
	}
	if err := os.WriteFile(path, []byte(line(ids[0])+`{"partial`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.poll(); err != nil || w.pending() != 2 {
		t.Fatalf("one whole line: %d pending (%v)", w.pending(), err)
	}
	// A compaction writes a new file and renames it over the old one.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(line(ids[0])+line(ids[1])), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if err := w.poll(); err != nil || w.pending() != 1 {
		t.Fatalf("replaced file: %d pending (%v)", w.pending(), err)
	}
	end := start.Add(5 * time.Second)
	r := w.result(end)
	if r.entries != 3 || r.unseen != 1 || r.max != 5 || r.p99 != 5 {
		t.Errorf("result %+v", r)
	}
}
