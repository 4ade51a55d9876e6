package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// smallMessages runs sessiond with a message limit of 1.125 MiB (the least
// --max-entry-bytes 64 KiB allows), so that an answer that would need
// more than one message is cheap to make.
var smallMessages = []string{"--max-entry-bytes", "65536", "--max-message-bytes", "1179648"}

// writeDamaged writes a transcript sessiond never wrote: n entries, each
// followed by a line of garbage longer than a repair action shows (200
// bytes), so that check finds n problems and repair makes n changes.
func writeDamaged(t *testing.T, path, sid string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	parent := "null"
	junk := strings.Repeat("#", 300)
	for i := 0; i < n; i++ {
		id := uuid.NewString()
		fmt.Fprintf(&b, `{"type":"user","uuid":%q,"parentUuid":%s,"sessionId":%q,"message":{"role":"user","content":"turn %d"}}`+"\n", id, parent, sid, i)
		fmt.Fprintf(&b, "garbage %d %s\n", i, junk)
		parent = fmt.Sprintf("%q", id)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckMoreProblemsThanOneMessage: a session whose problems make far
// more than one message (12,000 problems, about 2.5 MB, against a
// 1.125 MiB limit) is checked whole: every problem printed, exit 1 (damaged), not 2
// (could not check), as text and as JSON. Before the answer was streamed,
// check exited 2 with "trying to send message larger than max".
func TestCheckMoreProblemsThanOneMessage(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, smallMessages...)
	d.start()
	const n = 12000
	pk, sid := "-big-check", uuid.NewString()
	writeDamaged(t, d.transcript(pk, sid), sid, n)

	out, errOut, code := d.ctl("", "check", sid, "--project", pk)
	if code != 1 {
		t.Fatalf("check: exit %d, want 1 (damaged)\nstderr: %s\nstdout starts: %.2000s", code, errOut, out)
	}
	if got := strings.Count(out, ": malformed: "); got != n {
		t.Fatalf("check printed %d malformed lines, want %d", got, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if want := fmt.Sprintf(":%d: malformed: ", 2*i+2); !strings.Contains(out, want) {
			t.Fatalf("check did not print the problem of line %d", 2*i+2)
		}
	}

	out, errOut, code = d.ctl("", "check", sid, "--project", pk, "--json")
	if code != 1 {
		t.Fatalf("check --json: exit %d, want 1\n%s", code, errOut)
	}
	var problems, messages int
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m struct {
			Lines        int               `json:"lines"`
			ProblemCount int               `json:"problem_count"`
			Problems     []json.RawMessage `json:"problems"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("check --json line %d is not a JSON object: %v\n%.500s", messages+1, err, l)
		}
		if messages == 0 && (m.Lines != 2*n || m.ProblemCount != n) {
			t.Fatalf("the first JSON line says %d lines, %d problems; want %d, %d", m.Lines, m.ProblemCount, 2*n, n)
		}
		messages++
		problems += len(m.Problems)
	}
	if problems != n || messages < 2 {
		t.Fatalf("check --json printed %d problems in %d lines, want %d in several", problems, messages, n)
	}
}

// TestRepairMoreActionsThanOneMessage is the repair of a session missing
// many entries it had acknowledged (another program rewrote it without
// them): 6,000 entries put back from the journal, a plan and a
// finding (6,000 ids) far larger than one message. The repair succeeds and
// sessionctl says so, exit 0, listing every change; check is clean after.
// Before, the daemon repaired the file but its answer was over the limit,
// and sessionctl reported a failure.
func TestRepairMoreActionsThanOneMessage(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, smallMessages...)
	d.start()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	sid := uuid.NewString()
	s := client.Session{Cwd: cwd, ID: sid}

	const n, kept = 6000, 10
	var lines, ids []string
	parent := "null"
	for i := 0; i < n; i++ {
		id := uuid.NewString()
		lines = append(lines, fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":%s,"sessionId":%q,"message":{"role":"user","content":"turn %d"}}`, id, parent, sid, i))
		ids = append(ids, id)
		parent = fmt.Sprintf("%q", id)
	}
	for i := 0; i < n; i += 1000 {
		batch := make([][]byte, 0, 1000)
		for _, l := range lines[i : i+1000] {
			batch = append(batch, []byte(l))
		}
		if _, err := c.Append(ctx, s, batch...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Flush(ctx, s); err != nil {
		t.Fatal(err)
	}
	// Another program saves an old copy over it.
	if err := os.WriteFile(d.transcript(pk, sid), []byte(strings.Join(lines[:kept], "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("sessiond exited %d", code)
	}
	d.start()

	out, errOut, code := d.ctl("", "check", sid)
	if code != 1 || !strings.Contains(out, "acknowledged_missing") {
		t.Fatalf("check: exit %d, want 1 with acknowledged_missing\nstderr: %s\nstdout starts: %.2000s", code, errOut, out)
	}
	for _, id := range ids[kept:] {
		if !strings.Contains(out, id) {
			t.Fatalf("check does not name the missing entry %s", id)
		}
	}

	out, errOut, code = d.ctl("", "repair", sid)
	if code != 0 {
		t.Fatalf("repair: exit %d, want 0\nstderr: %s\nstdout ends: %s", code, errOut, tail(out, 2000))
	}
	if got := strings.Count(out, ": restore_acknowledged: "); got != n-kept {
		t.Fatalf("repair listed %d restore_acknowledged changes, want %d", got, n-kept)
	}
	if !strings.Contains(out, fmt.Sprintf("repaired %s (%d changes); the original is kept at ", d.transcript(pk, sid), n-kept)) {
		t.Fatalf("repair does not say it repaired the session:\n%s", tail(out, 2000))
	}
	if out, _, code := d.ctl("", "check", sid); code != 0 {
		t.Fatalf("check after repair: exit %d\n%.2000s", code, out)
	}
	b, err := os.ReadFile(d.transcript(pk, sid))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != strings.Join(lines, "\n")+"\n" {
		t.Fatalf("after repair the transcript is not the %d acknowledged entries in order", n)
	}

	// A repair of a file of another program: thousands of lines dropped.
	other := uuid.NewString()
	writeDamaged(t, d.transcript(pk, other), other, 5000)
	out, errOut, code = d.ctl("", "repair", other, "--json")
	if code != 0 {
		t.Fatalf("repair --json: exit %d\n%s", code, errOut)
	}
	var actions, messages int
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m struct {
			Changed     bool              `json:"changed"`
			ActionCount int               `json:"action_count"`
			Actions     []json.RawMessage `json:"actions"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("repair --json line %d is not a JSON object: %v", messages+1, err)
		}
		if messages == 0 && (!m.Changed || m.ActionCount != 5000) {
			t.Fatalf("the first JSON line says changed %v, %d actions; want true, 5000", m.Changed, m.ActionCount)
		}
		messages++
		actions += len(m.Actions)
	}
	if actions != 5000 {
		t.Fatalf("repair --json printed %d actions, want 5000", actions)
	}
	if out, _, code := d.ctl("", "check", other); code != 0 {
		t.Fatalf("check after repair: exit %d\n%.2000s", code, out)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestCheckAllStreams: check --all sends each transcript's result as soon
// as it is checked, and sessionctl prints it as it comes. The test reads
// sessionctl's first line and then stops reading: sessionctl, then the
// daemon, wait on the reader, and the daemon's check is still under way
// (Status shows it, with fewer transcripts done than there are). Before,
// the daemon checked every transcript into one answer, and sessionctl
// printed nothing until the check was over.
func TestCheckAllStreams(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	// Enough output that neither the pipe nor gRPC's windows hold it all
	// (about 3 MB): the daemon has to wait for the reader.
	const n = 2000
	pk := "-many"
	dir := filepath.Join(d.root, "projects", pk)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	junk := strings.Repeat("#", 400)
	for i := 0; i < n; i++ {
		sid := uuid.NewString()
		body := fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":null,"sessionId":%q,"message":{"role":"user","content":"hi"}}`+"\n", uuid.NewString(), sid) +
			fmt.Sprintf("garbage one %s\ngarbage two %s\ngarbage three %s\n", junk, junk, junk)
		if err := os.WriteFile(filepath.Join(dir, sid+".jsonl"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(bins.Sessionctl(), "--socket", d.socket, "check", "--all", "--project", pk, "--json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReaderSize(stdout, 1<<20)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("no first line from check --all: %v\n%s", err, errOut.String())
	}
	// Nothing more is read until the daemon has been asked how far it is.
	c := d.client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	var running bool
	var done, total uint64
	for !running && time.Now().Before(deadline) {
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range st.GetOperations() {
			if op.GetKind() == "check" {
				running, done, total = true, op.GetDone(), op.GetTotal()
			}
		}
		if !running {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !running || total != n || done >= total {
		t.Fatalf("after the first line of check --all, the daemon's check is not under way (running %v, %d of %d done): its results were not streamed", running, done, total)
	}

	lines := 1
	for {
		l, err := r.ReadString('\n')
		if l != "" {
			lines++
		}
		if err != nil {
			break
		}
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("check --all: %v, want exit 1 (damaged)\n%s", err, errOut.String())
	}
	if lines != n {
		t.Fatalf("check --all --json printed %d lines, want one per transcript (%d)", lines, n)
	}
}
