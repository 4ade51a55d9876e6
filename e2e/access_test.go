package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/owner"
)

// TestAccessSocketModes: the socket is 0600 in a 0700 folder, both owned
// by the daemon's user.
func TestAccessSocketModes(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	d.start()
	for _, c := range []struct {
		path string
		typ  fs.FileMode
		perm fs.FileMode
	}{{d.socket, fs.ModeSocket, 0o600}, {filepath.Dir(d.socket), fs.ModeDir, 0o700}} {
		fi, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != c.typ || fi.Mode().Perm() != c.perm {
			t.Errorf("%s is %v, want type %v with permissions %v", c.path, fi.Mode(), c.typ, c.perm)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
			t.Errorf("%s is owned by uid %d, not the daemon's uid %d", c.path, uid, os.Geteuid())
		}
	}
}

// TestAccessOtherUIDRefused: a client running as another uid that can
// reach the socket (the test loosens the modes the daemon set, which is
// what a careless admin or a shared runtime folder would do) is refused by
// the daemon's own per-call SO_PEERCRED check, with a message naming both
// uids, on unary and streaming calls alike, and changes nothing.
func TestAccessOtherUIDRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		const why = "running a client as another uid needs root (to set the client's uid); run the e2e tests as root to cover the daemon's SO_PEERCRED check"
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set, so this test must run: " + why)
		}
		t.Skip(why)
	}
	const nobody = 65534
	d := newDaemon(t)
	d.start()
	c := d.client()
	defer c.Close()
	api := sessiondv1.NewSessiondClient(c.Conn())
	ctx := context.Background()
	cwd := t.TempDir()
	sid := uuid.NewString()
	ref := &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: sid}
	if _, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: ref, Entries: [][]byte{[]byte(`{"type":"user","uuid":"` + uuid.NewString() + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{All: true})); err != nil {
		t.Fatal(err)
	}

	// Let uid 65534 reach the socket: search permission on every folder
	// above it, write permission on the socket itself.
	for _, dir := range []string{filepath.Dir(d.socket), d.dir, filepath.Dir(d.dir)} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	// The built sessionctl, which that uid may execute (TestMain).
	ctl := bins.Sessionctl()

	runAs := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(ctl, append([]string{"--socket", d.socket}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
		cmd.Dir = "/"
		return runCmd(t, cmd, stdin)
	}
	// With the socket still the owner's alone (0600), another user may not
	// even connect: sessionctl says so, not "not running".
	if err := os.Chmod(d.socket, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runAs("", "status"); code != 1 || !strings.Contains(errOut, "permission denied connecting to "+d.socket) || strings.Contains(errOut, "not running") {
		t.Errorf("sessionctl status as uid %d on a 0600 socket: exit %d, stderr %q; want permission denied connecting", nobody, code, errOut)
	}
	if err := os.Chmod(d.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	before := snapTrees(t, d.root, d.state)
	for _, args := range [][]string{
		{"status"},                  // unary
		{"show", sid, "--cwd", cwd}, // server stream
		{"tail", "-f", sid},         // follow
		{"list"},
		{"append", "--cwd", cwd, "--session", uuid.NewString()},
		{"delete", sid, "--purge"},
	} {
		out, errOut, code := runAs(`{"type":"user"}`+"\n", args...)
		if code == 0 {
			t.Errorf("sessionctl %v as uid %d succeeded:\n%s", args, nobody, out)
			continue
		}
		for _, frag := range []string{"permission denied", "sessiond runs as uid 0", fmt.Sprintf("this caller is uid %d", nobody)} {
			if !strings.Contains(errOut, frag) {
				t.Errorf("sessionctl %v as uid %d: exit %d, stderr %q lacks %q", args, nobody, code, errOut, frag)
			}
		}
	}
	if diffs := snapDiff(before, snapTrees(t, d.root, d.state), nil); len(diffs) > 0 {
		t.Errorf("calls of another uid changed the disk:\n  %s", strings.Join(diffs, "\n  "))
	}
	// The owner is still served.
	if err := streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: ref})); err != nil {
		t.Fatalf("the owner's read after the refusals: %v", err)
	}
	requireAlive(t, d)
}

