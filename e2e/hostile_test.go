package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/layout"
)

// Limits the hostile daemons run with: small, so oversized inputs are cheap
// to build.
const (
	hostileMaxEntry   = 64 << 10
	hostileMaxMessage = 3 << 19 // 1.5 MiB
)

// hostileDaemon starts a sessiond with small limits and short idle timers,
// so writers retire (and release their files) quickly between cases.
func hostileDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	args := append([]string{
		"--max-entry-bytes", strconv.Itoa(hostileMaxEntry),
		"--max-message-bytes", strconv.Itoa(hostileMaxMessage),
		"--idle-compact", "50ms", "--compact-within", "50ms", "--idle-retire", "200ms",
	}, extra...)
	d := newDaemon(t, args...)
	d.start()
	return d
}

// snapItem is what a tree snapshot records about one path.
type snapItem struct {
	mode fs.FileMode
	size int64    // regular files only: folder sizes vary with the file system
	sum  [32]byte // regular files
	link string   // symlinks: the target
}

func (s snapItem) String() string {
	switch {
	case s.mode&fs.ModeSymlink != 0:
		return fmt.Sprintf("%v -> %s", s.mode, s.link)
	case s.mode.IsRegular():
		return fmt.Sprintf("%v %d bytes sha256 %x", s.mode, s.size, s.sum[:6])
	}
	return s.mode.String()
}

// snapTrees records every path under roots (never following links): type,
// permissions, and for files size and content hash.
func snapTrees(t *testing.T, roots ...string) map[string]snapItem {
	t.Helper()
	out := map[string]snapItem{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			it := snapItem{mode: fi.Mode()}
			switch {
			case fi.Mode().IsRegular():
				if it.size, it.sum, err = fileSum(p, fi); err != nil {
					return err
				}
			case fi.Mode()&fs.ModeSymlink != 0:
				if it.link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			out[p] = it
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot of %s: %v", root, err)
		}
	}
	return out
}

// sumKey is what the kernel says of a file that every write, truncate
// or rename over it changes: the inode, the size, and the modification
// and status-change times in nanoseconds (a process can set the first
// back, never the second).
type sumKey struct {
	dev, ino   uint64
	size       int64
	mtime, ctm syscall.Timespec
}

type sumEntry struct {
	key sumKey
	sum [32]byte
}

// sums remembers each file's content hash with the sumKey it was read
// under: the snapshots of the hostile and access tests read the state
// folder (a 64 MiB ballast, journal segments) twice per case, and
// hashing the same unchanged bytes again was most of their time.
var sums sync.Map // path -> sumEntry

// fileSum reads the size and content hash of the regular file p (fi its
// Lstat), or reuses the hash read last time when its sumKey has not
// changed since.
func fileSum(p string, fi fs.FileInfo) (int64, [32]byte, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		b, err := os.ReadFile(p)
		return int64(len(b)), sha256.Sum256(b), err
	}
	key := sumKey{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctm: st.Ctim}
	if e, ok := sums.Load(p); ok && e.(sumEntry).key == key {
		return key.size, e.(sumEntry).sum, nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, [32]byte{}, err
	}
	sum := sha256.Sum256(b)
	// Remembered only when read whole as stat saw it and last changed
	// well before: file times move in coarse ticks (a few ms), so a
	// write in the same tick as the one stat saw would keep the key.
	if ctime := time.Unix(st.Ctim.Unix()); int64(len(b)) == key.size && time.Since(ctime) > time.Second {
		sums.Store(p, sumEntry{key: key, sum: sum})
	}
	return int64(len(b)), sum, nil
}

