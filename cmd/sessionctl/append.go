package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/transcript"
)

// maxLineBytes is the largest line sessionctl sends: a gRPC message
// carries one batch, and sessiond takes messages up to --max-message-bytes
// (64 MiB by default; sessionctl's own limit is the same).
const maxLineBytes = 64 << 20

// checkEntryLine refuses what sessiond would refuse anyway, with the
// reason, before anything is sent: a line that is not one JSON object, or
// one too large to send.
func checkEntryLine(line []byte) error {
	if len(line) > maxLineBytes {
		return fmt.Errorf("the line is %s, over the %s a message to sessiond may carry (sessiond --max-message-bytes); entries over sessiond --max-entry-bytes (32 MiB by default) are refused anyway",
			humanBytes(uint64(len(line))), humanBytes(maxLineBytes))
	}
	_, err := transcript.Normalize(line, 0)
	return err
}

// appendBatchBytes keeps each atomic batch well under the daemon's message
// limit.
const appendBatchBytes = 16 << 20

// defaultResendWait is how long append keeps sending a batch again, when
// its answer was lost or sessiond could not take it, unless --wait says
// otherwise: long enough for a daemon that was killed to be restarted
// (systemd's RestartSec and a replay), short enough that a script learns
// soon that it is not coming back.
const defaultResendWait = 10 * time.Second

// maxBatchIDFlag leaves room in sessiond's 128 bytes for the suffix that
// names the batches after the first (".2", ".3", ...).
const maxBatchIDFlag = 100

// sessiondBatchMemory is how long sessiond remembers a batch id (at
// least), as its API documents.
const sessiondBatchMemory = "10 minutes"

func appendCmd(g *globals) *cobra.Command {
	a := &appender{g: g}
	c := &cobra.Command{
		Use:   "append --cwd DIR --session ID [--subpath P] [--batch-id ID] < entries.jsonl",
		Short: "Append JSONL entries read from stdin to a session",
		Long: `Reads one JSON object per line from stdin and stores them through sessiond.
Lines are sent in batches of up to 16 MiB; each batch is stored atomically
and carries a batch id (a new UUID, or --batch-id), which sessiond stores
at most once. Entries whose uuid the session already holds are reported as
duplicates.

When the answer to a batch is lost (the connection broke, sessiond stopped
or was killed), append sends the same batch again with the same batch id
until sessiond answers, for up to --wait (10s when not given): a batch
sessiond had stored is answered as already stored, not stored twice. If it
still cannot tell, it says so, names the batch id and prints the command
that sends the rest again safely.`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error { return a.validate(cmd) },
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
			a.c, a.cmd = c, cmd
			return a.run(cmd.Context())
		}),
	}
	a.sf.add(c)
	c.Flags().StringVar(&a.id, "session", "", "the session id: a UUID, or a name such as sess-1 (1-128 bytes of [a-z0-9._-]; only UUID-named sessions are listed by Claude Code)")
	c.Flags().StringVar(&a.batchID, "batch-id", "", "the first batch's id, to send again a batch whose outcome was unknown (later batches take ID.2, ID.3, ...); a new UUID per batch by default")
	return c
}

// appender is one run of append.
type appender struct {
	g       *globals
	c       *client.Client
	cmd     *cobra.Command
	sf      sessionFlags
	id      string // --session
	batchID string // --batch-id
	s       client.Session

	batches int // batches begun
	// storedTo is the stdin line of the last entry of the last batch
	// stored: every batch before is stored too (append stops at the
	// first that is not).
	storedTo int
	// reached is set once this run knows a daemon serves the socket: a
	// failed connection after that is a daemon restarting, worth waiting
	// for, where before it is no daemon at all (fail at once, as every
	// command does without --wait).
	reached bool
}

// batch is a set of stdin lines sent as one atomic append.
type batch struct {
	id       string
	entries  [][]byte
	from, to int // the stdin lines of its first and last entry
	size     int
}

