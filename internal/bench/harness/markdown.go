package harness

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// The results section of BENCHMARKS.md lies between these two markers;
// `sessiond-bench --markdown BENCHMARKS.md` (what `make bench` runs)
// replaces what is between them and leaves the rest of the file alone.
const (
	mdBegin = "<!-- bench:results:begin (written by sessiond-bench --markdown; edits here are lost) -->"
	mdEnd   = "<!-- bench:results:end -->"
)

// UpdateMarkdown rewrites the results section of the file at path with rep.
// command is the command line that produced rep, printed with it.
func UpdateMarkdown(path string, rep *Report, command string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	i := bytes.Index(old, []byte(mdBegin))
	j := bytes.Index(old, []byte(mdEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no results section: add the lines %q and %q where the results go", path, mdBegin, mdEnd)
	}
	var b bytes.Buffer
	b.Write(old[:i])
	b.WriteString(mdBegin + "\n\n")
	WriteMarkdown(&b, rep, command)
	b.WriteString("\n")
	b.Write(old[j:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteMarkdown renders rep: a summary of every target, then each
// scenario's table.
func WriteMarkdown(w io.Writer, rep *Report, command string) {
	fmt.Fprintf(w, "Run of %s, commit `%s`: %d CPUs, %s/%s, %s, kernel %s, filesystem %s.\n\n",
		rep.Date, OrDash(rep.Commit), rep.Machine.CPUs, rep.Machine.GOOS, rep.Machine.GOARCH, rep.Machine.GoVersion,
		OrDash(rep.Machine.Kernel), OrDash(rep.Machine.FS))
	if command != "" {
		fmt.Fprintf(w, "```sh\n%s\n```\n\n", command)
	}
	fmt.Fprintf(w, "Throughput runs: %s each; sessiond %s.\n\n", rep.Duration, daemonLine(rep.Daemon))

	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | target | measured | limit | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, sc := range rep.Scenarios {
		if sc.Error != "" {
			fmt.Fprintf(w, "| %s | (not measured) | | | **ERROR**: %s |\n", sc.Name, mdCell(sc.Error))
		}
		for _, c := range sc.Checks {
			verdict := "**FAIL**"
			if c.Pass {
				verdict = "PASS"
			}
			cmp := "≥"
			if !c.AtLeast {
				cmp = "≤"
			}
			note := ""
			if c.Note != "" {
				note = " (" + mdCell(c.Note) + ")"
			}
			fmt.Fprintf(w, "| %s | %s | %s %s%s | %s %s %s | %s |\n", sc.Name, mdCell(c.Target), FmtNum(c.Value), c.Unit, note,
				cmp, FmtNum(c.Limit), c.Unit, verdict)
		}
	}
	for _, sc := range rep.Scenarios {
		fmt.Fprintf(w, "\n### %s: %s\n\n", sc.Name, mdCell(strings.TrimPrefix(sc.Title, sc.Name+": ")))
		if sc.Results != nil {
			writeResultsMD(w, sc)
		}
		if sc.Table != nil {
			writeTableMD(w, sc.Table)
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		if sc.Error != "" {
			fmt.Fprintf(w, "\n**Error:** %s\n", sc.Error)
		}
	}
}

func daemonLine(d DaemonInfo) string {
	if d.Pid == 0 {
		return "not used"
	}
	how := "running"
	if d.Started {
		how = "started by the tool on a temp folder of the same filesystem"
	}
	return fmt.Sprintf("%s (%s)", OrDash(d.Version), how)
}

func writeResultsMD(w io.Writer, sc *Scenario) {
	fmt.Fprintln(w, "| run | entries/s | MB/s | p50 µs | p90 µs | p99 µs | max µs | syncs | batch | server CPU s | RSS MB | /(a) | /(c) | verified |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range sc.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | **error**: %s | | | | | | | | | | | | |\n", mdCell(r.Label), mdCell(r.Error))
			continue
		}
		syncs, batch, cpu, rss := "", "", "", ""
		if r.Syncs > 0 {
			syncs, batch = fmt.Sprint(r.Syncs), fmt.Sprintf("%.1f", r.EntriesPerSync)
		}
		if strings.HasPrefix(r.CPUOf, "sessiond") || strings.HasPrefix(r.CPUOf, "echo") || strings.HasPrefix(r.CPUOf, "raw") {
			cpu = fmt.Sprintf("%.1f", r.CPUSeconds)
		}
		if r.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.PeakRSSBytes)/(1<<20))
		}
		ver := ""
		if r.Verified != nil {
			ver = "yes"
			if !*r.Verified {
				ver = "**NO**: " + mdCell(r.VerifyError)
			}
		}
		label := mdCell(r.Label)
		if r.Target == TargetDaemon {
			label = "**" + label + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
			label, FmtNum(r.EntriesPerSec), r.MBPerSec, r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max,
			syncs, batch, cpu, rss, mdRatio(r.RatioToNaive), mdRatio(r.RatioToCeiling), ver)
	}
	fmt.Fprintln(w)
}

func writeTableMD(w io.Writer, t *Table) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(mdCells(t.Columns), " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(t.Columns)))
	for _, r := range t.Rows {
		cells := mdCells(r)
		for len(cells) < len(t.Columns) {
			cells = append(cells, "")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

func mdCells(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = mdCell(s)
	}
	return out
}

// mdCell keeps a value from breaking its table row.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

func mdRatio(x float64) string {
	if x == 0 {
		return ""
	}
	return ratio(x)
}

// FmtNum prints a figure with thousands separators, with one decimal below
// 100.
func FmtNum(v float64) string {
	if v < 100 && v > -100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
