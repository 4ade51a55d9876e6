package e2e

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestMirrorMetrics: the mirror's lag and errors are scraped with the
// client library's parser: nothing behind while PostgreSQL answers; while
// it is stopped, the entries appended show as lag (entries, bytes, age)
// and the errors count up; after it is back the lag drains to zero.
func TestMirrorMetrics(t *testing.T) {
	t.Parallel()
	pg, dsn := startPostgres(t)
	d := mirrorDaemon(t, dsn, "--metrics-listen", "127.0.0.1:0")
	d.start()
	addr := d.metricsAddr()
	c := d.client()
	defer c.Close()
	ctx := context.Background()
	s := mirrorSession("")
	if _, err := c.Append(ctx, s, mirrorEntry(1), mirrorEntry(2)); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, d, 30*time.Second) // connected: the table is made
	waitRows(t, dsn, s, 2)
	waitMirrored(t, d, 30*time.Second)
	f := d.scrape(addr)
	for name, typ := range map[string]dto.MetricType{"sessiond_mirror_lag_entries": dto.MetricType_GAUGE, "sessiond_mirror_lag_bytes": dto.MetricType_GAUGE,
		"sessiond_mirror_lag_seconds": dto.MetricType_GAUGE, "sessiond_mirror_connected": dto.MetricType_GAUGE, "sessiond_mirror_errors_total": dto.MetricType_COUNTER} {
		if err := f.Check(name, typ); err != nil {
			t.Fatal(err)
		}
	}
	if f.Value("sessiond_mirror_lag_entries") != 0 || f.Value("sessiond_mirror_lag_seconds") != 0 || f.Value("sessiond_mirror_connected") != 1 {
		t.Fatalf("caught up: lag %v entries, %v s, connected %v", f.Value("sessiond_mirror_lag_entries"), f.Value("sessiond_mirror_lag_seconds"), f.Value("sessiond_mirror_connected"))
	}
	errsBefore := f.Value("sessiond_mirror_errors_total")

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.Append(ctx, s, mirrorEntry(10+i)); err != nil {
			t.Fatalf("append while PostgreSQL is down: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		f = d.scrape(addr)
		if f.Value("sessiond_mirror_lag_entries") == 5 && f.Value("sessiond_mirror_lag_bytes") > 0 && f.Value("sessiond_mirror_lag_seconds") > 0 &&
			f.Value("sessiond_mirror_errors_total") > errsBefore && f.Value("sessiond_mirror_connected") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL down: lag %v entries, %v bytes, %v s; errors %v (before %v); connected %v",
				f.Value("sessiond_mirror_lag_entries"), f.Value("sessiond_mirror_lag_bytes"), f.Value("sessiond_mirror_lag_seconds"),
				f.Value("sessiond_mirror_errors_total"), errsBefore, f.Value("sessiond_mirror_connected"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitRows(t, dsn, s, 7)
	deadline = time.Now().Add(30 * time.Second)
	for {
		f = d.scrape(addr)
		if f.Value("sessiond_mirror_lag_entries") == 0 && f.Value("sessiond_mirror_lag_seconds") == 0 && f.Value("sessiond_mirror_connected") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL back: lag %v entries, %v s", f.Value("sessiond_mirror_lag_entries"), f.Value("sessiond_mirror_lag_seconds"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