func (a *appender) validate(cmd *cobra.Command) error {
	if a.id == "" {
		return usageErr("--session is required")
	}
	if a.sf.cwd == "" && a.sf.project == "" {
		return usageErr("--cwd (or --project) is required: sessiond files the session under that project")
	}
	if cmd.Flags().Changed("batch-id") {
		ok := len(a.batchID) > 0 && len(a.batchID) <= maxBatchIDFlag
		for i := 0; i < len(a.batchID); i++ {
			if c := a.batchID[i]; c < 0x21 || c > 0x7e {
				ok = false
			}
		}
		if !ok {
			return usageErr(fmt.Sprintf("--batch-id is 1-%d printable ASCII characters without spaces (a UUID is best), not %q", maxBatchIDFlag, a.batchID))
		}
	}
	return nil
}

func (a *appender) run(ctx context.Context) error {
	a.s = a.sf.session(a.id)
	// withClient waited for the daemon to serve when --wait was given.
	a.reached = a.g.wait > 0
	done := make(chan struct{})
	defer close(done)
	lines := readLines(a.g.in, done)
	var b batch
	for {
		var l inputLine
		select {
		case <-ctx.Done():
			// Reading stdin (a terminal, a pipe) does not end with the
			// context; nothing of b was sent.
			return a.interrupted()
		case l = <-lines:
		}
		if l.err == io.EOF {
			if len(b.entries) == 0 && a.batches == 0 {
				return fmt.Errorf("no entries on stdin (%s read): nothing was appended; give one JSON object per line", count(l.no, "line"))
			}
			break
		}
		if l.err != nil {
			return fmt.Errorf("read stdin after line %d: %w%s", l.no, l.err, a.storedNote())
		}
		// Checked here, so a mistake is named by its stdin line, before
		// anything of its batch is sent.
		if err := checkEntryLine(l.text); err != nil {
			return exitWith(1, fmt.Errorf("stdin line %d: %w%s", l.no, err, a.storedNote()))
		}
		if len(b.entries) > 0 && b.size+len(l.text) > appendBatchBytes {
			if err := a.send(ctx, &b); err != nil {
				return err
			}
			b = batch{}
		}
		if len(b.entries) == 0 {
			b.from = l.no
		}
		b.entries = append(b.entries, l.text)
		b.to = l.no
		b.size += len(l.text)
	}
	if len(b.entries) == 0 {
		return nil
	}
	return a.send(ctx, &b)
}

// inputLine is one non-blank stdin line, or the end of stdin (err set;
// no is then the number of lines read).
type inputLine struct {
	no   int
	text []byte
	err  error
}

// readLines reads stdin on a goroutine of its own, so that an interrupt
// does not wait for the next line.
func readLines(in io.Reader, done <-chan struct{}) <-chan inputLine {
	out := make(chan inputLine)
	go func() {
		r := bufio.NewReaderSize(in, 1<<20)
		no := 0
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				no++
				if t := bytes.TrimSpace(line); len(t) > 0 {
					select {
					case out <- inputLine{no: no, text: t}:
					case <-done:
						return
					}
				}
			}
			if err != nil {
				select {
				case out <- inputLine{no: no, err: err}:
				case <-done:
				}
				return
			}
		}
	}()
	return out
}

// nextBatchID names the next batch: --batch-id for the first, then
// --batch-id.2, .3, ... so that sending the same input again with the same
// --batch-id names every batch as before; a new UUID each without it.
func (a *appender) nextBatchID() string {
	a.batches++
	switch {
	case a.batchID == "":
		return uuid.NewString()
	case a.batches == 1:
		return a.batchID
	}
	return a.batchID + "." + strconv.Itoa(a.batches)
}

