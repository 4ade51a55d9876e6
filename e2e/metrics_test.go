package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/testharness"
)

var metricsListenLog = regexp.MustCompile(`"serving metrics".*"metrics_listen":"([^"]+)"`)

// metricsAddr is the address the daemon says it serves metrics on (the
// port it was given, 0, is a free one it chose).
func (d *daemon) metricsAddr() string {
	d.t.Helper()
	m := metricsListenLog.FindStringSubmatch(d.Log())
	if m == nil {
		d.t.Fatalf("sessiond did not log where it serves metrics:\n%s", d.LogTail(logTail))
	}
	return m[1]
}

func (d *daemon) scrape(addr string) testharness.Families {
	d.t.Helper()
	f, err := testharness.Scrape(context.Background(), addr)
	if err != nil {
		d.t.Fatalf("%v\n%s", err, d.LogTail(logTail))
	}
	return f
}

// The real daemon serves its metrics on 127.0.0.1 and on a Unix socket
// when asked; the client library's parser reads them; they move with
// appends (stored entries, fsyncs, the gRPC calls by code, the append
// histograms), refused requests are counted by code, and the Unix socket
// is private and gone after the daemon stops.
func TestMetricsEndpoint(t *testing.T) {
	for _, tc := range []struct{ name, listen string }{
		{"tcp", "127.0.0.1:0"},
		{"unix", "unix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen := tc.listen
			var sock string
			if listen == "unix" {
				sock = filepath.Join(t.TempDir(), "metrics", "m.sock")
				listen = "unix:" + sock
			}
			d := newDaemon(t, "--metrics-listen", listen)
			d.start()
			addr := d.metricsAddr()
			if sock != "" {
				if addr != listen {
					t.Fatalf("serving metrics on %s, want %s", addr, listen)
				}
				fi, err := os.Stat(sock)
				if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
					t.Fatalf("metrics socket: %v %v; want a socket of mode 0600", fi, err)
				}
			} else if !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" {
				t.Fatalf("serving metrics on %q", addr)
			}

			before := d.scrape(addr)
			for name, typ := range map[string]dto.MetricType{
				"sessiond_entries_stored_total":           dto.MetricType_COUNTER,
				"sessiond_stored_bytes_total":             dto.MetricType_COUNTER,
				"sessiond_compactions_total":              dto.MetricType_COUNTER,
				"sessiond_active_sessions":                dto.MetricType_GAUGE,
				"sessiond_recovery_duration_seconds":      dto.MetricType_GAUGE,
				"sessiond_journal_fsync_duration_seconds": dto.MetricType_HISTOGRAM,
				"sessiond_journal_commit_entries":         dto.MetricType_HISTOGRAM,
				"sessiond_append_duration_seconds":        dto.MetricType_HISTOGRAM,
				"sessiond_append_batch_entries":           dto.MetricType_HISTOGRAM,
				"sessiond_trash_copies":                   dto.MetricType_GAUGE,
				"sessiond_journal_segments":               dto.MetricType_GAUGE,
				"process_open_fds":                        dto.MetricType_GAUGE,
				"grpc_server_handled_total":               dto.MetricType_COUNTER, // WaitServing's health checks
				"grpc_server_handling_seconds":            dto.MetricType_HISTOGRAM,
			} {
				if err := before.Check(name, typ); err != nil {
					t.Error(err)
				}
			}
			if before.Value("process_open_fds") < 5 || before.Value("sessiond_journal_segments") < 1 {
				t.Errorf("open fds %v, log segments %v", before.Value("process_open_fds"), before.Value("sessiond_journal_segments"))
			}

			api := d.api()
			ctx := context.Background()
			ref := &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: t.TempDir()}, SessionId: uuid.NewString()}
			line := func() []byte { return []byte(`{"type":"user","uuid":"` + uuid.NewString() + `"}`) }
			const unary, batch = 3, 4 // three Appends of four entries
			for range unary {
				es := make([][]byte, batch)
				for i := range es {
					es[i] = line()
				}
				if _, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: ref, Entries: es}); err != nil {
					t.Fatal(err)
				}
			}
			// Two messages on one AppendStream, one entry each.
			st, err := api.AppendStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := st.Send(&sessiondv1.AppendRequest{Session: ref, Entries: [][]byte{line()}}); err != nil {
					t.Fatal(err)
				}
				if r, err := st.Recv(); err != nil || r.GetError() != nil {
					t.Fatalf("stream append: %v %v", err, r.GetError())
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err == nil {
				t.Fatal("the stream did not end")
			}
			// Refused: no project.
			_, err = api.Append(ctx, &sessiondv1.AppendRequest{Session: &sessiondv1.SessionRef{SessionId: uuid.NewString()}, Entries: [][]byte{line()}})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("append without a project: %v", err)
			}

			after := d.scrape(addr)
			const entries = unary*batch + 2
			delta := func(name string, labels ...string) float64 {
				return after.Value(name, labels...) - before.Value(name, labels...)
			}
			appendRPC := []string{"grpc_service", "sessiond.v1.Sessiond", "grpc_method", "Append"}
			for _, c := range []struct {
				what string
				got  float64
				want float64
			}{
				{"entries stored", delta("sessiond_entries_stored_total"), entries},
				{"append requests", delta("sessiond_appends_total"), unary + 2},
				{"appends timed (ok)", delta("sessiond_append_duration_seconds", "result", "ok"), unary + 2},
				{"appends timed (error)", delta("sessiond_append_duration_seconds", "result", "error"), 1},
				{"batches sized", delta("sessiond_append_batch_entries"), unary + 2},
				{"entries in the batches", after.Sum("sessiond_append_batch_entries") - before.Sum("sessiond_append_batch_entries"), entries},
				{"Append OK", delta("grpc_server_handled_total", append(appendRPC, "grpc_code", "OK")...), unary},
				{"Append InvalidArgument", delta("grpc_server_handled_total", append(appendRPC, "grpc_code", "InvalidArgument")...), 1},
				{"AppendStream messages received", delta("grpc_server_msg_received_total", "grpc_method", "AppendStream"), 2},
				{"AppendStream OK", delta("grpc_server_handled_total", "grpc_method", "AppendStream", "grpc_code", "OK"), 1},
				{"active sessions", after.Value("sessiond_active_sessions"), 1},
			} {
				if c.got != c.want {
					t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
				}
			}
			// Every acknowledged append waited for a sync; group commit may
			// put several in one.
			if n := delta("sessiond_journal_fsync_duration_seconds"); n < 1 || n > unary+2 {
				t.Errorf("fsyncs for %d appends: %v", unary+2, n)
			}
			if got := after.Sum("sessiond_journal_commit_entries") - before.Sum("sessiond_journal_commit_entries"); got != entries {
				t.Errorf("entries in the log's commits: %v, want %v", got, entries)
			}
			if after.Sum("sessiond_journal_fsync_duration_seconds") <= before.Sum("sessiond_journal_fsync_duration_seconds") {
				t.Error("the fsyncs took no time")
			}
			if delta("sessiond_stored_bytes_total") < entries*float64(len(line())) {
				t.Errorf("stored bytes grew by %v for %d entries", delta("sessiond_stored_bytes_total"), entries)
			}

			if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Fatalf("exit %d\n%s", code, d.LogTail(logTail))
			}
			if sock != "" {
				if _, err := os.Lstat(sock); !os.IsNotExist(err) {
					t.Errorf("the metrics socket is left after the daemon stopped: %v", err)
				}
			}
		})
	}
}

// An address other hosts could reach is refused before sessiond touches
// anything, with a message saying what is allowed; without the flag no
// metrics are served.
func TestMetricsListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "192.168.1.5:9464", "[::]:9464"} {
		d := newDaemon(t, "--metrics-listen", addr)
		if err := d.startNoWait(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.Exited():
		case <-time.After(30 * time.Second):
			t.Fatalf("sessiond --metrics-listen %s is still running", addr)
		}
		log := d.Log()
		if code := d.ExitCode(); code == 0 || !strings.Contains(log, "not a loopback address") || !strings.Contains(log, "127.0.0.1:PORT") {
			t.Fatalf("sessiond --metrics-listen %s: exit %d, output:\n%s", addr, code, log)
		}
		if _, err := os.Stat(d.socket); !os.IsNotExist(err) {
			t.Errorf("sessiond --metrics-listen %s made its gRPC socket before refusing: %v", addr, err)
		}
	}
	d := newDaemon(t)
	d.start()
	if strings.Contains(d.Log(), "serving metrics") {
		t.Errorf("metrics served without --metrics-listen:\n%s", d.LogTail(logTail))
	}
}
