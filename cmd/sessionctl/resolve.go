package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// sessionArgKey marks, in a command's Annotations, that its first argument
// names a session: a UUID, a unique prefix of one, or a transcript's path.
const sessionArgKey = "sessionctl/session-arg"

// takesSession marks c as taking a session as its first argument and
// completes that argument (and --subpath) from the daemon.
func takesSession(g *globals, c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[sessionArgKey] = "true"
	c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return g.completeSessions(cmd, toComplete)
	}
	if c.Flags().Lookup("subpath") != nil {
		c.RegisterFlagCompletionFunc("subpath", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return g.completeSubpaths(cmd, args[0], toComplete)
		})
	}
	return c
}

// completeSessions offers the ids of the sessions the daemon lists (of the
// project given by --cwd/--project, if any), each with its title.
func (g *globals) completeSessions(cmd *cobra.Command, prefix string) ([]string, cobra.ShellCompDirective) {
	return g.complete(cmd, func(ctx context.Context, c *client.Client) ([]string, error) {
		cwd, _ := cmd.Flags().GetString("cwd")
		project, _ := cmd.Flags().GetString("project")
		infos, _, err := c.ListSessions(ctx, client.ListOptions{Cwd: absCwd(cwd), ProjectKey: project})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, in := range infos {
			if id := in.GetSession().GetSessionId(); strings.HasPrefix(strings.ToLower(id), strings.ToLower(prefix)) {
				out = append(out, id+"\t"+describe(in))
			}
		}
		return out, nil
	})
}

// complete runs fn, with a client and a short deadline, for a shell
// completion; an error offers nothing.
func (g *globals) complete(cmd *cobra.Command, fn func(context.Context, *client.Client) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	c, err := g.dial()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError | cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	out, err := fn(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError | cobra.ShellCompDirectiveNoFileComp
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func describe(in *sessiondv1.SessionInfo) string {
	d := in.GetTitle()
	if d == "" {
		d = in.GetSummary()
	}
	if d == "" {
		d = in.GetFirstPrompt()
	}
	return strings.Join(strings.Fields(d), " ")
}

// completeSubpaths offers the subagent transcripts of the session arg.
func (g *globals) completeSubpaths(cmd *cobra.Command, arg, prefix string) ([]string, cobra.ShellCompDirective) {
	return g.complete(cmd, func(ctx context.Context, c *client.Client) ([]string, error) {
		id, err := g.resolveSession(ctx, cmd, c, arg)
		if err != nil {
			return nil, err
		}
		cwd, _ := cmd.Flags().GetString("cwd")
		project, _ := cmd.Flags().GetString("project")
		subs, err := c.Subkeys(ctx, client.Session{Cwd: absCwd(cwd), ProjectKey: project, ID: id})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range subs {
			if strings.HasPrefix(s, prefix) {
				out = append(out, s)
			}
		}
		return out, nil
	})
}

// resolveSession turns what a user typed for a session into its id: a UUID
// as it is; a transcript's path into its session (setting --project, and
// --subpath for a subagent's); a listed session's whole id as it is; a
// unique prefix of a listed session's id into that id. A valid id that
// could not be the start of a UUID, and is neither listed nor the start of
// a listed id, goes to the daemon as typed (it says whether the session
// exists).
func (g *globals) resolveSession(ctx context.Context, cmd *cobra.Command, c *client.Client, arg string) (string, error) {
	if arg == "" || layout.IsUUID(arg) {
		return arg, nil
	}
	if strings.HasSuffix(arg, layout.TranscriptExt) || strings.ContainsRune(arg, filepath.Separator) {
		return g.sessionFromPath(ctx, cmd, c, arg)
	}
	valid := layout.ValidateSessionID(arg) == nil
	uuidStart := strings.Trim(strings.ToLower(arg), "0123456789abcdef-") == "" && len(arg) < 36
	if !valid && !uuidStart {
		return "", usageErr(plainReason(layout.ValidateSessionID(arg)))
	}
	if cmd.Name() == "restore" {
		if valid {
			return arg, nil
		}
		// Prefixes are looked up among live sessions; a deleted one is not.
		return "", usageErr(fmt.Sprintf("restore needs the whole session id, not %q (sessionctl restore looks in the trash, where prefixes are not searched)", arg))
	}
	cwd, _ := cmd.Flags().GetString("cwd")
	project, _ := cmd.Flags().GetString("project")
	infos, _, err := c.ListSessions(ctx, client.ListOptions{Cwd: absCwd(cwd), ProjectKey: project})
	if err != nil {
		return "", err
	}
	var match []*sessiondv1.SessionInfo
	for _, in := range infos {
		id := in.GetSession().GetSessionId()
		if id == arg {
			// The whole id of a session (in one project or several: the
			// daemon resolves it as it does a UUID), not a prefix of others.
			return arg, nil
		}
		if strings.HasPrefix(strings.ToLower(id), strings.ToLower(arg)) {
			match = append(match, in)
		}
	}
	switch len(match) {
	case 0:
		if valid && !uuidStart {
			return arg, nil
		}
		return "", fmt.Errorf("no session id starts with %q (sessionctl list shows them)", arg)
	case 1:
		if project == "" && cwd == "" {
			// The prefix found it in one project: say which, so an id
			// that exists in another project too is not ambiguous.
			cmd.Flags().Set("project", match[0].GetSession().GetProjectKey())
		}
		return match[0].GetSession().GetSessionId(), nil
	}
	sort.Slice(match, func(i, j int) bool {
		return match[i].GetSession().GetSessionId() < match[j].GetSession().GetSessionId()
	})
	var names []string
	for i, in := range match {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(match)-5))
			break
		}
		names = append(names, in.GetSession().GetSessionId())
	}
	return "", usageErr(fmt.Sprintf("%q is the start of %d session ids (%s); type more of it", arg, len(match), strings.Join(names, ", ")))
}

