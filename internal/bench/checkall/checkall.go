// Package checkall measures the daemon's memory while it checks a large
// store of transcripts and streams the problems it finds.
package checkall

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/bench/harness"
)

// The check scenario measures what `sessionctl check --all` of a large
// store costs the daemon: a store of 1,000,000 entries in 1,000
// transcripts, one line in ten damaged (100,000 problems, tens of MB of
// answer), written straight into transcript files before the daemon
// starts. The figure is the daemon's peak RSS (VmHWM, reset once the
// daemon is idle) over its idle RSS while it checks every transcript and
// streams the results to a client that reads them as they come. The
// target: within ~100 MiB of the idle daemon, whatever the size of the
// store and of its answer.

// Name is the check scenario's name.
const Name = "checkall"

// checkAllGrowth is the target: peak RSS over idle RSS, MiB.
const checkAllGrowth = 100

// Title describes the scenario in the report.
const Title = "check --all of a 1,000,000-entry store"

func Run(ctx context.Context, env *harness.Env) (*harness.Scenario, error) {
	entries := int(env.Scaled(1_000_000, 2000))
	transcripts := int(env.Scaled(1000, 4))
	per := max(entries/transcripts, 10)
	entries = per * transcripts
	projects := max(1, transcripts/100)
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/mebi) }
	sc := &harness.Scenario{Name: Name, Table: &harness.Table{
		Columns: []string{"step", "daemon rss MiB", "daemon peak MiB", "growth MiB", "limit MiB", "detail"}}}
	sc.Title = fmt.Sprintf("check --all of a %d-entry store (%d transcripts, one line in %d damaged)", entries, transcripts, damageEvery)

	dir := filepath.Join(env.Dir, "checkall")
	root := filepath.Join(dir, "root")
	rng := rand.New(rand.NewPCG(env.Seed, 7))
	t0 := time.Now()
	onDisk, wantProblems, err := writeStore(root, transcripts, per, projects, rng)
	if err != nil {
		return sc, err
	}
	env.Logf("[%s] wrote %d transcripts, %d entries (%.0f MB) in %v", Name, transcripts, entries, float64(onDisk)/1e6, time.Since(t0).Round(time.Millisecond))

	p, err := harness.StartDaemon(ctx, env.Sessiond, dir, env.SessiondArgs)
	if err != nil {
		return sc, err
	}
	defer func() {
		if p != nil {
			p.Stop(30 * time.Second)
		}
	}()
	pid := p.Cmd.Process.Pid
	c, err := client.Dial(p.Socket)
	if err != nil {
		return sc, err
	}
	defer c.Close()
	// Indexed, then idle: the baseline is what the daemon holds for the
	// store before anyone checks it.
	if _, _, err := c.ListSessions(ctx, client.ListOptions{Limit: 1}); err != nil {
		return sc, fmt.Errorf("list: %w", err)
	}
	time.Sleep(500 * time.Millisecond)
	idleRSS, idleHWM, err := harness.ProcMem(pid)
	if err != nil {
		return sc, err
	}
	sc.Table.Rows = append(sc.Table.Rows, []string{"daemon, store indexed, idle", mib(idleRSS), mib(idleHWM), "-", "-", "baseline"})
	if err := harness.ResetHWM(pid); err != nil {
		return sc, fmt.Errorf("reset the daemon's peak: %w", err)
	}

	t0 = time.Now()
	a, err := checkAll(ctx, c)
	took := time.Since(t0)
	if err != nil {
		return sc, fmt.Errorf("check --all: %w", err)
	}
	got, problems, messages, damaged, answer := a.transcripts, a.problems, a.messages, a.damaged, a.bytes
	_, peak, err := harness.ProcMem(pid)
	if err != nil {
		return sc, err
	}
	if got != transcripts || (env.Verify && problems != wantProblems) {
		return sc, fmt.Errorf("check --all answered for %d transcripts with %d problems; the store has %d with %d", got, problems, transcripts, wantProblems)
	}
	growth := peak - idleRSS
	sc.Table.Rows = append(sc.Table.Rows, []string{
		fmt.Sprintf("check --all, %d entries", entries), "-", mib(peak), mib(growth), fmt.Sprintf("%d.0", checkAllGrowth),
		fmt.Sprintf("%d transcripts (%d damaged), %d problems, %.1f MB of answer in %d messages, in %v",
			got, damaged, problems, float64(answer)/1e6, messages, took.Round(time.Millisecond))})
	ch := harness.NewCheck(fmt.Sprintf("daemon peak RSS over idle, check --all of %d entries", entries), float64(growth)/mebi, checkAllGrowth, "MiB", false)
	ch.Note = fmt.Sprintf("idle %.1f MiB, peak %.1f MiB; the answer was %.1f MB", float64(idleRSS)/mebi, float64(peak)/mebi, float64(answer)/1e6)
	sc.Checks = append(sc.Checks, ch)
	sc.Notes = append(sc.Notes, fmt.Sprintf(
		"store: %d transcripts of %d lines (%.0f MB) in %d projects, written before the daemon starts; every %dth line is not JSON (a problem each); "+
			"the client reads the stream as it comes and keeps nothing; peak = VmHWM reset once the daemon was idle",
		transcripts, per, float64(onDisk)/1e6, projects, damageEvery))
	err = p.Stop(30 * time.Second)
	p = nil
	if err != nil {
		return sc, err
	}
	return sc, os.RemoveAll(dir)
}

