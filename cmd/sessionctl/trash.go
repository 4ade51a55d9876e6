package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

func restoreCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	var all bool
	c := &cobra.Command{
		Use:   "restore UUID [--subpath SUBPATH] [--all]",
		Short: "Bring a deleted session (or a subagent transcript deleted on its own) back from the trash",
		Long: "Brings back the newest trashed copy of the session, or with --all every one, oldest first\n" +
			"(sessionctl trash UUID lists them). Where the session exists again (its agent kept\n" +
			"appending after the delete), the copies are merged into it: trashed entries first,\n" +
			"then the session's own, every entry once (by uuid; a line without one by its content).",
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			restore := c.Restore
			if all {
				restore = c.RestoreAll
			}
			resp, err := restore(cmd.Context(), sf.session(args[0]))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(resp)
			}
			copies := count(resp.GetCopies(), "trashed copy")
			if resp.GetMerged() {
				return g.done(resp, "restored %s: %s merged into the session, which exists again: %s back, %s dropped (already there)",
					resp.GetSession().GetPath(), copies, count(resp.GetEntries(), "entry"), count(resp.GetDuplicates(), "duplicate"))
			}
			extra := ""
			if n := resp.GetDuplicates(); n > 0 {
				extra = fmt.Sprintf(", %s dropped (in an older copy too)", count(n, "duplicate"))
			}
			return g.done(resp, "restored %s (%s: %s%s)", resp.GetSession().GetPath(), copies, count(resp.GetEntries(), "entry"), extra)
		}),
	}
	sf.add(c)
	c.Flags().BoolVar(&all, "all", false, "bring back every trashed copy of the session, oldest first, not only the newest")
	return c
}

func trashCmd(g *globals) *cobra.Command {
	var sf sessionFlags
	c := &cobra.Command{
		Use:   "trash [UUID] [--cwd DIR | --project KEY]",
		Short: "List the deleted copies of sessions kept in the trash",
		Long: "Lists every deleted copy in sessiond's trash (of one session, or of one project, or all):\n" +
			"the session, its project, when it was deleted, its entries and size. A session deleted\n" +
			"several times (its agent kept appending after each delete) has a copy per delete;\n" +
			"sessionctl restore UUID --all brings them all back. Copies older than sessiond\n" +
			"--trash-retention (30 days by default) are purged.",
		Args: cobra.MaximumNArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
				if layout.IsUUID(id) {
					id = strings.ToLower(id) // one session whatever its case
				}
				if err := layout.ValidateSessionID(id); err != nil {
					return usageErr(fmt.Sprintf("trash takes a whole session id, not %q (sessionctl trash lists them all)", args[0]))
				}
			}
			// Printed as the daemon's pages arrive: with --json one line
			// per page, else the table aligned page by page.
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			var copies, entries, bytes uint64
			err := c.ListTrash(cmd.Context(), sf.session(id), func(t *sessiondv1.TrashedCopy) error {
				copies++
				if g.json {
					return g.printJSON(&sessiondv1.ListTrashResponse{Copies: []*sessiondv1.TrashedCopy{t}})
				}
				if copies == 1 {
					fmt.Fprintln(w, "SESSION\tPROJECT\tDELETED\tENTRIES\tTRANSCRIPTS\tSIZE")
				}
				name := t.GetSessionId()
				if sub := t.GetSubpath(); sub != "" {
					name += " --subpath " + sub
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", name, t.GetProjectKey(),
					time.UnixMilli(t.GetDeletedMs()).Format("2006-01-02 15:04:05"), t.GetEntries(), t.GetTranscripts(), humanBytes(t.GetBytes()))
				entries += t.GetEntries()
				bytes += t.GetBytes()
				if copies%trashTableRows == 0 {
					return w.Flush()
				}
				return nil
			})
			if err != nil {
				return err
			}
			if g.json {
				if copies == 0 {
					return g.printJSON(&sessiondv1.ListTrashResponse{})
				}
				return nil
			}
			if copies == 0 {
				if id != "" {
					fmt.Fprintf(g.out, "no deleted copy of %s in the trash\n", id)
				} else {
					fmt.Fprintln(g.out, "the trash is empty")
				}
				return nil
			}
			if err := w.Flush(); err != nil {
				return err
			}
			// A copy's entries count every transcript in it, its
			// subagents' too, where list counts the main transcript's.
			_, err = fmt.Fprintf(g.out, "(%s, %s in all their transcripts, subagents' included, %s; sessionctl restore UUID [--all] brings a session's back)\n",
				count(copies, "copy"), count(entries, "entry"), humanBytes(bytes))
			return err
		}),
	}
	c.Flags().StringVar(&sf.cwd, "cwd", "", "only the project of this working directory")
	c.Flags().StringVar(&sf.project, "project", "", "only this project key")
	c.MarkFlagsMutuallyExclusive("cwd", "project")
	return c
}

// trashTableRows is how many rows of the trash's table are aligned
// together: the table is printed as it arrives, not held whole.
const trashTableRows = 1000

// retention says how long the trash keeps a copy.
func retention(seconds uint64) string {
	d := time.Duration(seconds) * time.Second
	switch days := d / (24 * time.Hour); {
	case d%(24*time.Hour) != 0 || days == 0:
	case days == 1:
		return "1 day"
	default:
		return fmt.Sprintf("%d days", days)
	}
	return d.String()
}