// sessionFromPath resolves a transcript's path under the daemon's root.
func (g *globals) sessionFromPath(ctx context.Context, cmd *cobra.Command, c *client.Client, arg string) (string, error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return "", err
	}
	root := st.GetRoot()
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
	}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	k, ok := layout.Layout{Root: root}.ParseTranscriptPath(abs)
	if !ok {
		return "", usageErr(fmt.Sprintf("%s is not a transcript under sessiond's root %s (projects/<project>/<uuid>.jsonl, or a subagent's under <uuid>/)", arg, st.GetRoot()))
	}
	for flag, v := range map[string]string{"project": k.ProjectKey, "subpath": k.Subpath} {
		if f := cmd.Flags().Lookup(flag); f != nil && f.Changed && f.Value.String() != v {
			return "", usageErr(fmt.Sprintf("--%s %s contradicts the path %s", flag, f.Value.String(), arg))
		}
	}
	if cwd, _ := cmd.Flags().GetString("cwd"); cwd != "" {
		return "", usageErr("a transcript's path names its project: drop --cwd")
	}
	cmd.Flags().Set("project", k.ProjectKey)
	if k.Subpath != "" {
		if cmd.Flags().Lookup("subpath") == nil {
			return "", usageErr(fmt.Sprintf("%s is a subagent transcript, which this command does not take", arg))
		}
		cmd.Flags().Set("subpath", k.Subpath)
	}
	return k.SessionID, nil
}

// checkKeyFlags refuses, before anything is sent, a --session, --project
// or --subpath the daemon would refuse: a command-line mistake (exit
// status 2), named by its flag rather than by what it reached.
func checkKeyFlags(cmd *cobra.Command) error {
	for _, f := range []struct {
		name  string
		check func(string) error
	}{
		{"session", layout.ValidateSessionID},
		{"project", layout.ValidateProjectKey},
		{"subpath", layout.ValidateSubpath},
	} {
		fl := cmd.Flags().Lookup(f.name)
		if fl == nil || !fl.Changed {
			continue
		}
		if err := f.check(fl.Value.String()); err != nil {
			return usageErr(fmt.Sprintf("--%s: %s", f.name, plainReason(err)))
		}
	}
	return nil
}

// plainReason is a validation error's text without the kind the daemon
// would put in front of it ("invalid input"): here the flag says it.
func plainReason(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error())
}