// snapDiff lists what differs between two snapshots, leaving out the paths
// allowed reports as legitimately touched.
func snapDiff(before, after map[string]snapItem, allowed func(string) bool) []string {
	var diffs []string
	for p, b := range before {
		if allowed != nil && allowed(p) {
			continue
		}
		a, ok := after[p]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("removed %s (was %v)", p, b))
		case a != b:
			diffs = append(diffs, fmt.Sprintf("changed %s: %v -> %v", p, b, a))
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok && (allowed == nil || !allowed(p)) {
			diffs = append(diffs, fmt.Sprintf("created %s (%v)", p, a))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// underAny returns a predicate matching the paths equal to or below one of
// prefixes.
func underAny(prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+string(filepath.Separator)) {
				return true
			}
		}
		return false
	}
}

// streamErr drains a server stream and returns its final error (nil at a
// clean end).
func streamErr[T any](stream grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// openFDs counts the daemon's open file descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("count the daemon's descriptors: %v", err)
	}
	return len(ents)
}

// waitIdle waits until no writer is open and the daemon holds at most
// maxFDs descriptors (0: do not check), and returns the last count.
func waitIdle(t *testing.T, d *daemon, api sessiondv1.SessiondClient, maxFDs int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := api.Status(context.Background(), &sessiondv1.StatusRequest{})
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		n := openFDs(t, d.Pid())
		if st.GetActiveSessions() == 0 && (maxFDs == 0 || n <= maxFDs) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the daemon still has %d open writers and %d descriptors (want 0 and at most %d); %d compactions so far", within, st.GetActiveSessions(), n, maxFDs, st.GetCompactions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireAlive fails the test when the daemon has exited.
func requireAlive(t *testing.T, d *daemon) {
	t.Helper()
	select {
	case <-d.Exited():
		t.Fatalf("sessiond exited (%v):\n%s", d.Err(), d.LogTail(logTail))
	default:
	}
}

// hostileCase is one bad request: the code and message fragments it must
// be refused with, and the paths it may legitimately change (none for a
// refusal).
type hostileCase struct {
	name    string
	call    func(ctx context.Context) error
	code    codes.Code
	msg     []string
	touches []string           // paths (and everything below) the case may change
	setup   func(t *testing.T) // run before the "before" snapshot
	check   func(t *testing.T) // extra checks after the call
}

// TestHostileInputs sends bad requests over the real socket to the real
// daemon: each is refused with a precise code and a message saying what is
// wrong, and nothing on disk changes (root, state folder, and the folder
// outside both that a symlink points into).
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	d := hostileDaemon(t)
	api := d.api()
	ctx := context.Background()

	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	projDir := filepath.Join(d.root, "projects", pk)
	// The journal, shared by every session: only a case that
	// stores something may change it.
	journalDir := filepath.Join(d.state, "journal")
	// A compaction records the entries it moved in the transcript's
	// ledger of acknowledged entries.
	ackedDir := filepath.Join(d.state, "acked")

	byCwd := func(sid string) *sessiondv1.SessionRef {
		return &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd}, SessionId: sid}
	}
	bySub := func(sid, sub string) *sessiondv1.SessionRef {
		r := byCwd(sid)
		r.Subpath = sub
		return r
	}
	entry := func(id string) []byte {
		return []byte(`{"type":"user","uuid":"` + id + `","message":{"role":"user","content":"hi"}}`)
	}

	// Sessions that exist before the cases run.
	existing, other, linked := uuid.NewString(), uuid.NewString(), uuid.NewString()
	firstUUID := uuid.NewString()
	for _, sid := range []string{existing, other, linked} {
		req := &sessiondv1.AppendRequest{Session: byCwd(sid), Entries: [][]byte{entry(firstUUID), entry(uuid.NewString())}}
		if _, err := api.Append(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// A subagent transcript: a title or tag for it must be refused, not
	// appended to it.
	if _, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: bySub(existing, "subagents/agent-a1"), Entries: [][]byte{entry(uuid.NewString())}}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{All: true})); err != nil {
		t.Fatal(err)
	}
	// The subagent folder of one of them is a link to a folder outside
	// the root.
	if err := os.MkdirAll(filepath.Join(projDir, linked), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(projDir, linked, "subagents")); err != nil {
		t.Fatal(err)
	}

	appendTo := func(ref *sessiondv1.SessionRef, entries ...[]byte) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: ref, Entries: entries})
			return err
		}
	}
	appendEntry := func(raw string) func(context.Context) error {
		return appendTo(byCwd(uuid.NewString()), []byte(raw))
	}
	big := func(n int) []byte {
		return []byte(`{"type":"user","pad":"` + strings.Repeat("x", n) + `"}`)
	}
	batch := make([][]byte, 0, 30)
	for len(batch) < 30 {
		batch = append(batch, big(60<<10)) // 30 entries under the entry limit, 1.8 MiB in all
	}
	unknown := uuid.NewString()
	wantID := "want a UUID such as"
	dupSID, dupUUID := uuid.NewString(), uuid.NewString()
	dupLine := `{"type":"user","uuid":"` + dupUUID + `","n":1}`

	cases := []hostileCase{
		// Entries.
		{name: "invalid JSON", call: appendEntry(`{"type":"user",`), code: codes.InvalidArgument,
			msg: []string{"entry 1 of 1", "not valid JSON", "byte offset 15", "cut short"}},
		{name: "JSON array", call: appendEntry(`[{"type":"user"}]`), code: codes.InvalidArgument,
			msg: []string{"a JSON array, not an object"}},
		{name: "JSON string", call: appendEntry(`"user"`), code: codes.InvalidArgument,
			msg: []string{"a JSON string, not an object"}},
		{name: "JSON number", call: appendEntry(`42`), code: codes.InvalidArgument,
			msg: []string{"a JSON number, not an object"}},
		{name: "JSON null", call: appendEntry(`null`), code: codes.InvalidArgument,
			msg: []string{"JSON null, not an object"}},
		{name: "raw NUL byte", call: appendEntry("{\"type\":\"user\",\"t\":\"a\x00b\"}"), code: codes.InvalidArgument,
			msg: []string{"NUL byte", "byte offset 21", `\u0000`}},
		{name: "invalid UTF-8", call: appendEntry("{\"type\":\"user\",\"t\":\"a\xffb\"}"), code: codes.InvalidArgument,
			msg: []string{"invalid UTF-8", "byte offset 21", "0xff"}},
		{name: "entry over --max-entry-bytes", call: appendTo(byCwd(uuid.NewString()), big(70<<10)), code: codes.InvalidArgument,
			msg: []string{"over the 64.0 KiB limit", "--max-entry-bytes"}},
		{name: "batch over --max-message-bytes", call: appendTo(byCwd(uuid.NewString()), batch...), code: codes.ResourceExhausted,
			msg: []string{"larger than max", strconv.Itoa(hostileMaxMessage)}},
		{name: "two objects on one line", call: appendEntry(`{"type":"user"}{"type":"assistant"}`), code: codes.InvalidArgument,
			msg: []string{"more data after its JSON value", "byte offset 15", "two writers interleaved"}},
		{name: "empty entry", call: appendEntry(``), code: codes.InvalidArgument,
			msg: []string{"entry is empty"}},
		{name: "whitespace-only entry", call: appendEntry(" \n\t"), code: codes.InvalidArgument,
			msg: []string{"only whitespace"}},
		{name: "byte order mark", call: appendEntry("\xef\xbb\xbf{\"type\":\"user\"}"), code: codes.InvalidArgument,
			msg: []string{"byte order mark", "remove it"}},
		{name: "uuid not a string", call: appendEntry(`{"type":"user","uuid":7}`), code: codes.InvalidArgument,
			msg: []string{`"uuid"`, "a JSON number", "must be a string"}},
		{name: "bad entry after a good one: batch refused whole",
			call: appendTo(byCwd(uuid.NewString()), entry(uuid.NewString()), []byte(`{"type":`)), code: codes.InvalidArgument,
			msg: []string{"entry 2 of 2", "not valid JSON"}},
		{name: "no session at all", call: func(ctx context.Context) error {
			_, err := api.Append(ctx, &sessiondv1.AppendRequest{Entries: [][]byte{entry(uuid.NewString())}})
			return err
		}, code: codes.InvalidArgument, msg: []string{"session is required"}},

		// Session ids.
		{name: "session id empty", call: appendTo(byCwd(""), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"session id is empty", wantID}},
		{name: "session id with upper case, not a UUID", call: appendTo(byCwd("Session-1"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`session id "Session-1"`, "starts with 'S'", wantID}},
		{name: "session id ../x", call: appendTo(byCwd("../x"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`session id "../x"`, "starts with '.'", wantID}},
		{name: "session id ..", call: appendTo(byCwd(".."), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`session id ".."`, wantID}},
		{name: "session id with a separator", call: appendTo(byCwd("a/../../x"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`session id "a/../../x"`, "'/' at position 2", wantID}},
		{name: "session id with a backslash", call: appendTo(byCwd(`a\..\x`), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"at position 2", wantID}},
		{name: "session id absolute path", call: appendTo(byCwd("/etc/passwd"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`session id "/etc/passwd"`, wantID}},
		{name: "session id uppercase in braces", call: appendTo(byCwd("{"+strings.ToUpper(uuid.NewString())+"}"), entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"starts with '{'", wantID}},
		{name: "session id traversal of UUID length", call: appendTo(byCwd("../../../../../../../../../etc/passw"), entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"starts with '.'", wantID}},
		{name: "session id with NUL", call: appendTo(byCwd(unknown[:35]+"\x00"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"the byte 0x00 at position 36", wantID}},
		{name: "session id overlong", call: appendTo(byCwd(strings.Repeat("s", 129)), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"129 bytes long, over 128", wantID}},
		{name: "session id named like a transcript", call: appendTo(byCwd("s.jsonl"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`ends in ".jsonl"`, wantID}},
		{name: "session id named like a ledger", call: appendTo(byCwd("s.acked"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`ends in ".acked"`, wantID}},
		{name: "session id named like the store sidecar", call: appendTo(byCwd("sessiond-store.json"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`ends in ".json"`, wantID}},
		{name: "session id a flag", call: appendTo(byCwd("-rf"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"starts with '-'", wantID}},

		// Working directories.
		{name: "cwd relative", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: "work/proj"}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{`cwd "work/proj" is a relative path`, "absolute path"}},
		{name: "cwd and project unset for append", call: appendTo(&sessiondv1.SessionRef{SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"the project is required", "set cwd"}},
		{name: "cwd set but empty", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: ""}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"cwd is empty"}},
		{name: "cwd with NUL", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_Cwd{Cwd: cwd + "\x00/../../etc"}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"contains a NUL byte"}},

		// Project keys.
		{name: "project key ..", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: ".."}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{`project key ".."`, "one folder name"}},
		{name: "project key with /", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: pk + "/../x"}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"contains a path separator '/'"}},
		{name: "project key empty", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: ""}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"project key is empty"}},
		{name: "project key only spaces", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: "   "}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{`project key "   " is only whitespace`}},
		{name: "project key with newline", call: appendTo(&sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: "-tmp-x\n"}, SessionId: uuid.NewString()}, entry(uuid.NewString())),
			code: codes.InvalidArgument, msg: []string{"control character U+000A"}},
		{name: "list: project key ..", call: func(ctx context.Context) error {
			_, err := recvAll(api.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Project: &sessiondv1.ListSessionsRequest_ProjectKey{ProjectKey: ".."}}))
			return err
		}, code: codes.InvalidArgument, msg: []string{`project key ".."`}},
		{name: "check all: project key with /", call: func(ctx context.Context) error {
			_, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{All: true, Session: &sessiondv1.SessionRef{Project: &sessiondv1.SessionRef_ProjectKey{ProjectKey: "a/../../etc"}}}))
			return err
		}, code: codes.InvalidArgument, msg: []string{"path separator"}},

		// Subpaths ("" is the main transcript).
		{name: "subpath /", call: appendTo(bySub(existing, "/"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`subpath "/" is an absolute path`}},
		{name: "subpath absolute", call: appendTo(bySub(existing, "/etc/x"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`subpath "/etc/x" is an absolute path`}},
		{name: "subpath drive prefix", call: appendTo(bySub(existing, `C:\x`), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`drive prefix "C:"`}},
		{name: "subpath a/./b", call: appendTo(bySub(existing, "a/./b"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`"." component`}},
		{name: "subpath a/../b", call: appendTo(bySub(existing, "a/../b"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`".." component`}},
		{name: "subpath ..", call: appendTo(bySub(existing, ".."), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`".." component`}},
		{name: "subpath with NUL", call: appendTo(bySub(existing, "subagents/agent-\x00x"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"control character U+0000 at byte 16"}},
		{name: "subpath ending .jsonl", call: appendTo(bySub(existing, "subagents/agent-x.jsonl"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{`ends in ".jsonl"`, "without the extension"}},
		{name: "subpath backslash", call: appendTo(bySub(existing, `subagents\agent-x`), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"contains a backslash", "separate folders with '/'"}},
		{name: "subpath a//b", call: appendTo(bySub(existing, "subagents//agent-x"), entry(uuid.NewString())), code: codes.InvalidArgument,
			msg: []string{"empty component"}},
		{name: "subpath through a symlink out of the root", call: appendTo(bySub(linked, "subagents/agent-x"), entry(uuid.NewString())),
			code: codes.FailedPrecondition, msg: []string{filepath.Join(projDir, linked, "subagents"), "symbolic link", "never"}},
		{name: "read through a symlink out of the root", call: func(ctx context.Context) error {
			return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: bySub(linked, "subagents/agent-x")}))
		}, code: codes.FailedPrecondition, msg: []string{"symbolic link"}},
		{name: "restore with subpath ../../x", call: func(ctx context.Context) error {
			_, err := api.Restore(ctx, &sessiondv1.RestoreRequest{Session: bySub(existing, "../../x")})
			return err
		}, code: codes.InvalidArgument, msg: []string{`".." component`}},
		{name: "delete with subpath ..", call: func(ctx context.Context) error {
			_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: bySub(existing, ".."), Purge: true})
			return err
		}, code: codes.InvalidArgument, msg: []string{`".." component`}},

		// Unknown sessions.
		{name: "read unknown", call: func(ctx context.Context) error {
			return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: byCwd(unknown)}))
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "read unknown, no project", call: func(ctx context.Context) error {
			return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: &sessiondv1.SessionRef{SessionId: unknown}}))
		}, code: codes.NotFound, msg: []string{unknown, "in any project"}},
		{name: "follow unknown", call: func(ctx context.Context) error {
			return streamErr(api.Follow(ctx, &sessiondv1.ReadRequest{Session: byCwd(unknown)}))
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "check unknown", call: func(ctx context.Context) error {
			_, err := recvAll(api.Check(ctx, &sessiondv1.CheckRequest{Session: byCwd(unknown)}))
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "repair unknown", call: func(ctx context.Context) error {
			_, err := recvAll(api.Repair(ctx, &sessiondv1.RepairRequest{Session: byCwd(unknown)}))
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "fork unknown", call: func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: byCwd(unknown)})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "info unknown", call: func(ctx context.Context) error {
			_, err := api.GetSession(ctx, &sessiondv1.GetSessionRequest{Session: byCwd(unknown)})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "flush unknown", call: func(ctx context.Context) error {
			_, err := recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{Session: byCwd(unknown)}))
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "rename unknown", call: func(ctx context.Context) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: byCwd(unknown), Title: "t"})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "tag unknown", call: func(ctx context.Context) error {
			_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: byCwd(unknown), Tag: "t"})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "archive unknown", call: func(ctx context.Context) error {
			_, err := api.SetArchived(ctx, &sessiondv1.SetArchivedRequest{Session: byCwd(unknown), Archived: true})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "rename a subagent transcript", call: func(ctx context.Context) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: bySub(existing, "subagents/agent-a1"), Title: "t"})
			return err
		}, code: codes.InvalidArgument, msg: []string{"whole session", "subagents/agent-a1"}},
		{name: "tag a subagent transcript", call: func(ctx context.Context) error {
			_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: bySub(existing, "subagents/agent-a1"), Tag: "t"})
			return err
		}, code: codes.InvalidArgument, msg: []string{"whole session", "subagents/agent-a1"}},
		{name: "delete unknown", call: func(ctx context.Context) error {
			_, err := api.Delete(ctx, &sessiondv1.DeleteRequest{Session: byCwd(unknown)})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "not found"}},
		{name: "restore unknown", call: func(ctx context.Context) error {
			_, err := api.Restore(ctx, &sessiondv1.RestoreRequest{Session: &sessiondv1.SessionRef{SessionId: unknown}})
			return err
		}, code: codes.NotFound, msg: []string{unknown, "in the trash"}},
		{name: "unknown subagent of a known session", call: func(ctx context.Context) error {
			return streamErr(api.Read(ctx, &sessiondv1.ReadRequest{Session: bySub(existing, "subagents/agent-nope")}))
		}, code: codes.NotFound, msg: []string{"subagents/agent-nope", "not found"}},

		// Fork and rename.
		{name: "fork onto an existing id", call: func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: byCwd(existing), NewSessionId: other})
			return err
		}, code: codes.AlreadyExists, msg: []string{other, "already exists", "never overwrites"}},
		{name: "fork up to an unknown uuid", call: func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: byCwd(existing), UpToUuid: unknown, NewSessionId: uuid.NewString()})
			return err
		}, code: codes.NotFound, msg: []string{unknown}},
		{name: "fork to a new id that is a path", call: func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: byCwd(existing), NewSessionId: "../../../../../../../tmp/evil-fork-xxxxx"})
			return err
		}, code: codes.InvalidArgument, msg: []string{"new session id", wantID}},
		{name: "fork of a subagent transcript", call: func(ctx context.Context) error {
			_, err := api.Fork(ctx, &sessiondv1.ForkRequest{Session: bySub(existing, "subagents/agent-nope")})
			return err
		}, code: codes.InvalidArgument, msg: []string{"fork copies a main session"}},
		{name: "rename with empty title", call: func(ctx context.Context) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: byCwd(existing), Title: ""})
			return err
		}, code: codes.InvalidArgument, msg: []string{"title must be non-empty"}},
		{name: "rename with blank title", call: func(ctx context.Context) error {
			_, err := api.Rename(ctx, &sessiondv1.RenameRequest{Session: byCwd(existing), Title: " \t "})
			return err
		}, code: codes.InvalidArgument, msg: []string{"title must be non-empty"}},
		{name: "tag with a line break", call: func(ctx context.Context) error {
			_, err := api.Tag(ctx, &sessiondv1.TagRequest{Session: byCwd(existing), Tag: "a\nb"})
			return err
		}, code: codes.InvalidArgument, msg: []string{"tag"}},

		// Duplicates are accepted, not errors: the file holds one copy.
		{name: "duplicate uuids within and across batches", code: codes.OK, call: func(ctx context.Context) error {
			ref := byCwd(dupSID)
			other := `{"type":"user","n":2}` // no uuid: stored as sent
			r, err := api.Append(ctx, &sessiondv1.AppendRequest{Session: ref, Entries: [][]byte{[]byte(dupLine), []byte(other), []byte(dupLine)}})
			if err != nil {
				return err
			}
			want := []sessiondv1.EntryOutcome{sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED, sessiondv1.EntryOutcome_ENTRY_OUTCOME_STORED, sessiondv1.EntryOutcome_ENTRY_OUTCOME_DUPLICATE}
			for i, res := range r.GetResults() {
				if res.GetOutcome() != want[i] {
					return fmt.Errorf("first batch: entry %d is %v, want %v", i, res.GetOutcome(), want[i])
				}
			}
			r, err = api.Append(ctx, &sessiondv1.AppendRequest{Session: ref, Entries: [][]byte{[]byte(" " + dupLine + "\n")}})
			if err != nil {
				return err
			}
			if o := r.GetResults()[0].GetOutcome(); o != sessiondv1.EntryOutcome_ENTRY_OUTCOME_DUPLICATE || r.GetEntries() != 2 {
				return fmt.Errorf("second batch: %v with %d entries, want a duplicate and 2 entries", o, r.GetEntries())
			}
			_, err = recvAll(api.Flush(ctx, &sessiondv1.FlushRequest{Session: ref}))
			return err
		}, touches: []string{filepath.Join(projDir, dupSID+".jsonl"), journalDir, ackedDir},
			check: func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(projDir, dupSID+".jsonl"))
				if want := dupLine + "\n" + `{"type":"user","n":2}` + "\n"; err != nil || string(b) != want {
					t.Fatalf("transcript holds %q (%v), want %q", b, err, want)
				}
				if fi, err := os.Stat(filepath.Join(projDir, dupSID+".jsonl")); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("transcript mode %v (%v), want 0600", fi.Mode(), err)
				}
			}},
	}

	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	waitIdle(t, d, api, 0, 10*time.Second)
	runHostileCases(t, ctx, d, api, cases, 20*time.Second, outside)
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Fatalf("files were written outside the root through the symlink: %v", ents)
	}
}

