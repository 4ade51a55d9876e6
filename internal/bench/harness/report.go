// Package harness is what every bench scenario shares: starting the
// sessiond binary on a folder of its own, reading the daemon's /proc
// figures (CPU, memory, I/O, descriptors), the entries the clients append,
// percentiles, and the report with its tables, targets and Markdown.
package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Report is everything a run measured.
type Report struct {
	Date      string      `json:"date"`
	Commit    string      `json:"commit,omitempty"`
	Machine   Machine     `json:"machine"`
	Daemon    DaemonInfo  `json:"sessiond"`
	Dir       string      `json:"dir"`
	Duration  string      `json:"duration_per_run"`
	Scenarios []*Scenario `json:"scenarios"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go"`
	Kernel    string `json:"kernel,omitempty"`
	FS        string `json:"filesystem,omitempty"`
}

// DaemonInfo describes the sessiond measured.
type DaemonInfo struct {
	Started  bool   `json:"started_by_bench"`
	Socket   string `json:"socket,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	Version  string `json:"version,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
	Root     string `json:"root,omitempty"`
}

// Scenario is a set of runs compared with each other.
type Scenario struct {
	Name    string    `json:"name"`
	Title   string    `json:"title"`
	Results []*Result `json:"results,omitempty"`
	// Table holds the measurements of the scenarios that are not
	// throughput runs (see extra.go).
	Table  *Table   `json:"table,omitempty"`
	Checks []Check  `json:"targets,omitempty"`
	Notes  []string `json:"notes,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// Check is one target, measured.
type Check struct {
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	// AtLeast: the target is a lower bound (value >= limit), else an
	// upper bound.
	AtLeast bool   `json:"at_least"`
	Note    string `json:"note,omitempty"`
}

func NewCheck(target string, v, limit float64, unit string, atLeast bool) Check {
	pass := v >= limit
	if !atLeast {
		pass = v <= limit
	}
	return Check{Target: target, Value: v, Limit: limit, Unit: unit, Pass: pass, AtLeast: atLeast}
}

// Failed reports whether any run failed or did not verify.
func (r *Report) Failed() error {
	var errs []error
	for _, s := range r.Scenarios {
		if s.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", s.Name, s.Error))
		}
		for _, x := range s.Results {
			if x.Error != "" {
				errs = append(errs, fmt.Errorf("%s / %s: %s", s.Name, x.Label, x.Error))
			}
			if x.Verified != nil && !*x.Verified {
				errs = append(errs, fmt.Errorf("%s / %s: verify: %s", s.Name, x.Label, x.VerifyError))
			}
		}
	}
	return errors.Join(errs...)
}

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHeader prints where and when the run happened.
func WriteHeader(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "sessiond-bench  %s  commit %s  %d CPUs  %s  kernel %s  fs %s\n", rep.Date, OrDash(rep.Commit),
		rep.Machine.CPUs, rep.Machine.GoVersion, OrDash(rep.Machine.Kernel), OrDash(rep.Machine.FS))
	if rep.Daemon.Pid != 0 {
		how := "running"
		if rep.Daemon.Started {
			how = "started by bench"
		}
		fmt.Fprintf(w, "sessiond %s pid %d (%s), state %s\n", OrDash(rep.Daemon.Version), rep.Daemon.Pid, how, rep.Daemon.StateDir)
	}
	fmt.Fprintf(w, "work folder %s, %s per run\n", rep.Dir, rep.Duration)
}

func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteScenario prints one scenario as a table.
func WriteScenario(w io.Writer, sc *Scenario) {
	fmt.Fprintf(w, "\n== %s: %s ==\n", sc.Name, strings.TrimPrefix(sc.Title, sc.Name+": "))
	if sc.Results == nil {
		if sc.Table != nil {
			WriteTable(w, sc.Table)
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		writeChecks(w, sc.Checks)
		if sc.Error != "" {
			fmt.Fprintf(w, "ERROR %s\n", sc.Error)
		}
		return
	}
	fmt.Fprintf(w, "%-46s %10s %7s %8s %8s %8s %8s %8s %6s %7s %7s %7s %7s %7s\n",
		"run", "entries/s", "MB/s", "p50 us", "p90 us", "p99 us", "max us", "syncs", "batch", "cpu s", "rss MB", "/(a)", "/(c)", "/(b)")
	for _, r := range sc.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%-46s ERROR %s\n", r.Label, r.Error)
			continue
		}
		syncs, batch, cpu, rss := "-", "-", "-", "-"
		if r.Syncs > 0 {
			syncs, batch = fmt.Sprint(r.Syncs), fmt.Sprintf("%.1f", r.EntriesPerSync)
		}
		if strings.HasPrefix(r.CPUOf, "sessiond") || strings.HasPrefix(r.CPUOf, "echo") {
			cpu = fmt.Sprintf("%.1f", r.CPUSeconds)
		} else if r.CPUOf != "" {
			cpu = fmt.Sprintf("%.1f*", r.CPUSeconds)
		}
		if r.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.PeakRSSBytes)/(1<<20))
		}
		fmt.Fprintf(w, "%-46s %10.0f %7.1f %8.0f %8.0f %8.0f %8.0f %8s %6s %7s %7s %7s %7s %7s\n",
			r.Label, r.EntriesPerSec, r.MBPerSec, r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max,
			syncs, batch, cpu, rss, ratio(r.RatioToNaive), ratio(r.RatioToCeiling), ratio(r.RatioToNoSync))
		if r.Verified != nil {
			if *r.Verified {
				fmt.Fprintf(w, "%-46s verified: %d acknowledged entries on disk\n", "", r.TotalAcked)
			} else {
				fmt.Fprintf(w, "%-46s VERIFY FAILED: %s\n", "", r.VerifyError)
			}
		}
	}
	for _, n := range sc.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	writeChecks(w, sc.Checks)
	fmt.Fprintf(w, "(cpu s: the server's (sessiond's, or the echo server's) user+sys during the run; * = the bench process itself, load generator included)\n")
}

func writeChecks(w io.Writer, checks []Check) {
	for _, c := range checks {
		verdict := "FAIL"
		if c.Pass {
			verdict = "PASS"
		}
		note := ""
		if c.Note != "" {
			note = " (" + c.Note + ")"
		}
		fmt.Fprintf(w, "target %-40s %s: %.1f %s vs %.1f%s\n", c.Target, verdict, c.Value, c.Unit, c.Limit, note)
	}
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	if x >= 10 {
		return fmt.Sprintf("%.0fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

// Latency holds percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	Max  float64 `json:"max_us"`
	Mean float64 `json:"mean_us"`
}

// Result is one measured run of one target.
type Result struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	Target   string `json:"target"`
	Clients  int    `json:"clients"`
	Sessions int    `json:"sessions"`
	Size     string `json:"size"`
	Batch    int    `json:"entries_per_call,omitempty"` // > 1: entries per append call

	Entries       uint64  `json:"entries"` // acknowledged during the measurement
	Bytes         uint64  `json:"bytes"`   // their lines, newline included
	Seconds       float64 `json:"seconds"`
	EntriesPerSec float64 `json:"entries_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"` // 10^6 bytes
	Latency       Latency `json:"latency"`    // per append call, as the client sees it

	// From the target's own counters (sessiond's Status; the in-process
	// targets count the same way), deltas over the measurement.
	Syncs          uint64  `json:"syncs,omitempty"`
	StoredEntries  uint64  `json:"stored_entries,omitempty"`
	Appends        uint64  `json:"appends,omitempty"`
	EntriesPerSync float64 `json:"entries_per_sync,omitempty"` // mean group-commit batch
	CPUSeconds     float64 `json:"cpu_seconds,omitempty"`
	CPUOf          string  `json:"cpu_of,omitempty"`
	CPUPerEntryUS  float64 `json:"cpu_per_entry_us,omitempty"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes,omitempty"`
	PeakRSSNote    string  `json:"peak_rss_note,omitempty"`
	WarmupEntries  uint64  `json:"warmup_entries"`
	SettleSeconds  float64 `json:"settle_seconds,omitempty"` // flush into the canonical files after the run
	Verified       *bool   `json:"verified,omitempty"`
	VerifyError    string  `json:"verify_error,omitempty"`
	Error          string  `json:"error,omitempty"`
	RatioToNaive   float64 `json:"ratio_to_a,omitempty"`
	RatioToCeiling float64 `json:"ratio_to_c,omitempty"`
	RatioToNoSync  float64 `json:"ratio_to_b,omitempty"`
	ProfileFile    string  `json:"cpu_profile,omitempty"`
	TotalAcked     uint64  `json:"total_acknowledged"`          // warm-up included: what verify compares with
	ClientAwake    bool    `json:"client_kept_awake,omitempty"` // measured with keepAwake (a diagnosis)
}

func LatencyOf(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	slices.Sort(ns)
	pct := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ns)))) - 1
		i = max(0, min(i, len(ns)-1))
		return float64(ns[i]) / 1e3
	}
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return Latency{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: float64(ns[len(ns)-1]) / 1e3, Mean: sum / float64(len(ns)) / 1e3}
}

// Table is a scenario's measurements when they are not throughput runs.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// WriteTable prints t with aligned columns.
func WriteTable(w io.Writer, t *Table) {
	width := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		width[i] = len(c)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) && len(c) > width[i] {
				width[i] = len(c)
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			if i < len(width) {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.Columns)
	for _, r := range t.Rows {
		line(r)
	}
}

// TargetDaemon is the Target of a Result measured on the sessiond binary
// over its socket: the rows the reports set apart from the baselines.
const TargetDaemon = "daemon"

// Measured reports whether every one of rs ran and acknowledged entries.
func Measured(rs ...*Result) bool {
	for _, r := range rs {
		if r == nil || r.Error != "" || r.Entries == 0 {
			return false
		}
	}
	return true
}
