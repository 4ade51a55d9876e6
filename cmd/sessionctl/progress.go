package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
	"google.golang.org/grpc/metadata"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/progress"
)

// pollEvery is how often a long call's progress is asked for.
const pollEvery = 200 * time.Millisecond

// progressOn decides whether to draw progress: --progress always or never,
// else (auto) only on a terminal and never with --json, whose readers are
// programs.
func progressOn(mode string, json, terminal bool) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	return terminal && !json
}

func (g *globals) progress() bool { return progressOn(g.progressMode, g.json, g.errTerminal) }

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newBar draws a bar on stderr; unit "bytes" shows sizes.
func (g *globals) newBar(total int64, label, unit string) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(g.errOut),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(g.errOut) }),
	}
	if unit == "bytes" {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionSetItsString(unit))
	}
	if total <= 0 {
		total = -1 // a spinner until the total is known
	}
	return progressbar.NewOptions64(total, opts...)
}

// withProgress runs call, a long call to the daemon, and meanwhile draws
// how far the daemon has got with it: the call carries an operation id, and
// Status reports that operation's progress. final, called after the call,
// gives the last count when the daemon finished before being asked.
func (g *globals) withProgress(ctx context.Context, c *client.Client, label string, call func(ctx context.Context) error, final func() (done int64, unit string)) error {
	if !g.progress() {
		return call(ctx)
	}
	id := uuid.NewString()
	ctx = metadata.AppendToOutgoingContext(ctx, progress.MetadataKey, id)
	var bar *progressbar.ProgressBar
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			pctx, cancel := context.WithTimeout(ctx, pollEvery)
			st, err := c.Status(pctx)
			cancel()
			if err != nil {
				continue
			}
			for _, op := range st.GetOperations() {
				if op.GetId() != id {
					continue
				}
				if bar == nil {
					bar = g.newBar(int64(op.GetTotal()), label, op.GetUnit())
				}
				if total := int64(op.GetTotal()); total > 0 && total != bar.GetMax64() {
					bar.ChangeMax64(total)
				}
				bar.Set64(int64(op.GetDone()))
			}
		}
	}()
	err := call(ctx)
	close(stop)
	<-polled
	if err != nil {
		if bar != nil {
			fmt.Fprintln(g.errOut)
		}
		return err
	}
	if bar == nil && final != nil {
		done, unit := final()
		bar = g.newBar(done, label, unit)
	}
	if bar != nil {
		bar.Finish()
	}
	return nil
}

// progressWriter counts what passes through it into a bar.
type progressWriter struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.bar.Add(n)
	return n, err
}