// runHostileCases runs each case against d, each call within timeout: it
// must end with the case's code and message fragments, leave the daemon
// alive with every writer retired, and change nothing under d's root, d's
// state folder or the extra folders but what the case touches.
func runHostileCases(t *testing.T, ctx context.Context, d *daemon, api sessiondv1.SessiondClient, cases []hostileCase, timeout time.Duration, extra ...string) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			roots := append([]string{d.root, d.state}, extra...)
			before := snapTrees(t, roots...)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := tc.call(cctx)
			cancel()
			st, _ := status.FromError(err)
			t.Logf("%v: %s", st.Code(), st.Message())
			if st.Code() != tc.code {
				t.Errorf("got %v %q, want code %v", st.Code(), st.Message(), tc.code)
			}
			for _, frag := range tc.msg {
				if !strings.Contains(st.Message(), frag) {
					t.Errorf("message %q lacks %q", st.Message(), frag)
				}
			}
			// Writers a case started must not write anything later
			// either: compare once they have all retired.
			waitIdle(t, d, api, 0, 10*time.Second)
			requireAlive(t, d)
			if diffs := snapDiff(before, snapTrees(t, roots...), underAny(tc.touches...)); len(diffs) > 0 {
				t.Errorf("the disk changed:\n  %s", strings.Join(diffs, "\n  "))
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}

// TestSnapTreesSeesSameSizeRewrite: a file rewritten in place with other
// bytes of the same size, after its hash was remembered, still shows as
// changed.
func TestSnapTreesSeesSameSizeRewrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("aaaa"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // old enough to be remembered
	before := snapTrees(t, dir)
	if e, ok := sums.Load(p); !ok || e.(sumEntry).key.size != 4 {
		t.Fatalf("the hash of a file unchanged for a second is not remembered: %v", e)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("b"), 2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if diffs := snapDiff(before, snapTrees(t, dir), func(string) bool { return false }); len(diffs) != 1 {
		t.Fatalf("a same-size rewrite shows as %q, want one difference", diffs)
	}
}
