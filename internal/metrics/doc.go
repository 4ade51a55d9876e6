// Package metrics serves sessiond's metrics in Prometheus' format, only
// when asked (sessiond --metrics-listen), only on the loopback interface
// or a Unix socket (ParseAddress, Listen): the endpoint has no
// authentication.
//
// It has a registry of its own (not client_golang's global default) with:
//
//   - the Go runtime's and the process's collectors: go_*, and process_*
//     among which process_open_fds and process_max_fds;
//   - the gRPC server's metrics from go-grpc-middleware's prometheus
//     provider, by method and status code: grpc_server_started_total,
//     grpc_server_handled_total{grpc_code}, grpc_server_msg_received_total,
//     grpc_server_msg_sent_total and the grpc_server_handling_seconds
//     histogram (Interceptors, first in the server's chain);
//   - histograms fed on the hot paths, each an atomic add or two:
//     sessiond_append_duration_seconds{result} and
//     sessiond_append_batch_entries (ObserveAppend, per Append or
//     AppendStream message, from the server), sessiond_journal_commit_entries,
//     sessiond_journal_commit_bytes and sessiond_journal_fsync_duration_seconds
//     (ObserveCommit: the journal's journal.Options.OnCommit; wal does
//     not import this package);
//   - sessiond_recovery_duration_seconds (SetRecovery) and
//     sessiond_build_info{version};
//   - the counters and gauges Status reports, read from the session
//     writers at each scrape (NewStatsCollector, stats.go), so they cost
//     the appends nothing: entries and bytes stored, compactions, active
//     sessions, replay and recovery, transcript lag, the ballast, the
//     journal's segments and retention, the trash.
//
// # Adding metrics from another part of sessiond
//
// A part the daemon starts (the PostgreSQL mirror, say) publishes its own
// figures through the *Metrics the daemon made, which is nil when metrics
// are off (every method is then a no-op):
//
//	met.GaugeFunc("sessiond_mirror_lag_entries", "Entries stored locally and not yet in PostgreSQL.", nil,
//		func() float64 { return float64(mirror.Lag().Entries) })
//
// or, for several figures read together or labelled series, a
// prometheus.Collector of its own:
//
//	if err := met.Register(mirror.Collector()); err != nil { ... }
//
// Names start with sessiond_ and end with their unit (_seconds, _bytes,
// _entries; _total for counters), as Prometheus' naming rules say; the
// mirror's would be sessiond_mirror_lag_entries, sessiond_mirror_lag_bytes,
// sessiond_mirror_lag_seconds (the age of the oldest entry not mirrored)
// and sessiond_mirror_errors_total. Register before the first scrape
// where possible; a name registered twice is an error.
package metrics