// send stores b, sending it again with the same batch id while sessiond
// cannot be reached or its answer is lost, for up to the resend wait.
func (a *appender) send(ctx context.Context, b *batch) error {
	b.id = a.nextBatchID()
	var lost error // the first failure after which b may be stored
	var until time.Time
	noted := false
	pause := 100 * time.Millisecond
	for {
		resp, err := a.c.AppendBatch(ctx, a.s, b.id, b.entries...)
		if err == nil {
			a.reached = true
			a.storedTo = b.to
			return a.g.printAppend(resp, b.id)
		}
		if lost == nil && errors.Is(err, client.ErrOutcomeUnknown) {
			lost = err
			a.reached = true
		}
		if ctx.Err() != nil {
			return a.failed(b, lost, err, "interrupted")
		}
		if !a.resendable(err, lost != nil) {
			return a.failed(b, lost, err, "")
		}
		wait := a.resendWait()
		if until.IsZero() {
			until = time.Now().Add(wait)
		}
		if !noted {
			noted = true
			what := "sending it again"
			if lost != nil {
				what = "sending it again with the same batch id (a batch sessiond already stored is not stored twice)"
			}
			fmt.Fprintf(a.g.errOut, "sessionctl: %s (batch %s): %s; %s for up to %v\n", b.lines(), b.id, causeText(err), what, wait)
		}
		if time.Now().After(until) {
			return a.failed(b, lost, err, fmt.Sprintf("sending it again did not succeed within %v", wait))
		}
		select {
		case <-ctx.Done():
			return a.failed(b, lost, err, "interrupted")
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// resendable reports whether a batch that failed with err is worth
// sending again: its answer was lost, or sessiond could not take it now
// (restarting, draining, not listening for a moment). A socket served by
// another user, or a refusal, will not change.
func (a *appender) resendable(err error, lost bool) bool {
	var ue *client.UntrustedSocketError
	if errors.As(err, &ue) {
		return false
	}
	if errors.Is(err, client.ErrOutcomeUnknown) {
		return true
	}
	if status.Code(err) != codes.Unavailable {
		return false
	}
	var de *client.DialError
	return lost || a.reached || !errors.As(err, &de)
}

func (a *appender) resendWait() time.Duration {
	if a.g.wait > 0 {
		return a.g.wait
	}
	return defaultResendWait
}

// interrupted is the error of an interrupt while no batch was in flight.
func (a *appender) interrupted() error {
	if a.storedTo == 0 {
		return errors.New("interrupted: nothing was stored")
	}
	return fmt.Errorf("interrupted: stdin lines 1-%d were stored, nothing after them was sent", a.storedTo)
}

// storedNote is what a failure's message adds about the batches stored
// before it.
func (a *appender) storedNote() string {
	if a.storedTo == 0 {
		return ""
	}
	return fmt.Sprintf(" (stdin lines 1-%d were stored before it)", a.storedTo)
}

// failed is the error of batch b: last is the latest attempt's error, lost
// the one after which b may have been stored (nil: b was not stored), why
// what ended the attempts when it was not last's answer.
func (a *appender) failed(b *batch, lost, last error, why string) error {
	e := &batchError{b: b, lost: lost, last: last, why: why, storedTo: a.storedTo}
	if lost != nil {
		e.resend = a.resendCommand(b)
	}
	return e
}

// batchError is a batch that was not stored, or may not have been.
type batchError struct {
	b        *batch
	lost     error // set when the batch may have been stored
	last     error
	why      string
	storedTo int
	resend   string // the command that sends the rest again safely
}

func (e *batchError) Error() string { return e.message() }
func (e *batchError) Unwrap() error { return e.last }

// lines names b's stdin lines.
func (b *batch) lines() string {
	if b.from == b.to {
		return fmt.Sprintf("stdin line %d", b.from)
	}
	return fmt.Sprintf("stdin lines %d-%d", b.from, b.to)
}

func (e *batchError) message() string {
	var m strings.Builder
	m.WriteString(e.b.lines())
	if e.lost == nil {
		// The batch id is left out: a batch not stored may be sent again
		// under any id.
		if e.b.from != e.b.to {
			m.WriteString(" (one batch, stored whole or not at all)")
		}
		m.WriteString(": nothing of it was stored: ")
		if e.why == "interrupted" {
			m.WriteString("interrupted before it was sent")
		} else {
			m.WriteString(explain(e.last))
			if e.why != "" {
				m.WriteString("; " + e.why)
			}
		}
		if e.storedTo > 0 {
			fmt.Fprintf(&m, "; stdin lines 1-%d were stored before it", e.storedTo)
		}
		return m.String()
	}
	fmt.Fprintf(&m, " (batch %s): the outcome is unknown, sessiond may or may not have stored it: ", e.b.id)
	if errors.Is(e.lost, context.Canceled) {
		m.WriteString("interrupted while sessiond had it")
	} else {
		m.WriteString(causeText(e.lost))
		switch {
		case e.why == "interrupted":
			m.WriteString("; interrupted while sending it again")
		case e.why != "" && causeText(e.last) == causeText(e.lost):
			m.WriteString("; " + e.why)
		case e.why != "":
			fmt.Fprintf(&m, "; %s (last: %s)", e.why, causeText(e.last))
		case e.last != e.lost:
			m.WriteString("; sending it again failed: " + causeText(e.last))
		}
	}
	m.WriteString(".")
	if e.storedTo > 0 {
		fmt.Fprintf(&m, " Stdin lines 1-%d were stored; nothing after line %d was sent.\n", e.storedTo, e.b.to)
	} else {
		fmt.Fprintf(&m, " Nothing after line %d was sent.\n", e.b.to)
	}
	fmt.Fprintf(&m, "To finish, send these lines and the rest again with the same batch id within %s; sessiond stores the batch only if it has not yet:\n  %s", sessiondBatchMemory, e.resend)
	return m.String()
}

// causeText is err for a message of append's, without what append says
// itself: whether the outcome is known, what to do about it, --wait.
func causeText(err error) string {
	var de *client.DialError
	if errors.As(err, &de) {
		return de.Error()
	}
	if st := status.Convert(err); st.Code() == codes.Unavailable && lostConnection(st.Message()) {
		return "the connection to sessiond was lost (it stopped or was killed): " + st.Message()
	}
	return explain(err)
}

// resendCommand is the command line that sends b and the lines after it
// again, with b's batch id.
func (a *appender) resendCommand(b *batch) string {
	args := []string{"sessionctl"}
	if f := a.cmd.Flag("socket"); f != nil && f.Changed {
		args = append(args, "--socket", a.g.socket)
	}
	if f := a.cmd.Flag("wait"); f != nil && f.Changed {
		args = append(args, "--wait", a.g.wait.String())
	}
	if a.g.json {
		args = append(args, "--json")
	}
	args = append(args, "append")
	if a.s.Cwd != "" {
		args = append(args, "--cwd", a.s.Cwd)
	} else {
		args = append(args, "--project", a.s.ProjectKey)
	}
	args = append(args, "--session", a.id)
	if a.s.Subpath != "" {
		args = append(args, "--subpath", a.s.Subpath)
	}
	args = append(args, "--batch-id", b.id)
	cmd := shellJoin(args)
	input, named := stdinPath(a.g.in), true
	if input == "" {
		input, named = "INPUT", false
	}
	var line string
	if b.from > 1 {
		line = fmt.Sprintf("tail -n +%d %s | %s", b.from, shellQuote(input), cmd)
	} else {
		line = fmt.Sprintf("%s < %s", cmd, shellQuote(input))
	}
	if !named {
		line += "\n  (INPUT: the same input as this run's stdin)"
	}
	return line
}

// stdinPath is the path of the file on stdin, when it is one whose path
// the system tells, else "".
func stdinPath(in io.Reader) string {
	f, ok := in.(*os.File)
	if !ok {
		return ""
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !filepath.IsAbs(p) {
		return ""
	}
	if same, err := os.Stat(p); err != nil || !os.SameFile(fi, same) {
		return ""
	}
	return p
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func (g *globals) printAppend(resp *sessiondv1.AppendResponse, batchID string) error {
	if g.json {
		return g.printJSON(resp)
	}
	if resp.GetDuplicateBatch() {
		// Every result says duplicate, which would read as entries the
		// session held before: they are this batch's, stored earlier.
		fmt.Fprintf(g.out, "batch %s was stored already (an attempt whose answer was lost): %s, none stored again\n", batchID, count(len(resp.GetResults()), "entry"))
	} else {
		for _, r := range resp.GetResults() {
			id := r.GetUuid()
			if id == "" {
				id = "(no uuid)"
			}
			if r.GetOutcome() == sessiondv1.EntryOutcome_ENTRY_OUTCOME_DUPLICATE {
				fmt.Fprintf(g.out, "duplicate  -      %s\n", id)
			} else {
				fmt.Fprintf(g.out, "stored     #%-5d %s (%s)\n", r.GetIndex(), id, humanBytes(r.GetSize()))
			}
		}
	}
	fmt.Fprintf(g.out, "%s now holds %s\n", resp.GetSession().GetPath(), count(resp.GetEntries(), "entry"))
	return nil
}
