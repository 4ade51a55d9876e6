package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/buildinfo"
	"github.com/sessiond/sessiond/internal/layout"
)

var pj = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// printJSON writes one proto message as a line of JSON.
// done prints a one-line confirmation, or resp with --json.
func (g *globals) done(resp proto.Message, format string, args ...any) error {
	if g.json {
		return g.printJSON(resp)
	}
	_, err := fmt.Fprintf(g.out, format+"\n", args...)
	return err
}

func (g *globals) printJSON(m proto.Message) error { return g.printJSONTo(g.out, m) }

// printJSONTo writes m as a line of JSON to w.
func (g *globals) printJSONTo(w io.Writer, m proto.Message) error {
	b, err := pj.Marshal(m)
	if err != nil {
		return err
	}
	// protojson writes 64-bit integers as strings (JavaScript's numbers
	// lose precision past 2^53); sessionctl's counters and indexes never
	// come near that, and everywhere else it prints them as numbers.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	v = intsAsNumbers(m.ProtoReflect().Descriptor(), v)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// intsAsNumbers turns the 64-bit integer fields of the protojson value v
// of a message md back into JSON numbers.
func intsAsNumbers(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for name, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsMap() {
			continue
		}
		conv := func(x any) any {
			switch fd.Kind() {
			case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
				if s, ok := x.(string); ok {
					return json.Number(s)
				}
			case protoreflect.MessageKind:
				return intsAsNumbers(fd.Message(), x)
			}
			return x
		}
		if list, ok := val.([]any); ok && fd.IsList() {
			for i := range list {
				list[i] = conv(list[i])
			}
			continue
		}
		obj[name] = conv(val)
	}
	return obj
}

// sessionFlags are the flags that name a session besides its id.
type sessionFlags struct {
	cwd, project, subpath string
}

func (f *sessionFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.cwd, "cwd", "", "the session's project, as the agent's working directory")
	c.Flags().StringVar(&f.project, "project", "", "the session's project, as a project key (the folder name under projects/)")
	c.Flags().StringVar(&f.subpath, "subpath", "", "a subagent transcript of the session, e.g. subagents/agent-abc")
	c.MarkFlagsMutuallyExclusive("cwd", "project")
}

func (f *sessionFlags) session(id string) client.Session {
	return client.Session{Cwd: absCwd(f.cwd), ProjectKey: f.project, ID: id, Subpath: f.subpath}
}

// absCwd makes a relative --cwd absolute against sessionctl's own working
// directory, as a user typing it means: the daemon has no working
// directory of the caller to resolve it against, and refuses it.
func absCwd(cwd string) string {
	if cwd == "" || filepath.IsAbs(cwd) {
		return cwd
	}
	if abs, err := filepath.Abs(cwd); err == nil {
		return abs
	}
	return cwd // the daemon's refusal says what is wrong with it
}

func uuidCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "uuid",
		Short: "Print a new random UUID (a session or entry id), in lower case as the official tools write them",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(g.out, uuid.NewString())
			return err
		},
	}
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print sessionctl's version and the running daemon's",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
			mine := buildinfo.Version()
			st, err := c.Status(cmd.Context())
			var ue *client.UntrustedSocketError
			if errors.As(err, &ue) {
				return err // exit status 3, whatever the command
			}
			if g.json {
				out := map[string]string{"sessionctl": mine}
				if err == nil {
					out["sessiond"] = st.GetVersion()
				} else {
					out["sessiond_error"] = explain(err)
				}
				b, _ := json.Marshal(out)
				_, werr := fmt.Fprintf(g.out, "%s\n", b)
				return werr
			}
			fmt.Fprintf(g.out, "sessionctl %s\n", mine)
			if err != nil {
				// The version of this program is known whatever the daemon.
				fmt.Fprintf(g.out, "sessiond   (%s)\n", explain(err))
				return nil
			}
			fmt.Fprintf(g.out, "sessiond   %s (pid %d, %s)\n", st.GetVersion(), st.GetPid(), g.socket)
			return nil
		}),
	}
}

func printFlushed(w io.Writer, s *sessiondv1.FlushedSession) error {
	_, err := fmt.Fprintf(w, "%s: %s compacted, %s\n", s.GetSession().GetPath(), count(s.GetCompactedEntries(), "entry"), humanBytes(s.GetCanonicalBytes()))
	return err
}

func flushCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var all bool
	c := &cobra.Command{
		Use:   "flush [UUID | --all]",
		Short: "Compact journaled entries into the canonical transcript files",
		Args:  cobra.MaximumNArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			if all == (len(args) == 1) {
				return usageErr("give a session id or --all")
			}
			if all && sf != (sessionFlags{}) {
				return usageErr("--all flushes every session of every project; --cwd, --project and --subpath name one session, give its id instead")
			}
			if !all {
				f, err := c.Flush(cmd.Context(), sf.session(args[0]))
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(&sessiondv1.FlushResponse{Sessions: []*sessiondv1.FlushedSession{f}})
				}
				return printFlushed(g.out, f)
			}
			// With --json, one line per session compacted, as the daemon
			// reports it.
			flushed := 0
			err := c.FlushAll(cmd.Context(), func(f *sessiondv1.FlushedSession) error {
				flushed++
				if g.json {
					return g.printJSON(&sessiondv1.FlushResponse{Sessions: []*sessiondv1.FlushedSession{f}})
				}
				return printFlushed(g.out, f)
			})
			if err != nil {
				return err
			}
			if flushed == 0 {
				if g.json {
					return g.printJSON(&sessiondv1.FlushResponse{})
				}
				fmt.Fprintln(g.out, "nothing to flush")
			}
			return nil
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&all, "all", false, "flush every session")
	return c
}

func listCmd(g *globals) *cobra.Command {
	var opt client.ListOptions
	c := &cobra.Command{
		Use:   "list [--cwd DIR | --project KEY] [--limit N --offset N] [--continue] [--fleet]",
		Short: "List sessions, newest first",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
			opt.Cwd = absCwd(opt.Cwd)
			infos, total, err := c.ListSessions(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(&sessiondv1.ListSessionsResponse{Sessions: infos, Total: total})
			}
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTITLE\tENTRIES\tSIZE\tMODIFIED")
			unlisted := 0
			for _, in := range infos {
				title := in.GetSummary()
				if title == "" {
					title = in.GetFirstPrompt()
				}
				title = oneLine(title, 60)
				var marks []string
				if in.GetDamaged() {
					marks = append(marks, fmt.Sprintf("damaged: %d bad lines", in.GetMalformedLines()))
				}
				if in.GetArchived() {
					marks = append(marks, "archived")
				}
				if in.GetSidechain() {
					marks = append(marks, "sidechain")
				}
				if in.GetTag() != "" {
					marks = append(marks, "#"+in.GetTag())
				}
				if !layout.IsUUID(in.GetSession().GetSessionId()) {
					marks = append(marks, "not a UUID*")
					unlisted++
				}
				if len(marks) > 0 {
					title += " [" + strings.Join(marks, ", ") + "]"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", in.GetSession().GetSessionId(), title, in.GetEntries(),
					humanBytes(in.GetBytes()), time.UnixMilli(in.GetModifiedMs()).Format("2006-01-02 15:04:05"))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if unlisted > 0 {
				// A SessionStore may be given any safe id; the disk readers
				// look only for <uuid>.jsonl.
				fmt.Fprintf(g.out, "* %d of these sessions have an id that is not a UUID: Claude Code and the SDKs' disk readers (claude --resume, listSessions without a store) will not list or resume them; a SessionStore adapter on sessiond will\n", unlisted)
			}
			// --continue shows one session by design: the others are not
			// a further page of it.
			if !opt.Continue && int(opt.Offset)+len(infos) < int(total) {
				fmt.Fprintf(g.out, "(%d of %d; --offset %d for more)\n", len(infos), total, int(opt.Offset)+len(infos))
			}
			return nil
		}),
	}
	c.Flags().StringVar(&opt.Cwd, "cwd", "", "only the project of this working directory")
	c.Flags().StringVar(&opt.ProjectKey, "project", "", "only this project key")
	c.Flags().Uint32Var(&opt.Limit, "limit", 0, "at most this many sessions (0: all)")
	c.Flags().Uint32Var(&opt.Offset, "offset", 0, "skip this many sessions first")
	c.Flags().BoolVar(&opt.Continue, "continue", false, "only the session that claude --continue would resume (the newest that is not a sidechain)")
	c.Flags().BoolVar(&opt.ExcludeArchived, "exclude-archived", false, "leave archived sessions out")
	c.Flags().BoolVar(&opt.Fleet, "fleet", false, "list from sessiond's PostgreSQL mirror: every machine's sessions (sessionctl pull ID brings one here)")
	c.MarkFlagsMutuallyExclusive("cwd", "project")
	return c
}

func infoCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	c := &cobra.Command{
		Use:   "info UUID",
		Short: "Describe one session",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			in, err := c.Info(cmd.Context(), sf.session(args[0]))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(in)
			}
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "id\t%s\n", in.GetSession().GetSessionId())
			fmt.Fprintf(w, "project\t%s\n", in.GetSession().GetProjectKey())
			if in.GetSession().GetSubpath() != "" {
				fmt.Fprintf(w, "subpath\t%s\n", in.GetSession().GetSubpath())
			}
			fmt.Fprintf(w, "file\t%s\n", in.GetSession().GetPath())
			fmt.Fprintf(w, "title\t%s\n", oneLine(in.GetTitle(), 100))
			fmt.Fprintf(w, "first prompt\t%s\n", oneLine(in.GetFirstPrompt(), 100))
			fmt.Fprintf(w, "cwd\t%s\n", in.GetCwd())
			fmt.Fprintf(w, "entries\t%d (%d journaled, not yet compacted)\n", in.GetEntries(), in.GetPendingEntries())
			fmt.Fprintf(w, "size\t%s\n", humanBytes(in.GetBytes()))
			fmt.Fprintf(w, "damaged lines\t%d\n", in.GetMalformedLines())
			fmt.Fprintf(w, "modified\t%s\n", time.UnixMilli(in.GetModifiedMs()).Format(time.RFC3339))
			fmt.Fprintf(w, "open\t%v\n", in.GetActive())
			return w.Flush()
		}),
	}
	sf.add(c)
	return c
}

func showCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var from uint64
	c := &cobra.Command{
		Use:   "show UUID",
		Short: "Print a session's JSONL, journaled entries included",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			var out io.Writer = g.out
			if g.progress() {
				// A 200 MB transcript takes a while: count its bytes
				// against its size.
				in, err := c.Info(cmd.Context(), sf.session(args[0]))
				if err != nil {
					return err
				}
				bar := g.newBar(int64(in.GetBytes()), "show", "bytes")
				defer bar.Finish()
				out = progressWriter{g.out, bar}
			}
			w := bufio.NewWriterSize(out, 1<<20)
			defer w.Flush()
			return c.Read(cmd.Context(), sf.session(args[0]), client.ReadOptions{From: from}, g.entryPrinter(w))
		}),
	}
	sf.add(c)
	c.Flags().Uint64Var(&from, "from", 0, "first entry index to print")
	return c
}

func tailCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var follow bool
	var n uint32
	c := &cobra.Command{
		Use:   "tail [-f] [-n N] UUID",
		Short: "Print a session's last entries, and with -f every new one",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			opt := client.ReadOptions{Tail: n}
			if n == 0 {
				// -n 0: nothing old, only what follows.
				info, err := c.Info(cmd.Context(), sf.session(args[0]))
				if err != nil {
					return err
				}
				opt = client.ReadOptions{From: info.GetEntries()}
			}
			// Unbuffered: a follower wants each entry as it arrives.
			print := g.entryPrinter(g.out)
			if follow {
				return c.Follow(cmd.Context(), sf.session(args[0]), opt, print)
			}
			return c.Read(cmd.Context(), sf.session(args[0]), opt, print)
		}),
	}
	sf.add(c)
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries until interrupted")
	c.Flags().Uint32VarP(&n, "lines", "n", 10, "how many of the last entries to print first")
	return c
}

// entryPrinter prints entries as JSONL, or with --json as objects that
// also carry each entry's index.
func (g *globals) entryPrinter(w io.Writer) func(*sessiondv1.Entry) error {
	return func(e *sessiondv1.Entry) error {
		if g.json {
			data := e.GetData()
			if !json.Valid(data) {
				// A damaged line is still shown, as a string.
				b, _ := json.Marshal(string(data))
				data = b
			}
			_, err := fmt.Fprintf(w, "{\"index\":%d,\"entry\":%s}\n", e.GetIndex(), data)
			return err
		}
		if _, err := w.Write(e.GetData()); err != nil {
			return err
		}
		_, err := w.Write([]byte{'\n'})
		return err
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// describeOperation says how far a daemon operation is: "index 1,234 of
// 10,000 sessions (12%), for 3s".
func describeOperation(op *sessiondv1.Operation) string {
	amount := func(n uint64) string {
		if op.GetUnit() == "bytes" {
			return humanBytes(n)
		}
		return fmt.Sprint(n)
	}
	unit := " " + op.GetUnit()
	if op.GetUnit() == "bytes" {
		unit = "" // humanBytes says it
	}
	s := op.GetKind() + " " + amount(op.GetDone())
	if t := op.GetTotal(); t > 0 {
		s += fmt.Sprintf(" of %s%s (%d%%)", amount(t), unit, op.GetDone()*100/t)
	} else {
		s += unit
	}
	return s + fmt.Sprintf(", for %s", time.Since(time.UnixMilli(op.GetStartedMs())).Round(time.Second))
}

// count says n things in English: "1 entry", "2 entries", "0 sessions".
func count[N ~int | ~int32 | ~uint32 | ~int64 | ~uint64](n N, singular string) string {
	if n == 1 {
		return "1 " + singular
	}
	plural := singular + "s"
	if strings.HasSuffix(singular, "y") {
		plural = strings.TrimSuffix(singular, "y") + "ies"
	}
	return fmt.Sprintf("%d %s", n, plural)
}
