package testharness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape gets GET /metrics from addr, written as sessiond's
// --metrics-listen takes it (127.0.0.1:PORT, [::1]:PORT or unix:/path),
// and parses it with the Prometheus client library's text parser: what a
// Prometheus server would read.
func Scrape(ctx context.Context, addr string) (Families, error) {
	tr := &http.Transport{}
	url := "http://" + addr + "/metrics"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		url = "http://sessiond/metrics"
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("scrape %s: content type %q, want Prometheus' text format", addr, ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: parse: %w", addr, err)
	}
	return fams, nil
}

// Check returns an error unless the family name exists with type typ.
func (f Families) Check(name string, typ dto.MetricType) error {
	mf, ok := f[name]
	if !ok {
		return fmt.Errorf("no metric family %s", name)
	}
	if mf.GetType() != typ {
		return fmt.Errorf("%s is a %s, want a %s", name, mf.GetType(), typ)
	}
	return nil
}

// Find is the sample of family name whose labels include labels (name,
// value pairs), or nil.
func (f Families) Find(name string, labels ...string) *dto.Metric {
	mf := f[name]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		if hasLabels(m, labels) {
			return m
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Value is the value of the counter or gauge (the sample count of a
// histogram) of family name with labels; 0 when there is no such sample.
func (f Families) Value(name string, labels ...string) float64 {
	m := f.Find(name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Sum is the sum of the histogram of family name with labels; 0 when
// there is none.
func (f Families) Sum(name string, labels ...string) float64 {
	return f.Find(name, labels...).GetHistogram().GetSampleSum()
}
