package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// appendDaemon takes appends as sessiond does (a batch id is stored
// once), and loses answers or refuses as a test tells it.
type appendDaemon struct {
	sessiondv1.UnimplementedSessiondServer
	// lose says whether to lose the answer to request n (1-based) after
	// storing its batch: the stream ends as a broken connection ends it.
	lose   func(n int) bool
	refuse error         // when set, every request's answer
	hold   chan struct{} // when set, requests wait for it (and the caller's cancel)

	mu      sync.Mutex
	ids     []string // the batch id of each request received
	sizes   []int    // its number of entries
	stored  map[string]bool
	entries int
}

func (f *appendDaemon) AppendStream(st grpc.BidiStreamingServer[sessiondv1.AppendRequest, sessiondv1.AppendStreamResponse]) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		f.ids = append(f.ids, req.GetBatchId())
		f.sizes = append(f.sizes, len(req.GetEntries()))
		n := len(f.ids)
		f.mu.Unlock()
		if f.hold != nil {
			select {
			case <-f.hold:
			case <-st.Context().Done():
				return nil
			}
		}
		if f.refuse != nil {
			s := status.Convert(f.refuse)
			if err := st.Send(&sessiondv1.AppendStreamResponse{Error: &sessiondv1.AppendError{Code: int32(s.Code()), Message: s.Message()}}); err != nil {
				return err
			}
			continue
		}
		f.mu.Lock()
		if f.stored == nil {
			f.stored = map[string]bool{}
		}
		dup := f.stored[req.GetBatchId()]
		f.stored[req.GetBatchId()] = true
		resp := &sessiondv1.AppendResponse{DuplicateBatch: dup, Results: make([]*sessiondv1.EntryResult, len(req.GetEntries()))}
		for i := range resp.Results {
			r := &sessiondv1.EntryResult{Outcome: sessiondv1.EntryOutcome_ENTRY_OUTCOME_DUPLICATE}
			if !dup {
				r = &sessiondv1.EntryResult{Outcome: sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED, Index: uint64(f.entries)}
				f.entries++
			}
			resp.Results[i] = r
		}
		resp.Entries = uint64(f.entries)
		f.mu.Unlock()
		if f.lose != nil && f.lose(n) {
			return status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		if err := st.Send(&sessiondv1.AppendStreamResponse{Response: resp}); err != nil {
			return err
		}
	}
}

func (f *appendDaemon) received() ([]string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...), append([]int(nil), f.sizes...)
}

func serveAppends(t *testing.T, f *appendDaemon) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)) // sessiond's default
	sessiondv1.RegisterSessiondServer(g, f)
	grpc_health_v1.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return sock
}

const testSID = "6f1c5fbb-1f6e-4b8e-9b9e-0a3f3c1f2a10"

// ctlResult is what one sessionctl run printed and its exit status.
type ctlResult struct {
	out, errOut string
	code        int
	took        time.Duration
}

func runCtl(ctx context.Context, stdin io.Reader, args ...string) ctlResult {
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(ctx, args, stdin, &out, &errOut)
	return ctlResult{out.String(), errOut.String(), code, time.Since(start)}
}

func appendArgs(sock string, extra ...string) []string {
	return append([]string{"--socket", sock, "append", "--cwd", "/w", "--session", testSID}, extra...)
}

