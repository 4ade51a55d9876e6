package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/materialize"
)

func materializeCmd(g *globals) *cobra.Command {
	var cwd, project, into string
	c := &cobra.Command{
		Use:   "materialize UUID --into DIR [--cwd DIR | --project KEY]",
		Short: "Copy one session into a fresh config folder, to run an agent against the copy (CLAUDE_CONFIG_DIR=DIR claude --resume UUID)",
		Long: `Writes the session into DIR laid out like ~/.claude: projects/<project>/<UUID>.jsonl,
its subagent transcripts under projects/<project>/<UUID>/ with their .meta.json, each
file written durably (0600, folders 0700). Point an agent at it with
CLAUDE_CONFIG_DIR=DIR claude --resume UUID, run in the session's working directory.
The copy is not sessiond's: what the agent adds there stays there. The agent reads
its login and settings from DIR too (set ANTHROPIC_API_KEY, or log in there), so
remove DIR when done.

UUID must be a whole session id (no prefix, no path). DIR must not exist (its parent
must), or be an empty folder of yours that others cannot write to; a symbolic link is
refused. On any failure, an interruption included (Ctrl-C, SIGTERM, SIGHUP), DIR is
removed (an empty folder you gave is emptied) before sessionctl exits. Exit status 2
when the request is refused before anything is read.`,
		Args: func(_ *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(nil, args); err != nil {
				return err
			}
			if err := layout.ValidateSessionID(args[0]); err != nil {
				return fmt.Errorf("materialize takes a whole session id (sessionctl list shows them): %s", trimKinds(err.Error()))
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
			if into == "" {
				return usageErr("--into DIR is required: the config folder to write, which must not exist yet (or be an empty folder of yours)")
			}
			// SIGINT and SIGTERM end the context already (main); a
			// closed terminal must not leave the copy behind either.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGHUP)
			defer stop()
			res, err := materialize.Materialize(ctx, materialize.Daemon{C: c}, materialize.Request{
				Ref: materialize.Ref{Cwd: absCwd(cwd), ProjectKey: project, SessionID: args[0]},
				Dir: into,
			})
			if err != nil {
				if errors.Is(err, materialize.ErrRefused) {
					return exitWith(2, err)
				}
				var ce *materialize.CleanupError
				kept := "nothing of the copy is kept in " + into
				if errors.As(err, &ce) {
					kept = ce.Error()
				}
				if ctx.Err() != nil {
					// The signal is the cause; the cancelled call's
					// error says no more.
					return fmt.Errorf("interrupted; %s", kept)
				}
				fmt.Fprintf(g.errOut, "sessionctl: materialize failed; %s\n", kept)
				return err
			}
			return g.printMaterialized(res)
		}),
	}
	c.Flags().StringVar(&into, "into", "", "the config folder `DIR` to write (must not exist, or be an empty folder of yours)")
	c.Flags().StringVar(&cwd, "cwd", "", "the session's project, as the agent's working directory")
	c.Flags().StringVar(&project, "project", "", "the session's project, as a project key (the folder name under projects/)")
	c.MarkFlagsMutuallyExclusive("cwd", "project")
	c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return g.completeSessions(cmd, toComplete)
	}
	return c
}

// materialized is materialize's --json output.
type materialized struct {
	SessionID     string             `json:"session_id"`
	ProjectKey    string             `json:"project_key"`
	Cwd           string             `json:"cwd"`
	ConfigDir     string             `json:"config_dir"`
	Files         []materializedFile `json:"files"`
	Transcripts   int                `json:"transcripts"`
	Entries       int64              `json:"entries"`
	Bytes         int64              `json:"bytes"`
	ResumeCommand string             `json:"resume_command"`
	RemoveCommand string             `json:"remove_command"`
}

type materializedFile struct {
	Path    string `json:"path"`
	Subpath string `json:"subpath"`
	Sidecar bool   `json:"sidecar"`
	Entries int64  `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

func (g *globals) printMaterialized(res *materialize.Result) error {
	k := res.Session.Key
	resume := "CLAUDE_CONFIG_DIR=" + shellQuote(res.Dir) + " claude --resume " + k.SessionID
	// The CLI looks for the session in the project of its working
	// directory: say where to run it when the transcript records one
	// that names this project.
	cwd := res.Session.Cwd
	if pk, err := layout.ProjectKeyFromCwd(cwd); cwd == "" || err != nil || pk != k.ProjectKey {
		cwd = ""
	} else {
		resume = "cd " + shellQuote(cwd) + " && " + resume
	}
	remove := "rm -rf " + shellQuote(res.Dir)
	entries, bytes := res.Totals()
	if g.json {
		out := materialized{SessionID: k.SessionID, ProjectKey: k.ProjectKey, Cwd: cwd, ConfigDir: res.Dir,
			Files: []materializedFile{}, Transcripts: res.Transcripts(), Entries: entries, Bytes: bytes,
			ResumeCommand: resume, RemoveCommand: remove}
		for _, f := range res.Files {
			out.Files = append(out.Files, materializedFile(f))
		}
		enc := json.NewEncoder(g.out)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	fmt.Fprintf(g.out, "materialized session %s into %s: %s (%s)", k.SessionID, res.Dir, count(res.Transcripts(), "transcript"), count(entries, "entry"))
	if sidecars := len(res.Files) - res.Transcripts(); sidecars > 0 {
		fmt.Fprintf(g.out, " and %s", count(sidecars, "sidecar"))
	}
	fmt.Fprintf(g.out, ", %s\n", humanBytes(uint64(bytes)))
	w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
	for _, f := range res.Files {
		what := count(f.Entries, "entry")
		if f.Sidecar {
			what = "sidecar, " + humanBytes(uint64(f.Bytes))
		}
		fmt.Fprintf(w, "  %s\t%s\n", f.Path, what)
	}
	w.Flush()
	if cwd == "" {
		fmt.Fprintf(g.out, "Resume it with, in a working directory of the project %s:\n", k.ProjectKey)
	} else {
		fmt.Fprintln(g.out, "Resume it with:")
	}
	fmt.Fprintf(g.out, "  %s\n", resume)
	fmt.Fprintln(g.out, "The copy is not sessiond's: what the agent adds there stays there. The agent reads its login and settings from there too (set ANTHROPIC_API_KEY, or log in).")
	fmt.Fprintln(g.out, "Remove it when done (it may then hold credentials):")
	_, err := fmt.Fprintf(g.out, "  %s\n", remove)
	return err
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
