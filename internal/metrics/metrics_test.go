package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/testharness"
	"github.com/sessiond/sessiond/internal/trash"
	"github.com/sessiond/sessiond/internal/writer"
)

type fakeSource struct {
	mu    sync.Mutex
	st    writer.Stats
	trash trash.Usage
}

func (f *fakeSource) Stats() writer.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeSource) Usage() trash.Usage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trash
}

// serve starts m's endpoint on addr (as --metrics-listen takes it) and
// returns the address to scrape.
func serve(t *testing.T, m *Metrics, addr string) string {
	t.Helper()
	a, err := ParseAddress(addr)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(a)
	if err != nil {
		t.Fatal(err)
	}
	srv := m.Serve(ln, nil)
	t.Cleanup(func() {
		if err := srv.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return Address{Network: a.Network, Addr: ln.Addr().String()}.String()
}

func scrape(t *testing.T, addr string) testharness.Families {
	t.Helper()
	f, err := testharness.Scrape(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The endpoint serves every family with its type, over TCP on the
// loopback and over a Unix socket, and the values move with what the hot
// paths and the writers report.
func TestScrape(t *testing.T) {
	for _, tc := range []struct{ name, addr string }{
		{"tcp", "127.0.0.1:0"},
		{"unix", "unix:" + filepath.Join(t.TempDir(), "run", "metrics.sock")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New("1.2.3-test")
			src := &fakeSource{}
			if err := m.Register(NewStatsCollector(src, src)); err != nil {
				t.Fatal(err)
			}
			addr := serve(t, m, tc.addr)
			if path, ok := strings.CutPrefix(addr, "unix:"); ok {
				fi, err := os.Stat(path)
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("socket %s: %v, mode %v; want 0600", path, err, fi.Mode())
				}
			}
			before := scrape(t, addr)
			for name, typ := range map[string]dto.MetricType{
				"sessiond_append_duration_seconds":        dto.MetricType_HISTOGRAM,
				"sessiond_append_batch_entries":           dto.MetricType_HISTOGRAM,
				"sessiond_journal_commit_entries":         dto.MetricType_HISTOGRAM,
				"sessiond_journal_commit_bytes":           dto.MetricType_HISTOGRAM,
				"sessiond_journal_fsync_duration_seconds": dto.MetricType_HISTOGRAM,
				"sessiond_entries_stored_total":           dto.MetricType_COUNTER,
				"sessiond_stored_bytes_total":             dto.MetricType_COUNTER,
				"sessiond_compactions_total":              dto.MetricType_COUNTER,
				"sessiond_active_sessions":                dto.MetricType_GAUGE,
				"sessiond_recovery_duration_seconds":      dto.MetricType_GAUGE,
				"sessiond_transcript_lag_bytes":           dto.MetricType_GAUGE,
				"sessiond_journal_retained_bytes":         dto.MetricType_GAUGE,
				"sessiond_trash_bytes":                    dto.MetricType_GAUGE,
				"sessiond_build_info":                     dto.MetricType_GAUGE,
				"process_open_fds":                        dto.MetricType_GAUGE,
				"go_goroutines":                           dto.MetricType_GAUGE,
			} {
				if err := before.Check(name, typ); err != nil {
					t.Error(err)
				}
			}
			if before.Value("sessiond_build_info", "version", "1.2.3-test") != 1 {
				t.Errorf("build info: %v", before["sessiond_build_info"])
			}
			if before.Value("process_open_fds") < 3 {
				t.Errorf("process_open_fds %v", before.Value("process_open_fds"))
			}
			if _, ok := before["sessiond_journal_oldest_retained_timestamp_seconds"]; ok {
				t.Error("the oldest retained segment's time is served while none is retained")
			}

			// The hot paths' instruments.
			m.ObserveAppend(2*time.Millisecond, 5, nil)
			m.ObserveAppend(3*time.Millisecond, 4, nil)
			m.ObserveAppend(time.Millisecond, 9, errors.New("refused"))
			m.ObserveCommit(journal.Commit{Entries: 9, Bytes: 700, Sync: 4 * time.Millisecond})
			m.SetRecovery(1500 * time.Millisecond)
			// The writers' counters, read at the scrape.
			retained := time.Unix(1_700_000_000, 0)
			src.mu.Lock()
			src.st.EntriesStored, src.st.JournalBytes, src.st.Compactions, src.st.ActiveSessions = 9, 700, 2, 3
			src.st.Disk.LagBytes, src.st.RetainedBytes, src.st.OldestRetained = 50, 4096, retained
			src.trash = trash.Usage{Copies: 1, Bytes: 123}
			src.mu.Unlock()

			f := scrape(t, addr)
			for _, c := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"sessiond_append_duration_seconds", []string{"result", "ok"}, 2},
				{"sessiond_append_duration_seconds", []string{"result", "error"}, 1},
				{"sessiond_append_batch_entries", nil, 2}, // the refused one has no batch
				{"sessiond_journal_commit_entries", nil, 1},
				{"sessiond_journal_fsync_duration_seconds", nil, 1},
				{"sessiond_recovery_duration_seconds", nil, 1.5},
				{"sessiond_entries_stored_total", nil, 9},
				{"sessiond_stored_bytes_total", nil, 700},
				{"sessiond_compactions_total", nil, 2},
				{"sessiond_active_sessions", nil, 3},
				{"sessiond_transcript_lag_bytes", nil, 50},
				{"sessiond_journal_retained_bytes", nil, 4096},
				{"sessiond_journal_oldest_retained_timestamp_seconds", nil, 1_700_000_000},
				{"sessiond_trash_copies", nil, 1},
				{"sessiond_trash_bytes", nil, 123},
			} {
				if got := f.Value(c.name, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			for _, c := range []struct {
				name string
				want float64
			}{
				{"sessiond_append_batch_entries", 9},
				{"sessiond_journal_commit_entries", 9},
				{"sessiond_journal_commit_bytes", 700},
				{"sessiond_journal_fsync_duration_seconds", 0.004},
			} {
				if got := f.Sum(c.name); got != c.want {
					t.Errorf("sum of %s = %v, want %v", c.name, got, c.want)
				}
			}
		})
	}
}

// The gRPC interceptors count calls by method and status code.
func TestInterceptorsCountCallsByCode(t *testing.T) {
	m := New("test")
	unary, stream := m.Interceptors()
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	ln := bufconn.Listen(1 << 20)
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient("passthrough:///buf", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for range 2 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("check of an unknown service: %v", err)
	}
	f := scrape(t, serve(t, m, "127.0.0.1:0"))
	method := []string{"grpc_service", "grpc.health.v1.Health", "grpc_method", "Check"}
	if got := f.Value("grpc_server_handled_total", append(method, "grpc_code", "OK")...); got != 2 {
		t.Errorf("handled OK: %v", got)
	}
	if got := f.Value("grpc_server_handled_total", append(method, "grpc_code", "NotFound")...); got != 1 {
		t.Errorf("handled NotFound: %v", got)
	}
	if err := f.Check("grpc_server_handling_seconds", dto.MetricType_HISTOGRAM); err != nil {
		t.Error(err)
	}
	if got := f.Value("grpc_server_handling_seconds", method...); got != 3 {
		t.Errorf("handling time observed %v times, want 3", got)
	}
}

func TestParseAddress(t *testing.T) {
	for _, ok := range []struct{ in, network, addr string }{
		{"127.0.0.1:9464", "tcp", "127.0.0.1:9464"},
		{"127.0.0.2:0", "tcp", "127.0.0.2:0"},
		{"[::1]:9464", "tcp", "[::1]:9464"},
		{"localhost:9464", "tcp", "localhost:9464"},
		{"unix:/run/sessiond/metrics.sock", "unix", "/run/sessiond/metrics.sock"},
	} {
		a, err := ParseAddress(ok.in)
		if err != nil || a.Network != ok.network || a.Addr != ok.addr {
			t.Errorf("ParseAddress(%q) = %+v, %v", ok.in, a, err)
		}
	}
	if a, err := ParseAddress("unix:m.sock"); err != nil || !filepath.IsAbs(a.Addr) {
		t.Errorf("a relative socket path: %+v, %v; want it made absolute", a, err)
	}
	for _, in := range []string{"0.0.0.0:9464", ":9464", "[::]:9464", "192.168.1.5:9464", "10.0.0.1:80", "example.com:9464", "[fe80::1]:9464"} {
		_, err := ParseAddress(in)
		if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("ParseAddress(%q): %v; want it refused as not loopback", in, err)
			continue
		}
		if !strings.Contains(err.Error(), "127.0.0.1:PORT") {
			t.Errorf("the refusal does not say what is allowed: %v", err)
		}
	}
	for _, in := range []string{"9464", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1", "unix:"} {
		if _, err := ParseAddress(in); err == nil || errors.Is(err, ErrNotLoopback) {
			t.Errorf("ParseAddress(%q): %v; want a malformed address refused", in, err)
		}
	}
}

// Listen checks where it ended up too, whatever ParseAddress let through.
func TestListenRefusesNonLoopback(t *testing.T) {
	ln, err := Listen(Address{Network: "tcp", Addr: "0.0.0.0:0"})
	if !errors.Is(err, ErrNotLoopback) {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("listen on every interface: %v", err)
	}
}

// A live metrics socket is left alone, with a message naming the flag.
func TestListenUnixInUse(t *testing.T) {
	a, err := ParseAddress("unix:" + filepath.Join(t.TempDir(), "m.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(a); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("second listen on a live socket: %v", err)
	}
}

// Other parts of sessiond add their figures; a name twice is an error.
func TestRegisterExtra(t *testing.T) {
	m := New("test")
	lag := 0.0
	var mu sync.Mutex
	if err := m.GaugeFunc("sessiond_test_lag_entries", "test", nil, func() float64 { mu.Lock(); defer mu.Unlock(); return lag }); err != nil {
		t.Fatal(err)
	}
	if err := m.CounterFunc("sessiond_test_errors_total", "test", prometheus.Labels{"code": "Unavailable"}, func() float64 { return 4 }); err != nil {
		t.Fatal(err)
	}
	if err := m.GaugeFunc("sessiond_test_lag_entries", "again", nil, func() float64 { return 0 }); err == nil {
		t.Error("a name registered twice was taken")
	}
	if err := m.Register(NewStatsCollector(&fakeSource{}, &fakeSource{})); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(NewStatsCollector(&fakeSource{}, &fakeSource{})); err == nil {
		t.Error("the stats collector registered twice was taken")
	}
	addr := serve(t, m, "127.0.0.1:0")
	mu.Lock()
	lag = 42
	mu.Unlock()
	f := scrape(t, addr)
	if err := f.Check("sessiond_test_lag_entries", dto.MetricType_GAUGE); err != nil {
		t.Fatal(err)
	}
	if got := f.Value("sessiond_test_lag_entries"); got != 42 {
		t.Errorf("gauge func: %v", got)
	}
	if got := f.Value("sessiond_test_errors_total", "code", "Unavailable"); got != 4 {
		t.Errorf("counter func: %v", got)
	}
}

// Metrics off is a nil *Metrics: every method does nothing.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveAppend(time.Second, 1, nil)
	m.ObserveCommit(journal.Commit{Entries: 1})
	m.SetRecovery(time.Second)
	if err := m.Register(NewStatsCollector(&fakeSource{}, &fakeSource{})); err != nil {
		t.Fatal(err)
	}
	if err := m.GaugeFunc("x", "x", nil, func() float64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	if u, s := m.Interceptors(); u != nil || s != nil {
		t.Fatal("interceptors without metrics")
	}
	if m.Registry() != nil {
		t.Fatal("a registry without metrics")
	}
	var srv *Server
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = fmt.Sprint(m)
}