// requirePrivateModes checks that every folder under roots (roots
// included) is 0700, every file 0600, and that there is no link.
func requirePrivateModes(t *testing.T, step string, roots ...string) {
	t.Helper()
	for p, it := range snapTrees(t, roots...) {
		switch {
		case it.mode.IsDir() && it.mode.Perm() != 0o700:
			t.Errorf("after %s: folder %s is %v, want 0700", step, p, it.mode)
		case it.mode.IsRegular() && it.mode.Perm() != 0o600:
			t.Errorf("after %s: file %s is %v, want 0600", step, p, it.mode)
		case !it.mode.IsDir() && !it.mode.IsRegular():
			t.Errorf("after %s: %s is %v; sessiond makes only files and folders", step, p, it.mode)
		}
	}
}

// TestAccessFileModes: whatever sessiond creates, in the transcripts root
// and in its state folder, is 0600 (files) or 0700 (folders): after
// appends and compaction, subagents, fork, repair (of a foreign 0644 file,
// which keeps its mode: it is not sessiond's), rename, tag, archive, delete
// and restore.
func TestAccessFileModes(t *testing.T) {
	t.Parallel()
	d := hostileDaemon(t)
	api := d.api()
	ctx := context.Background()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	ref := func(sid, sub string) *sessiondv1.SessionRef {
		return &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: sid, Subpath: sub}
	}
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	line := func() []byte {
		return []byte(`{"type":"user","uuid":"` + uuid.NewString() + `","message":{"role":"user","content":"hi"}}`)
	}
	sid := uuid.NewString()
	_, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: ref(sid, ""), Entries: [][]byte{line(), line()}})
	must("append", err)
	_, err = api.Append(ctx, &sessiondv1.AppendRequest{Session: ref(sid, "subagents/agent-a1"), Entries: [][]byte{line()}})
	must("append to a subagent", err)
	requirePrivateModes(t, "append (journaled)", d.root, d.state)
	_, err = recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{All: true}))
	must("flush", err)
	requirePrivateModes(t, "flush", d.root, d.state)

	_, err = api.Fork(ctx, &sessiondv1.ForkRequest{Session: ref(sid, "")})
	must("fork", err)
	requirePrivateModes(t, "fork", d.root, d.state)

	// A damaged transcript another program wrote, world-readable.
	damagedSID := uuid.NewString()
	damaged := filepath.Join(d.root, "projects", pk, damagedSID+".jsonl")
	if err := os.WriteFile(damaged, append(append(line(), '\n'), []byte(`{"type":"user","uuid":"`+uuid.NewString()+`"}`+"\x00\x00\n"+`{"type":"us`)...), 0o644); err != nil {
		t.Fatal(err)
	}
	reps, err := recvAll(api.Repair(ctx, &sessiondv1.RepairRequest{Session: ref(damagedSID, "")}))
	must("repair", err)
	if rep := reps[0]; !rep.GetChanged() || rep.GetBackupPath() == "" {
		t.Fatalf("repair changed nothing: %v", rep)
	}
	// The repaired file is that program's: it keeps its mode (a rewrite
	// must not make it 0600). Its copy in the state folder is sessiond's,
	// and private.
	if fi, err := os.Stat(damaged); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Fatalf("the repaired foreign transcript is %v, want it still -rw-r--r--", fi.Mode())
	}
	if err := os.Remove(damaged); err != nil {
		t.Fatal(err)
	}
	requirePrivateModes(t, "repair", d.root, d.state)

	_, err = api.Rename(ctx, &sessiondv1.RenameRequest{Session: ref(sid, ""), Title: "t"})
	must("rename", err)
	_, err = api.Tag(ctx, &sessiondv1.TagRequest{Session: ref(sid, ""), Tag: "x"})
	must("tag", err)
	_, err = api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: ref(sid, ""), Archived: true})
	must("archive", err)
	_, err = recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{All: true}))
	must("flush", err)
	requirePrivateModes(t, "rename, tag and archive", d.root, d.state)

	_, err = api.Delete(ctx, &sessiondv1.DeleteRequest{Session: ref(sid, "")})
	must("delete", err)
	requirePrivateModes(t, "delete", d.root, d.state)
	_, err = api.Restore(ctx, &sessiondv1.RestoreRequest{Session: ref(sid, "")})
	must("restore", err)
	requirePrivateModes(t, "restore", d.root, d.state)
	waitIdle(t, d, api, 0, 10*time.Second)
	requirePrivateModes(t, "idle compaction and retirement", d.root, d.state)
}