// entries is n JSONL lines without uuids: only the batch id keeps a
// resend from storing them twice.
func entries(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"type":"user","k":"line-%d"}`+"\n", i)
	}
	return b.String()
}

// noRawStatus fails the test when gRPC's wording reached a message.
func noRawStatus(t *testing.T, msg string) {
	t.Helper()
	if strings.Contains(msg, "rpc error") || strings.Contains(msg, "code = ") {
		t.Errorf("gRPC's text in the message: %s", msg)
	}
}

// TestAppendResendsLostBatch: an answer lost after sessiond stored the
// batch is followed by the same batch with the same id, which sessiond
// answers as stored already: the command succeeds and says so.
func TestAppendResendsLostBatch(t *testing.T) {
	f := &appendDaemon{lose: func(n int) bool { return n == 1 }}
	r := runCtl(context.Background(), strings.NewReader(entries(3)), appendArgs(serveAppends(t, f))...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	ids, _ := f.received()
	if len(ids) != 2 || ids[0] == "" || ids[1] != ids[0] {
		t.Fatalf("batch ids received %q, want one id twice", ids)
	}
	if !strings.Contains(r.out, "batch "+ids[0]+" was stored already") {
		t.Errorf("output does not say the batch was stored by the lost attempt:\n%s", r.out)
	}
	if !strings.Contains(r.errOut, "sending it again with the same batch id") {
		t.Errorf("stderr does not say the batch is sent again: %q", r.errOut)
	}
	noRawStatus(t, r.errOut)
}

// TestAppendUnknownOutcomeMessage: when sessiond never answers a batch
// within --wait, the message says the outcome is unknown (never that
// nothing was stored), names the batch id every attempt carried, and gives
// the command that sends the rest again under that id.
func TestAppendUnknownOutcomeMessage(t *testing.T) {
	f := &appendDaemon{lose: func(int) bool { return true }}
	sock := serveAppends(t, f)
	r := runCtl(context.Background(), strings.NewReader(entries(3)), append([]string{"--wait", "1s"}, appendArgs(sock)...)...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: %s", r.code, r.errOut)
	}
	ids, _ := f.received()
	if len(ids) < 2 {
		t.Fatalf("%d attempts, want the batch sent again", len(ids))
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("attempts carried batch ids %q, want one id", ids)
		}
	}
	for _, want := range []string{
		"stdin lines 1-3 (batch " + ids[0] + "): the outcome is unknown",
		"sending it again did not succeed within 1s. Nothing after line 3 was sent.",
		"append --cwd /w --session " + testSID + " --batch-id " + ids[0] + " < INPUT",
	} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("message lacks %q:\n%s", want, r.errOut)
		}
	}
	if regexp.MustCompile(`nothing (of it )?was stored`).MatchString(r.errOut) {
		t.Errorf("message says nothing was stored, which is not known:\n%s", r.errOut)
	}
	noRawStatus(t, r.errOut)
}

// TestAppendLaterBatchUnknown: a later batch's unknown outcome names the
// lines stored before it, and the command sends from its first line with
// its id; --batch-id names the first batch and the next ones after it.
func TestAppendLaterBatchUnknown(t *testing.T) {
	f := &appendDaemon{lose: func(n int) bool { return n > 1 }}
	sock := serveAppends(t, f)
	// 17 lines of 1 MiB: the first batch takes 15 (16 MiB at most).
	line := `{"type":"user","pad":"` + strings.Repeat("x", 1<<20) + `"}` + "\n"
	in := filepath.Join(t.TempDir(), "in put.jsonl")
	if err := os.WriteFile(in, []byte(strings.Repeat(line, 17)), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	r := runCtl(context.Background(), stdin, append([]string{"--wait", "1s"}, appendArgs(sock, "--batch-id", "b-1")...)...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: %s", r.code, r.errOut)
	}
	ids, sizes := f.received()
	if len(ids) < 3 || ids[0] != "b-1" || ids[1] != "b-1.2" || sizes[0] != 15 || sizes[1] != 2 {
		t.Fatalf("batches received %q of %v entries; want b-1 (15), then b-1.2 (2) sent again", ids, sizes)
	}
	for _, want := range []string{
		"stdin lines 16-17 (batch b-1.2): the outcome is unknown",
		"Stdin lines 1-15 were stored",
		"tail -n +16 '" + in + "' | sessionctl --socket " + sock + " --wait 1s append --cwd /w --session " + testSID + " --batch-id b-1.2",
	} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("message lacks %q:\n%s", want, r.errOut)
		}
	}
}

// TestAppendRefusedSaysNothingStored: a refusal is sessiond's answer that
// it stored nothing: said so, not sent again.
func TestAppendRefusedSaysNothingStored(t *testing.T) {
	f := &appendDaemon{refuse: status.Error(codes.InvalidArgument, "entry 2 of 3: not an object: invalid argument")}
	r := runCtl(context.Background(), strings.NewReader(entries(3)), appendArgs(serveAppends(t, f))...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	want := "sessionctl: stdin lines 1-3 (one batch, stored whole or not at all): nothing of it was stored: invalid input: entry 2 of 3: not an object\n"
	if r.errOut != want {
		t.Errorf("stderr %q, want %q", r.errOut, want)
	}
	if ids, _ := f.received(); len(ids) != 1 {
		t.Errorf("%d attempts, want 1: a refusal is not sent again", len(ids))
	}
}

// TestAppendInterrupted: an interrupt (SIGINT, SIGTERM end run's context)
// while sessiond holds the batch ends the command at once, saying the
// outcome is unknown; while stdin has no line yet, saying nothing was
// stored.
func TestAppendInterrupted(t *testing.T) {
	f := &appendDaemon{hold: make(chan struct{})}
	defer close(f.hold)
	sock := serveAppends(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	r := runCtl(ctx, strings.NewReader(entries(2)), appendArgs(sock)...)
	if r.took > 3*time.Second {
		t.Errorf("returned %v after the interrupt", r.took-500*time.Millisecond)
	}
	ids, _ := f.received()
	if r.code != 1 || len(ids) != 1 || !strings.Contains(r.errOut, "(batch "+ids[0]+"): the outcome is unknown, sessiond may or may not have stored it: interrupted while sessiond had it") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.errOut)
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	// Bounds a command that waits for stdin in spite of the interrupt.
	time.AfterFunc(5*time.Second, func() { pw.Close() })
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	r = runCtl(ctx, pr, appendArgs(sock)...)
	if r.took > 2*time.Second || r.code != 1 || r.errOut != "sessionctl: interrupted: nothing was stored\n" {
		t.Errorf("interrupted reading stdin: exit %d after %v, stderr %q", r.code, r.took, r.errOut)
	}
}

// TestAppendUsage: command-line mistakes exit 2 before anything is sent.
func TestAppendUsage(t *testing.T) {
	f := &appendDaemon{}
	sock := serveAppends(t, f)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket", sock, "append", "--cwd", "/w"}, "--session is required"},
		{[]string{"--socket", sock, "append", "--session", testSID}, "--cwd (or --project) is required"},
		{appendArgs(sock, "--batch-id", "has space"), `--batch-id is 1-100 printable ASCII characters without spaces (a UUID is best), not "has space"`},
		{appendArgs(sock, "--batch-id", ""), "--batch-id is 1-100"},
		{appendArgs(sock, "--batch-id", strings.Repeat("x", 101)), "--batch-id is 1-100"},
	} {
		r := runCtl(context.Background(), strings.NewReader(entries(1)), c.args...)
		if r.code != 2 || !strings.Contains(r.errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.errOut, c.want)
		}
	}
	if ids, _ := f.received(); len(ids) != 0 {
		t.Errorf("%d requests sent by mistaken command lines", len(ids))
	}
}

// TestExplainWrappedStatus: a status wrapped in words of sessionctl's is
// said with those words, without gRPC's wording.
func TestExplainWrappedStatus(t *testing.T) {
	err := fmt.Errorf("sessiond did not serve within --wait 1s: %w", status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	if got, want := explain(err), "sessiond did not serve within --wait 1s: sessiond did not answer in time"; got != want {
		t.Errorf("explain = %q, want %q", got, want)
	}
}
