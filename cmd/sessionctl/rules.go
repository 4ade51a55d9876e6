package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

func checkCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var all bool
	c := &cobra.Command{
		Use:   "check [UUID | --all [--cwd DIR]]",
		Short: "Report damage in transcripts (exit 0 clean, 1 damaged, 2 could not check)",
		Long: "Reports torn, spliced or NUL-damaged lines, invalid UTF-8 and lone surrogates, broken\n" +
			"parentUuid chains, tool_use blocks without their tool_result, stray results and duplicate\n" +
			"uuids, with line numbers. Works on sessions sessiond never wrote too. For those it wrote,\n" +
			"it also reports entries it acknowledged that are no longer in the file (another program\n" +
			"rewrote it without them: acknowledged_missing, with their uuids). --all also reports\n" +
			"what recovery found lost (a journal segment cut, deleted or damaged outside\n" +
			"sessiond, with the count of acknowledged entries gone) and exits 1 for it.",
		Args: cobra.MaximumNArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			if all == (len(args) == 1) {
				return usageErr("give a session id or --all")
			}
			if all && sf.subpath != "" {
				return usageErr("check --all checks every transcript, subagents' included; --subpath names one: check UUID --subpath P checks that one")
			}
			out := bufio.NewWriter(g.out)
			defer out.Flush()
			p := &checkPrinter{g: g, out: out, all: all}
			var err error
			if all {
				err = g.withProgress(cmd.Context(), c, "check", func(ctx context.Context) error {
					return c.CheckAll(ctx, sf.session(""), p.receive)
				}, func() (int64, string) { return int64(p.transcripts), "transcripts" })
			} else {
				err = c.Check(cmd.Context(), sf.session(args[0]), p.receive)
			}
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return exitWith(2, err)
			}
			if all && !g.json {
				fmt.Fprintf(out, "%s checked, %d damaged\n", count(p.transcripts, "transcript"), p.damaged)
			}
			// What recovery found lost or damaged (a journal
			// segment cut or deleted, a session it could not recover)
			// is damage too, whatever the transcripts say.
			recovery := 0
			if all {
				st, err := c.Status(cmd.Context())
				if err != nil {
					return exitWith(2, err)
				}
				for _, e := range st.GetRecoveryErrors() {
					if !g.json {
						fmt.Fprintf(out, "recovery: %s\n", e)
					}
				}
				recovery = max(int(st.GetRecoveryErrorsTotal()), len(st.GetRecoveryErrors()))
				if more := recovery - len(st.GetRecoveryErrors()); more > 0 && !g.json {
					fmt.Fprintf(out, "recovery: %d more (sessionctl status counts them; sessiond's log names each)\n", more)
				}
			}
			if p.damaged > 0 || recovery > 0 {
				return exitError{1}
			}
			return nil
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&all, "all", false, "check every transcript (of the project given by --cwd/--project, else of all projects)")
	return c
}

func repairCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var dry bool
	c := &cobra.Command{
		Use:   "repair UUID [--dry-run]",
		Short: "Repair a damaged session so it can be resumed (the original is kept)",
		Long: "Repairs what check reports. Entries sessiond acknowledged that another program's rewrite\n" +
			"dropped come back first, from the journal (it keeps compacted entries for\n" +
			"sessiond --journal-retention), each once, in the order they were acknowledged, after the last\n" +
			"acknowledged entry the file kept; the other program's lines stay. The original is kept.",
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			out := bufio.NewWriter(g.out)
			defer out.Flush()
			p := &repairPrinter{g: g, out: out, dry: dry}
			err := g.withProgress(cmd.Context(), c, "repair", func(ctx context.Context) error {
				return c.Repair(ctx, sf.session(args[0]), dry, p.receive)
			}, nil)
			if err == nil {
				err = p.finish()
			} else if p.outcome != nil {
				// The daemon had done the repair and said so: only its
				// details were lost on the way. (Said on stderr with
				// --json, whose stdout is for JSON lines only.)
				p.finish()
				note := io.Writer(out)
				if g.json {
					note = g.errOut
				}
				fmt.Fprintf(note, "(the list of changes was cut short: %s)\n", explain(err))
				err = nil
			}
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			return err
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&dry, "dry-run", false, "print the plan, change nothing")
	return c
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func forkCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var upTo, title, newID string
	c := &cobra.Command{
		Use:   "fork UUID [--up-to ENTRY_UUID] [--title T]",
		Short: "Copy a session into a new one, as the official forkSession does",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			resp, err := c.Fork(cmd.Context(), sf.session(args[0]), upTo, title, newID)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(resp)
			}
			fmt.Fprintf(g.out, "forked into %s (%s, title %q)\n%s\n", resp.GetSession().GetSessionId(), count(resp.GetEntries(), "entry"), resp.GetTitle(), resp.GetSession().GetPath())
			return nil
		}),
	}
	sf.add(c)
	c.Flags().StringVar(&upTo, "up-to", "", "keep entries up to and including this entry uuid")
	c.Flags().StringVar(&title, "title", "", "title of the fork")
	c.Flags().StringVar(&newID, "new-id", "", "id of the new session (default: a random UUID)")
	return c
}

func pullCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	c := &cobra.Command{
		Use:   "pull UUID",
		Short: "Bring a session down from the PostgreSQL mirror (with its subagents), so that claude --resume works here",
		Long: `pull writes here, durably, a session sessiond's PostgreSQL mirror holds (written on another machine,
or by a program using the SDK's reference PostgreSQL adapter): its main transcript, its subagents'
transcripts and their .meta.json, and the session's sidecars (archived.json, custom-title.json). A copy
here that is behind gets the rest; an identical one is left alone; one that differs, or holds more, is
refused (nothing is written). A sidecar here that differs from PostgreSQL's is replaced when this
machine was behind, else the newer (by mtime) is kept. Append, Read and Fork pull a session known only
in PostgreSQL by themselves. Needs sessiond --mirror.`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			resp, err := c.Pull(cmd.Context(), sf.session(args[0]))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(resp)
			}
			for _, t := range resp.GetTranscripts() {
				name := "main"
				if t.GetSubpath() != "" {
					name = t.GetSubpath()
				}
				fmt.Fprintf(g.out, "%s: %s (%s)\n", name, t.GetAction(), count(t.GetEntries(), "entry"))
			}
			for _, sc := range resp.GetSidecars() {
				fmt.Fprintf(g.out, "%s: %s\n", sc.GetName(), sc.GetAction())
			}
			fmt.Fprintf(g.out, "pulled %s\n%s\n", resp.GetSession().GetSessionId(), resp.GetSession().GetPath())
			return nil
		}),
	}
	sf.add(c)
	return c
}

func renameCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	c := &cobra.Command{
		Use:   "rename UUID TITLE",
		Short: "Set a session's title (appends a custom-title entry)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			resp, err := c.Rename(cmd.Context(), sf.session(args[0]), args[1])
			if err != nil {
				return err
			}
			return g.done(resp, "renamed %s", resp.GetSession().GetSessionId())
		}),
	}
	sf.add(c)
	return c
}

func tagCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var clear bool
	c := &cobra.Command{
		Use:   "tag UUID TAG | tag --clear UUID",
		Short: "Tag a session (appends a tag entry)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			tag := ""
			switch {
			case clear && len(args) == 1:
			case !clear && len(args) == 2:
				tag = args[1]
				if strings.TrimSpace(tag) == "" {
					// The API reads an empty tag as "clear": say so
					// rather than clear by accident.
					return usageErr("the tag is empty; to remove a session's tag, use tag --clear UUID")
				}
			default:
				return usageErr("give a session id and a tag, or --clear and a session id")
			}
			resp, err := c.Tag(cmd.Context(), sf.session(args[0]), tag)
			if err != nil {
				return err
			}
			if clear {
				return g.done(resp, "cleared the tag of %s", resp.GetSession().GetSessionId())
			}
			return g.done(resp, "tagged %s", resp.GetSession().GetSessionId())
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&clear, "clear", false, "remove the tag")
	return c
}

func archiveCmd(g *globals, archived bool) *cobra.Command {
	var sf sessionFlags
	use, short := "archive UUID", "Mark a session archived (it stays listed, marked)"
	if !archived {
		use, short = "unarchive UUID", "Clear a session's archived mark"
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			resp, err := c.SetArchived(cmd.Context(), sf.session(args[0]), archived)
			if err != nil {
				return err
			}
			return g.done(resp, "%s %s", strings.Fields(use)[0]+"d", resp.GetSession().GetSessionId())
		}),
	}
	sf.add(c)
	return c
}

func deleteCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var purge bool
	c := &cobra.Command{
		Use:   "delete UUID [--purge]",
		Short: "Move a session (with its subagents) to the trash, or remove it for good",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			resp, err := c.Delete(cmd.Context(), sf.session(args[0]), purge)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(resp)
			}
			if purge {
				fmt.Fprintf(g.out, "removed %s for good\n", resp.GetSession().GetPath())
			} else {
				how := resp.GetSession().GetSessionId()
				if sub := resp.GetSession().GetSubpath(); sub != "" {
					how += " --subpath " + sub
				}
				fmt.Fprintf(g.out, "moved %s to %s (sessionctl restore %s brings it back)\n", resp.GetSession().GetPath(), resp.GetTrashPath(), how)
			}
			return nil
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&purge, "purge", false, "remove for good instead of moving to the trash")
	return c
}

func subkeysCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	c := &cobra.Command{
		Use:   "subkeys UUID",
		Short: "List a session's subagent transcripts",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			if sf.subpath != "" {
				return usageErr("subkeys lists the subagent transcripts of a whole session; --subpath does not apply")
			}
			subs, err := c.Subkeys(cmd.Context(), sf.session(args[0]))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(&sessiondv1.ListSubkeysResponse{Subkeys: subs})
			}
			for _, s := range subs {
				fmt.Fprintln(g.out, s)
			}
			return nil
		}),
	}
	sf.add(c)
	return c
}