// TestAccessSymlinksNeverFollowed: a symlink planted where a session's
// transcript, session folder, project folder or journal belongs is never
// followed, read through, overwritten or moved: every operation on that
// session is refused with FAILED_PRECONDITION naming the link, and nothing
// changes on disk, inside the root and state folders or outside them.
func TestAccessSymlinksNeverFollowed(t *testing.T) {
	t.Parallel()
	d := hostileDaemon(t)
	api := d.api()
	ctx := context.Background()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	projDir := filepath.Join(d.root, "projects", pk)
	ref := func(sid, sub string) *sessiondv1.SessionRef {
		return &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: sid, Subpath: sub}
	}
	line := func() []byte {
		return []byte(`{"type":"user","uuid":"` + uuid.NewString() + `","message":{"role":"user","content":"hi"}}`)
	}
	mustAppend := func(r *sessiondv1.SessionRef) {
		t.Helper()
		if _, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: r, Entries: [][]byte{line(), line()}}); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(target, at string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}

	// Outside the root: a transcript-looking file, and a folder with a
	// subagent transcript and a title sidecar, to tempt readers.
	outside := t.TempDir()
	target := filepath.Join(outside, "target.jsonl")
	if err := os.WriteFile(target, append(line(), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(outside, "dir")
	if err := os.MkdirAll(filepath.Join(outDir, "subagents"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outDir, "subagents", "agent-x.jsonl"), append(line(), '\n'), 0o600)
	os.WriteFile(filepath.Join(outDir, "custom-title.json"), []byte(`{"customTitle":"from outside"}`), 0o600)
	outProj := filepath.Join(outside, "proj")

	real := uuid.NewString()
	mustAppend(ref(real, ""))
	// The transcript is a link to a file outside.
	fileLinked := uuid.NewString()
	symlink(target, filepath.Join(projDir, fileLinked+".jsonl"))
	// The session folder is a link to a folder outside.
	dirLinked := uuid.NewString()
	mustAppend(ref(dirLinked, ""))
	symlink(outDir, filepath.Join(projDir, dirLinked))
	// A project folder is a link.
	linkedPK := "-linked-project"
	inOutProj := uuid.NewString()
	os.MkdirAll(outProj, 0o700)
	os.WriteFile(filepath.Join(outProj, inOutProj+".jsonl"), append(line(), '\n'), 0o600)
	symlink(outProj, filepath.Join(d.root, "projects", linkedPK))
	// A deleted session whose place was taken by a link.
	restored := uuid.NewString()
	mustAppend(ref(restored, ""))
	if _, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: ref(restored, "")}); err != nil {
		t.Fatal(err)
	}
	symlink(target, filepath.Join(projDir, restored+".jsonl"))
	if _, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{All: true})); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, d, api, 0, 10*time.Second)

	unary := func(f func(context.Context) error) func(context.Context) error { return f }
	read := func(r *sessiondv1.SessionRef, follow bool) func(context.Context) error {
		return func(ctx context.Context) error {
			if follow {
				return streamErr(api.Follow(ctx, &sessiondv1.ReadRequest{Session: r}))
			}
			return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: r}))
		}
	}
	appendTo := func(r *sessiondv1.SessionRef) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: r, Entries: [][]byte{line()}})
			return err
		}
	}
	linkRefusal := func(name, link string, call func(context.Context) error) hostileCase {
		return hostileCase{name: name, call: call, code: codes.FailedPrecondition, msg: []string{link + " is a symbolic link", "never reads or writes through links"}}
	}
	fileLink := filepath.Join(projDir, fileLinked+".jsonl")
	dirLink := filepath.Join(projDir, dirLinked)
	fl := ref(fileLinked, "")
	dl := ref(dirLinked, "")
	cases := []hostileCase{
		linkRefusal("transcript link: append", fileLink, appendTo(fl)),
		linkRefusal("transcript link: fork onto it", fileLink, unary(func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: ref(real, ""), NewSessionId: fileLinked})
			return err
		})),
		linkRefusal("transcript link: repair", fileLink, unary(func(ctx context.Context) error {
			_, err := recvAll(api.Repair(ctx, &sessiondv1.RepairRequest{Session: fl}))
			return err
		})),
		linkRefusal("transcript link: repair dry run", fileLink, unary(func(ctx context.Context) error {
			_, err := recvAll(api.Repair(ctx, &sessiondv1.RepairRequest{Session: fl, DryRun: true}))
			return err
		})),
		linkRefusal("transcript link: delete", fileLink, unary(func(ctx context.Context) error {
			_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: fl})
			return err
		})),
		linkRefusal("transcript link: purge", fileLink, unary(func(ctx context.Context) error {
			_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: fl, Purge: true})
			return err
		})),
		linkRefusal("transcript link: archive", fileLink, unary(func(ctx context.Context) error {
			_, err := api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: fl, Archived: true})
			return err
		})),
		linkRefusal("transcript link: rename", fileLink, unary(func(ctx context.Context) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: fl, Title: "x"})
			return err
		})),
		linkRefusal("transcript link: tag", fileLink, unary(func(ctx context.Context) error {
			_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: fl, Tag: "x"})
			return err
		})),
		linkRefusal("transcript link: read", fileLink, read(fl, false)),
		linkRefusal("transcript link: follow", fileLink, read(fl, true)),
		linkRefusal("transcript link: info", fileLink, unary(func(ctx context.Context) error {
			_, err := api.GetSession(ctx, &sessiondv1.GetSessionRequest{Session: fl})
			return err
		})),
		linkRefusal("transcript link: check", fileLink, unary(func(ctx context.Context) error {
			_, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{Session: fl}))
			return err
		})),
		linkRefusal("transcript link: flush", fileLink, unary(func(ctx context.Context) error {
			_, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{Session: fl}))
			return err
		})),
		{name: "transcript link: read without a project", call: read(&sessiondv1.SessionRef{SessionId: fileLinked}, false),
			code: codes.NotFound, msg: []string{"in any project"}},

		linkRefusal("session folder link: append to the main transcript", dirLink, appendTo(dl)),
		linkRefusal("session folder link: append to a subagent", dirLink, appendTo(ref(dirLinked, "subagents/agent-x"))),
		linkRefusal("session folder link: read a subagent", dirLink, read(ref(dirLinked, "subagents/agent-x"), false)),
		linkRefusal("session folder link: archive", dirLink, unary(func(ctx context.Context) error {
			_, err := api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: dl, Archived: true})
			return err
		})),
		linkRefusal("session folder link: delete", dirLink, unary(func(ctx context.Context) error {
			_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: dl})
			return err
		})),
		linkRefusal("session folder link: fork from it", dirLink, unary(func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: dl})
			return err
		})),
		linkRefusal("session folder link: subkeys", dirLink, unary(func(ctx context.Context) error {
			_, err := api.ListSubkeys(ctx, &sessiondv1.ListSubkeysRequest{Session: dl})
			return err
		})),

		linkRefusal("project folder link: append", filepath.Join(d.root, "projects", linkedPK), appendTo(&sessiondv1.SessionRef{
			Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: linkedPK}, SessionId: uuid.NewString()})),
		linkRefusal("project folder link: read", filepath.Join(d.root, "projects", linkedPK), read(&sessiondv1.SessionRef{
			Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: linkedPK}, SessionId: inOutProj}, false)),
		linkRefusal("restore onto a link", filepath.Join(projDir, restored+".jsonl"), unary(func(ctx context.Context) error {
			_, err := api.Restore(ctx, &sessiondv1.RestoreRequest{Session: ref(restored, "")})
			return err
		})),
	}
	listings := []hostileCase{
		{name: "listing skips the linked project", code: codes.OK, call: func(ctx context.Context) error {
			pages, err := recvAll(api.ListSessions(ctx, &sessiondv1.ListSessionsRequest{}))
			if err != nil {
				return err
			}
			var sessions []*sessiondv1.SessionInfo
			for _, p := range pages {
				sessions = append(sessions, p.GetSessions()...)
			}
			for _, s := range sessions {
				if s.GetSession().GetSessionId() == inOutProj || s.GetSession().GetSessionId() == fileLinked {
					return fmt.Errorf("listing shows %s, read through a link", s.GetSession().GetPath())
				}
			}
			return nil
		}},
		{name: "check --all skips the links", code: codes.OK, call: func(ctx context.Context) error {
			resp, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{All: true}))
			if err != nil {
				return err
			}
			for _, s := range resp {
				if id := s.GetSession().GetSessionId(); id == inOutProj || id == fileLinked || s.GetSession().GetSubpath() != "" {
					return fmt.Errorf("check --all went through a link: %s", s.GetSession().GetPath())
				}
			}
			return nil
		}},
	}
	cases = append(cases, listings...)
	runHostileCases(t, ctx, d, api, cases, 10*time.Second, outside)
}

