// Command sessionctl administers sessiond: status, append, flush, list,
// show and tail of session transcripts, all through the daemon's socket.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/internal/errdefs"
)

// exitError carries an exit status without a message of its own.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// gcPercent is sessionctl's GOGC unless the user sets one. show and tail
// hold a long line up to three times while it passes through (gRPC's
// receive buffers, the message's bytes, the output buffer), and with Go's
// default of 100 the heap may grow to twice that before a collection: a
// show of a transcript with an 8 MiB line peaked 35-47 MiB above a small
// one's, against the 48 MiB the memory target allows (BENCHMARKS.md).
// At 25 it measured 27 MiB (at 50, 35 MiB), for a show about 1.4 times
// as long (1.0 s for 200 MB against 0.7 s): memory is what a reader of
// huge transcripts runs out of first.
const gcPercent = 25

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs sessionctl with args until it is done or ctx ends (SIGINT,
// SIGTERM), and returns its exit status.
func run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	root := newRoot(in, out, errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	code := 1
	var ce codedError
	if errors.As(err, &ce) {
		code, err = ce.code, ce.err
	}
	var ue *client.UntrustedSocketError
	if errors.As(err, &ue) {
		// Its own status whatever the command (check's 2 included):
		// a script must not take it for a call it may retry.
		code = exitUntrusted
		// The refusal alone, unless a batch whose answer was lost
		// before it may be stored: that must be said too.
		var be *batchError
		if !errors.As(err, &be) || be.lost == nil {
			err = ue
		}
	}
	fmt.Fprintln(errOut, "sessionctl:", explain(err))
	return code
}

// codedError is an error that exits with a status other than 1.
type codedError struct {
	code int
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

func exitWith(code int, err error) error { return codedError{code, err} }

// exitUntrusted is the exit status when the socket is served by another
// user: sessionctl refused it and sent nothing.
const exitUntrusted = 3

// usageErr is a mistake in the command line: exit status 2, so that a
// script never reads a typo as a result (check's 1 means damaged).
func usageErr(msg string) error { return exitWith(2, errors.New(msg)) }

// globals are the flags every command shares.
type globals struct {
	socket       string
	json         bool
	wait         time.Duration
	progressMode string
	in           io.Reader
	out          io.Writer
	errOut       io.Writer
	errTerminal  bool
}

// dial connects to the daemon. Its calls are not retried: a daemon that is
// not there fails the command at once, and --wait (waitServing) is the one
// place that waits, for a daemon being started.
func (g *globals) dial() (*client.Client, error) {
	return client.Dial(g.socket, client.WithRetry(1, 0))
}

// withClient adapts a command body that needs a connection to the daemon:
// it dials (lazily: nothing is sent before the first call), waits up to
// --wait for the daemon to serve, and closes afterwards.
func (g *globals) withClient(fn func(cmd *cobra.Command, args []string, c *client.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		switch g.progressMode {
		case "auto", "always", "never":
		default:
			return usageErr(fmt.Sprintf("--progress is auto, always or never, not %q", g.progressMode))
		}
		if err := checkKeyFlags(cmd); err != nil {
			return err
		}
		c, err := g.dial()
		if err != nil {
			return err
		}
		defer c.Close()
		if g.wait > 0 {
			if err := waitServing(cmd.Context(), c, g.wait); err != nil {
				return err
			}
		}
		if cmd.Annotations[sessionArgKey] != "" && len(args) > 0 {
			id, err := g.resolveSession(cmd.Context(), cmd, c, args[0])
			if err != nil {
				return err
			}
			args[0] = id
		}
		return fn(cmd, args, c)
	}
}

// waitServing polls the daemon's health until it serves or d has passed.
// A socket served by another user is not waited for: it will not change.
func waitServing(ctx context.Context, c *client.Client, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := grpc_health_v1.NewHealthClient(c.Conn()).Check(cctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return nil
		}
		var ue *client.UntrustedSocketError
		if errors.As(err, &ue) || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("it answers %v", resp.GetStatus())
			}
			return fmt.Errorf("sessiond did not serve within --wait %v: %w", d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newRoot(in io.Reader, out, errOut io.Writer) *cobra.Command {
	g := &globals{in: in, out: out, errOut: errOut, errTerminal: isTerminal(errOut)}
	root := &cobra.Command{
		Use:   "sessionctl",
		Short: "Administer sessiond, the agent session transcript daemon",
		Long: `Administer sessiond, the agent session transcript daemon.

sessionctl talks to the daemon at --socket (default below) and trusts it only
when the kernel says the process serving it is you or root; any other socket
is refused before anything is sent.

Exit status: 0 success; 1 an error (check: damage found); 2 a mistake in the
command line (check: could not check); 3 the socket is served by another user.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringVar(&g.socket, "socket", client.DefaultSocket(), "sessiond's socket (env SESSIOND_SOCKET); one served by another user is refused, exit status 3")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print machine-readable JSON")
	root.PersistentFlags().StringVar(&g.progressMode, "progress", "auto", "show how far long operations are on stderr (check --all, repair, show): auto (on a terminal, not with --json), always or never")
	root.PersistentFlags().DurationVar(&g.wait, "wait", 0, "wait up to this long for sessiond to serve (a script that has just started it), e.g. --wait 10s; without it a daemon that is not running fails the command at once. append also sends a batch whose answer was lost again for up to this long (10s without it)")
	root.Version = buildinfo.Version()
	root.SetVersionTemplate("sessionctl {{.Version}}\n")
	root.AddCommand(versionCmd(g), uuidCmd(g), statusCmd(g), appendCmd(g), flushCmd(g), listCmd(g), showCmd(g), tailCmd(g), infoCmd(g),
		checkCmd(g), repairCmd(g), forkCmd(g), pullCmd(g), renameCmd(g), tagCmd(g), archiveCmd(g, true), archiveCmd(g, false),
		deleteCmd(g), restoreCmd(g), trashCmd(g), subkeysCmd(g), materializeCmd(g))
	for _, c := range root.Commands() {
		switch c.Name() {
		case "flush", "info", "show", "tail", "check", "repair", "fork", "rename", "tag", "archive", "unarchive", "delete", "restore", "subkeys":
			takesSession(g, c)
		}
	}
	// Wrong arguments and flags are usage errors too, wherever cobra
	// finds them.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitWith(2, err) })
	for _, c := range root.Commands() {
		if args := c.Args; args != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return exitWith(2, err)
				}
				return nil
			}
		}
	}
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(c *cobra.Command, a []string) error {
		if len(a) > 0 {
			return usageErr(fmt.Sprintf("unknown command %q; sessionctl --help lists them", a[0]))
		}
		return c.Help()
	}
	return root
}

// explain turns an error into a sentence a user can act on.
func explain(err error) string {
	var be *batchError
	if errors.As(err, &be) {
		return be.message()
	}
	var de *client.DialError
	var ue *client.UntrustedSocketError
	if errors.As(err, &de) {
		if errors.Is(de, syscall.ENOENT) || errors.Is(de, syscall.ECONNREFUSED) {
			return err.Error() + " (a script that starts sessiond first can pass --wait 10s)"
		}
		return err.Error()
	}
	if errors.As(err, &ue) {
		return err.Error()
	}
	var withStatus interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &withStatus) {
		return trimKinds(err.Error())
	}
	text := explainStatus(status.Convert(withStatus.(error)), err)
	// The words of the errors that wrap the status are kept; gRPC's
	// wording of the status ("rpc error: code = ...") is replaced.
	if raw, full := withStatus.(error).Error(), err.Error(); raw != "" {
		if i := strings.LastIndex(full, raw); i >= 0 {
			return full[:i] + text + full[i+len(raw):]
		}
	}
	return text
}

// explainStatus says what st, the status of err, means to a user.
func explainStatus(st *status.Status, err error) string {
	switch st.Code() {
	case codes.Unavailable:
		if client.NotProcessed(err) {
			// The daemon answered that it takes no new requests.
			return "sessiond could not take the request (it is shutting down; nothing was done): " + st.Message()
		}
		if lostConnection(st.Message()) {
			return "the connection to sessiond was lost (it stopped or was killed; what the call did is unknown, check before retrying): " + st.Message()
		}
		// The daemon's own answer: running, but it could not take this
		// request now (a session being moved, a writer reopening).
		return "sessiond could not take the request now: " + st.Message()
	case codes.Canceled:
		return "cancelled"
	case codes.DeadlineExceeded:
		return "sessiond did not answer in time"
	default:
		return fmt.Sprintf("%s: %s", codeName(st.Code()), trimKinds(st.Message()))
	}
}

// lostConnection reports whether an UNAVAILABLE message is gRPC's for a
// connection that broke, rather than an answer of the daemon.
func lostConnection(msg string) bool {
	for _, s := range []string{"error reading from server", "connection error", "transport is closing", "connection reset", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// trimKinds drops the error kind that closes sessiond's messages ("...:
// not found"): the code name in front, or the message itself, says it.
func trimKinds(msg string) string {
	for _, kind := range errdefs.Kinds {
		msg = strings.TrimSuffix(msg, ": "+kind.Err.Error())
	}
	return msg
}

func codeName(c codes.Code) string {
	switch c {
	case codes.InvalidArgument:
		return "invalid input"
	case codes.NotFound:
		return "not found"
	case codes.AlreadyExists:
		return "already exists"
	case codes.FailedPrecondition:
		return "cannot do that"
	case codes.PermissionDenied:
		return "permission denied"
	case codes.ResourceExhausted:
		return "resource exhausted"
	case codes.DataLoss:
		return "damaged data"
	default:
		return c.String()
	}
}
