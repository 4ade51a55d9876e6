package metrics

import (
	"errors"
	"fmt"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/sessiond/sessiond/internal/journal"
)

// Buckets. Calls over a local socket take tens of microseconds to a few
// milliseconds, so the default buckets (5 ms to 10 s) would put nearly
// every call in the first one.
var (
	// latencyBuckets, in seconds: 50 us to 10 s, 1-2.5-5 steps.
	latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// fsyncBuckets, in seconds: from 25 us (a sync into a reused segment
	// on fast flash) to 10 s (a disk that stalls); etcd's start at 1 ms,
	// above what a sync costs on most disks here.
	fsyncBuckets = append([]float64{25e-6}, latencyBuckets...)
	// entryBuckets: 1 to 4096 entries, doubling.
	entryBuckets = prometheus.ExponentialBuckets(1, 2, 13)
	// byteBuckets: 256 B to 64 MiB, times four.
	byteBuckets = prometheus.ExponentialBuckets(256, 4, 10)
)

// Metrics holds sessiond's registry and the instruments the hot paths
// feed. A nil *Metrics is metrics turned off: every method is then a
// no-op, so callers need not check.
type Metrics struct {
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics

	appendOK, appendErr prometheus.Observer
	batchEntries        prometheus.Histogram
	commitEntries       prometheus.Histogram
	commitBytes         prometheus.Histogram
	fsync               prometheus.Histogram
	recovery            prometheus.Gauge
}

// New makes the registry: the Go runtime's and the process's collectors
// (open files, memory, CPU), the gRPC server's metrics and sessiond's
// own. It is a registry of its own, not the library's global default, so
// nothing another package registers there is served by accident.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.grpc = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
	appendSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sessiond_append_duration_seconds",
		Help:    "Time sessiond took to answer an Append, or one message of an AppendStream: checks, the session writer's queue, the journal's write and fdatasync. result is ok or error.",
		Buckets: latencyBuckets,
	}, []string{"result"})
	// Resolved once: no label lookup per append.
	m.appendOK = appendSeconds.WithLabelValues("ok")
	m.appendErr = appendSeconds.WithLabelValues("error")
	m.batchEntries = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sessiond_append_batch_entries",
		Help:    "Entries per Append request, or per AppendStream message, that succeeded.",
		Buckets: entryBuckets,
	})
	m.commitEntries = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sessiond_journal_commit_entries",
		Help:    "Entries per write of the journal: one write and one fdatasync carry what every session had waiting (group commit). Compaction markers are writes of 0 entries.",
		Buckets: append([]float64{0}, entryBuckets...),
	})
	m.commitBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sessiond_journal_commit_bytes",
		Help:    "Bytes per write of the journal: records, their frames, and the pad that ends a write on a 4 KiB block.",
		Buckets: byteBuckets,
	})
	m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sessiond_journal_fsync_duration_seconds",
		Help:    "Time of each fdatasync of the journal after a write that succeeded (as etcd's wal_fsync_duration_seconds): every append waits for one.",
		Buckets: fsyncBuckets,
	})
	m.recovery = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sessiond_recovery_duration_seconds",
		Help: "Seconds this start's recovery took before sessiond served: the journal and the journals read and checked.",
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sessiond_build_info",
		Help:        "Always 1; the version label is sessiond's.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, appendSeconds, m.batchEntries, m.commitEntries, m.commitBytes, m.fsync, m.recovery, build,
	)
	return m
}

// Registry is where everything is registered, for the handler and tests.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Register adds a collector of another part of sessiond (the PostgreSQL
// mirror's lag, say: see the package comment). Its names must not clash
// with those already there; a clash is an error, not a panic, so the
// caller can say which part brought it.
func (m *Metrics) Register(c prometheus.Collector) error {
	if m == nil {
		return nil
	}
	if err := m.reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			return fmt.Errorf("metrics: a collector with these names is registered already: %w", err)
		}
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// GaugeFunc registers a gauge whose value fn gives at each scrape: the
// simplest way to publish a figure kept elsewhere (fn must be cheap and
// safe to call from any goroutine). labels are constant labels; nil for
// none.
func (m *Metrics) GaugeFunc(name, help string, labels prometheus.Labels, fn func() float64) error {
	if m == nil {
		return nil
	}
	return m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}

// CounterFunc is GaugeFunc for a value that only grows (fn must never
// return less than before, except at a restart).
func (m *Metrics) CounterFunc(name, help string, labels prometheus.Labels, fn func() float64) error {
	if m == nil {
		return nil
	}
	return m.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}

// Interceptors count every gRPC call by method and status code and time
// it (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_handling_seconds, and the messages of streams). They must
// come first in the server's chain, so they see the status code the
// last interceptors made of the handlers' errors, and the calls the others
// refuse.
func (m *Metrics) Interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if m == nil {
		return nil, nil
	}
	return m.grpc.UnaryServerInterceptor(), m.grpc.StreamServerInterceptor()
}

// ObserveAppend records one Append (or AppendStream message) answered
// after took: its latency, and for one that succeeded its entries.
func (m *Metrics) ObserveAppend(took time.Duration, entries int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.appendErr.Observe(took.Seconds())
		return
	}
	m.appendOK.Observe(took.Seconds())
	m.batchEntries.Observe(float64(entries))
}

// ObserveCommit records one durable write of the journal; it is
// journal.Options.OnCommit (through writer.Config.JournalOnCommit).
func (m *Metrics) ObserveCommit(c journal.Commit) {
	if m == nil {
		return
	}
	m.commitEntries.Observe(float64(c.Entries))
	m.commitBytes.Observe(float64(c.Bytes))
	m.fsync.Observe(c.Sync.Seconds())
}

// SetRecovery records how long this start's recovery took.
func (m *Metrics) SetRecovery(took time.Duration) {
	if m == nil {
		return
	}
	m.recovery.Set(took.Seconds())
}