// TestAccessPathTricksStayInside sends path tricks in every string field
// of every call. Whatever is accepted or refused, nothing appears or
// changes outside the root and state folders (the daemon's working
// directory, where a relative path would land, included), sessiond makes
// no link, every file it makes is one it is meant to make, and no trick
// produces an internal error or a crash.
func TestAccessPathTricksStayInside(t *testing.T) {
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, "x"), []byte("keep"), 0o600)
	t.Chdir(victim) // the daemon starts here: relative paths would land in victim
	d := hostileDaemon(t)
	api := d.api()
	ctx := context.Background()
	cwd := filepath.Join(t.TempDir(), "proj")
	os.Mkdir(cwd, 0o700)
	real := uuid.NewString()
	realRef := &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: real}
	realUUID := uuid.NewString()
	entry := []byte(`{"type":"user","uuid":"` + realUUID + `","message":{"role":"user","content":"hi"}}`)
	if _, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: realRef, Entries: [][]byte{entry}}); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel("/", victim)
	up := strings.Repeat("../", 12)
	tricks := []string{
		"", ".", "..", "../..", up + rel + "/x", up + rel, victim, victim + "/x", "/etc/passwd", "/",
		"a/../../../x", "./x", "x/.", "~/x", "~", "$HOME/x", "${PWD}/x", "%2e%2e%2fx", "..%2f..%2fx",
		`..\..\x`, `C:\x`, `C:x`, `\\?\C:\x`, `\\server\share\x`, "file:///etc/passwd",
		"x\x00/../../etc", "x/", "x//y", strings.Repeat("a/", 600) + "x", strings.Repeat("a", 300),
		"\u202e..", "..\u2215x", "\uff0e\uff0e/x", "subagents/../../../x", "subagents/agent-x/../../../../x",
		"x.jsonl", "x.wal/y", "projects", "journal", "trash", "-" + rel,
	}
	type field struct {
		name string
		call func(ctx context.Context, v string) error
	}
	refWith := func(set func(*sessiondv1.SessionRef, string)) func(string) *sessiondv1.SessionRef {
		return func(v string) *sessiondv1.SessionRef {
			r := &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: real}
			set(r, v)
			return r
		}
	}
	refs := map[string]func(string) *sessiondv1.SessionRef{
		"session_id":  refWith(func(r *sessiondv1.SessionRef, v string) { r.SessionId = v }),
		"cwd":         refWith(func(r *sessiondv1.SessionRef, v string) { r.Project = &sessiondv1.SessionRef_Cwd{Cwd: v} }),
		"project_key": refWith(func(r *sessiondv1.SessionRef, v string) { r.Project = &sessiondv1.SessionRef_ProjectKey{ProjectKey: v} }),
		"subpath":     refWith(func(r *sessiondv1.SessionRef, v string) { r.Subpath = v }),
	}
	var fields []field
	for fname, mk := range refs {
		mk := mk
		for _, rpc := range []struct {
			name string
			call func(ctx context.Context, r *sessiondv1.SessionRef) error
		}{
			{"Append", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: r, Entries: [][]byte{[]byte(`{"type":"user","uuid":"` + uuid.NewString() + `"}`)}})
				return err
			}},
			{"Read", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: r}))
			}},
			{"Follow", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				// A follow that is served sends the session's entries
				// first; one that is refused ends with the refusal. The
				// bound only ends a follow of a session with no entries
				// (a loaded machine took more than 50 ms to refuse one).
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				stream, err := api.Follow(ctx, &sessiondv1.ReadRequest{Session: r})
				if err == nil {
					_, err = stream.Recv()
				}
				if status.Code(err) == codes.DeadlineExceeded {
					return nil // following a session that exists
				}
				return err
			}},
			{"GetSession", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.GetSession(ctx, &sessiondv1.GetSessionRequest{Session: r})
				return err
			}},
			{"Flush", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{Session: r}))
				return err
			}},
			{"Check", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{Session: r}))
				return err
			}},
			{"CheckAll", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{Session: r, All: true}))
				return err
			}},
			{"Repair", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := recvAll(api.Repair(ctx, &sessiondv1.RepairRequest{Session: r}))
				return err
			}},
			{"Fork", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: r})
				return err
			}},
			{"Rename", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: r, Title: "t"})
				return err
			}},
			{"Tag", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: r, Tag: "t"})
				return err
			}},
			{"SetArchived", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: r, Archived: true})
				return err
			}},
			{"ListSubkeys", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.ListSubkeys(ctx, &sessiondv1.ListSubkeysRequest{Session: r})
				return err
			}},
			{"Restore", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				_, err := api.Restore(ctx, &sessiondv1.RestoreRequest{Session: r})
				return err
			}},
			{"Delete", func(ctx context.Context, r *sessiondv1.SessionRef) error {
				if r.GetSessionId() == real && r.GetSubpath() == "" {
					return nil // keep the real session for the other tricks
				}
				_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: r, Purge: true})
				return err
			}},
		} {
			rpc := rpc
			fields = append(fields, field{rpc.name + " " + fname, func(ctx context.Context, v string) error { return rpc.call(ctx, mk(v)) }})
		}
	}
	fields = append(fields,
		field{"ListSessions cwd", func(ctx context.Context, v string) error {
			_, err := recvAll(api.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Project: &sessiondv1.ListSessionsRequest_Cwd{Cwd: v}}))
			return err
		}},
		field{"ListSessions project_key", func(ctx context.Context, v string) error {
			_, err := recvAll(api.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Project: &sessiondv1.ListSessionsRequest_ProjectKey{ProjectKey: v}}))
			return err
		}},
		field{"Fork up_to_uuid", func(ctx context.Context, v string) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: realRef, UpToUuid: v})
			return err
		}},
		field{"Fork new_session_id", func(ctx context.Context, v string) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: realRef, NewSessionId: v})
			return err
		}},
		field{"Fork title", func(ctx context.Context, v string) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: realRef, Title: v})
			return err
		}},
		field{"Rename title", func(ctx context.Context, v string) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: realRef, Title: v})
			return err
		}},
		field{"Tag tag", func(ctx context.Context, v string) error {
			_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: realRef, Tag: v})
			return err
		}},
	)

	beforeVictim := snapTrees(t, victim)
	outcomes := map[codes.Code]int{}
	var odd []string
	for _, f := range fields {
		for _, v := range tricks {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := f.call(cctx, v)
			cancel()
			code := status.Code(err)
			outcomes[code]++
			switch code {
			case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition:
			default:
				odd = append(odd, fmt.Sprintf("%s %q: %v", f.name, v, err))
			}
			// A string the session id rule refuses never names a session
			// ("projects", "journal" and "trash" are safe names: they
			// stay files inside the project folder). (CheckAll looks at
			// the project only.)
			if (strings.HasSuffix(f.name, "session_id") && !strings.HasPrefix(f.name, "CheckAll") || f.name == "Fork new_session_id") && v != "" && code == codes.OK && layout.ValidateSessionID(v) != nil {
				odd = append(odd, fmt.Sprintf("%s %q was accepted", f.name, v))
			}
		}
	}
	requireAlive(t, d)
	t.Logf("%d calls: %v", len(fields)*len(tricks), outcomes)
	if len(odd) > 0 {
		t.Errorf("unexpected answers:\n  %s", strings.Join(odd, "\n  "))
	}
	if diffs := snapDiff(beforeVictim, snapTrees(t, victim), nil); len(diffs) > 0 {
		t.Errorf("files outside the root and state folders changed:\n  %s", strings.Join(diffs, "\n  "))
	}
	waitIdle(t, d, api, 0, 10*time.Second)
	// Every file is one sessiond is meant to make, where it belongs.
	L := layout.Layout{Root: d.root, StateDir: d.state}
	for p, it := range snapTrees(t, d.root, d.state) {
		if it.mode&fs.ModeSymlink != 0 {
			t.Errorf("sessiond made a link: %s -> %s", p, it.link)
			continue
		}
		if !it.mode.IsRegular() {
			continue
		}
		if _, ok := L.ParseTranscriptPath(p); ok {
			continue
		}
		if strings.HasPrefix(p, L.AckedDir()+"/") && strings.HasSuffix(p, layout.AckedExt) {
			continue // the ledger of a transcript's acknowledged entries
		}
		if _, ok := L.ParseMissingPath(p); ok {
			continue // the note of acknowledged entries missing from one
		}
		if filepath.Dir(p) == L.JournalDir() && strings.HasSuffix(p, ".wal") {
			continue // the journal's segments
		}
		if p == L.BallastPath() {
			continue // the space kept for compactions on a full disk
		}
		if p == filepath.Join(L.StateDir, owner.InfoName) || p == filepath.Join(L.StateDir, owner.FormatName) {
			continue // who holds the state folder, and its format stamp
		}
		if p == filepath.Join(L.JournalDir(), "acknowledged") {
			continue // how far the journal was acknowledged
		}
		if filepath.Base(p) == "archived.json" {
			if _, ok := L.ParseTranscriptPath(filepath.Dir(p) + ".jsonl"); ok {
				continue
			}
		}
		relState, _ := filepath.Rel(d.state, p)
		if parts := strings.Split(relState, string(filepath.Separator)); len(parts) >= 3 && (parts[0] == "trash" || parts[0] == "repairs") && layout.ValidateProjectKey(parts[1]) == nil {
			continue
		}
		t.Errorf("unexpected file %s", p)
	}
}