// writeCheckTranscript writes a transcript of n lines: chained user and
// assistant entries, every damageEvery-th line a line that is not JSON.
// It returns its size and the problems check finds in it.
func writeCheckTranscript(path, sid string, n, damageEvery int, rng *rand.Rand) (int64, int, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, 0, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, 0, err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	var size int64
	problems := 0
	parent := "null"
	for i := range n {
		var k int
		if i%damageEvery == damageEvery-1 {
			k, err = fmt.Fprintf(w, "not json: line %d of a transcript another program damaged\n", i+1)
			problems++
		} else {
			id := harness.NewUUID(rng)
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			k, err = fmt.Fprintf(w, `{"type":%q,"uuid":%q,"parentUuid":%s,"sessionId":%q,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":%q,"content":"entry %d"}}`+"\n",
				role, id, parent, sid, role, i)
			parent = `"` + id + `"`
		}
		if err != nil {
			f.Close()
			return 0, 0, err
		}
		size += int64(k)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, 0, err
	}
	return size, problems, f.Close()
}

const mebi = 1 << 20 // bytes in a MiB

// damageEvery: one line in this many is not JSON.
const damageEvery = 10

// writeStore writes the store's transcripts under root, before the daemon
// starts, every damageEvery-th line not JSON; it returns their bytes and
// problems.
func writeStore(root string, transcripts, per, projects int, rng *rand.Rand) (onDisk int64, problems int, err error) {
	for i := range transcripts {
		k := client.Session{ProjectKey: fmt.Sprintf("-sessiond-bench-check-p%02d", i%projects), ID: harness.NewUUID(rng)}
		n, p, err := writeCheckTranscript(harness.TranscriptPath(root, k), k.ID, per, damageEvery, rng)
		if err != nil {
			return onDisk, problems, err
		}
		onDisk += n
		problems += p
	}
	return onDisk, problems, nil
}

// answer is what a CheckAll stream held.
type answer struct {
	transcripts, problems, messages, damaged int
	bytes                                    int64
}

// checkAll reads the CheckAll stream as it comes, keeping nothing but the
// counts (a transcript's answer may span several messages).
func checkAll(ctx context.Context, c *client.Client) (answer, error) {
	var a answer
	more := false
	err := c.CheckAll(ctx, client.Session{}, func(m *sessiondv1.CheckResponse) error {
		if !more {
			a.transcripts++
			a.problems += int(m.GetProblemCount())
			if !m.GetClean() {
				a.damaged++
			}
		}
		more = m.GetMore()
		a.messages++
		a.bytes += int64(proto.Size(m))
		return nil
	})
	return a, err
}
