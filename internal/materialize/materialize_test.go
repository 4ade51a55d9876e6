package materialize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

const (
	sid = "6f1c5fbb-1f6e-4b8e-9b9e-0a3f3c1f2a10"
	pk  = "-home-me-project"
)

// fakeSource serves transcripts from memory; before, when set, runs
// before each transcript is read and may fail it.
type fakeSource struct {
	key     layout.Key // what Resolve answers
	cwd     string
	subkeys []string
	lines   map[string][]string // by subpath
	before  func(k layout.Key) error
	after   func(k layout.Key) // once every line was given, before Lines returns
}

func (s *fakeSource) Resolve(_ context.Context, ref Ref) (Session, error) {
	if !strings.EqualFold(ref.SessionID, s.key.SessionID) {
		return Session{}, fmt.Errorf("session %s: %w", ref.SessionID, errdefs.ErrNotFound)
	}
	return Session{Key: s.key, Cwd: s.cwd}, nil
}

func (s *fakeSource) Subkeys(context.Context, layout.Key) ([]string, error) { return s.subkeys, nil }

func (s *fakeSource) Lines(ctx context.Context, k layout.Key, fn func([]byte) error) error {
	if s.before != nil {
		if err := s.before(k); err != nil {
			return err
		}
	}
	lines, ok := s.lines[k.Subpath]
	if !ok {
		return fmt.Errorf("transcript %s: %w", k, errdefs.ErrNotFound)
	}
	for _, l := range lines {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn([]byte(l)); err != nil {
			return err
		}
	}
	if s.after != nil {
		s.after(k)
	}
	return nil
}

// session is a main transcript (with a metadata entry of its own, which
// stays a line), a subagent with two agent_metadata entries, one nested
// deeper, and one with nothing but metadata.
func session() *fakeSource {
	return &fakeSource{
		key:     layout.Key{ProjectKey: pk, SessionID: sid},
		cwd:     "/home/me/project",
		subkeys: []string{"subagents/agent-a", "subagents/agent-meta-only", "subagents/workflows/run-1/agent-b"},
		lines: map[string][]string{
			"": {
				`{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}`,
				`{"type":"agent_metadata","agentType":"main-is-kept"}`,
				`{"type":"custom-title","customTitle":"T","sessionId":"` + sid + `"}`,
				`{"torn`,
			},
			"subagents/agent-a": {
				`{"type":"agent_metadata","agentType":"old"}`,
				`{"type":"user","uuid":"a1","isSidechain":true}`,
				`{"type":"agent_metadata", "agentType":"Explore","toolUseId":"toolu_1"}`,
				`{"type":"assistant","uuid":"a2","parentUuid":"a1","isSidechain":true}`,
			},
			"subagents/agent-meta-only":         {`{"type":"agent_metadata","agentType":"x"}`},
			"subagents/workflows/run-1/agent-b": {`{"type":"user","uuid":"b1"}`},
		},
	}
}

// tree lists every file and folder below dir with its mode and, for a
// file, its content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			to, _ := os.Readlink(p)
			out[rel] = "-> " + to
			return nil
		}
		if d.IsDir() {
			out[rel+"/"] = fmt.Sprintf("%04o", fi.Mode().Perm())
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%04o %s", fi.Mode().Perm(), b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMaterializeWritesTheSessionLikeTheSDK(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "copy")
	res, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: strings.ToUpper(sid)}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := "projects/" + pk + "/"
	want := map[string]string{
		"./":                                    "0700",
		"projects/":                             "0700",
		p:                                       "0700",
		p + sid + "/":                           "0700",
		p + sid + "/subagents/":                 "0700",
		p + sid + "/subagents/workflows/":       "0700",
		p + sid + "/subagents/workflows/run-1/": "0700",
		p + sid + ".jsonl": "0600 " + `{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}` + "\n" +
			`{"type":"agent_metadata","agentType":"main-is-kept"}` + "\n" +
			`{"type":"custom-title","customTitle":"T","sessionId":"` + sid + `"}` + "\n" + `{"torn` + "\n",
		p + sid + "/subagents/agent-a.jsonl": "0600 " + `{"type":"user","uuid":"a1","isSidechain":true}` + "\n" +
			`{"type":"assistant","uuid":"a2","parentUuid":"a1","isSidechain":true}` + "\n",
		// The last agent_metadata entry without its type, the members'
		// bytes and order kept, as the SDK writes the sidecar.
		p + sid + "/subagents/agent-a.meta.json":             "0600 " + `{"agentType":"Explore","toolUseId":"toolu_1"}`,
		p + sid + "/subagents/agent-meta-only.meta.json":     "0600 " + `{"agentType":"x"}`,
		p + sid + "/subagents/workflows/run-1/agent-b.jsonl": "0600 " + `{"type":"user","uuid":"b1"}` + "\n",
	}
	got := tree(t, dir)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the copy holds\n%v\nwant\n%v", sorted(got), sorted(want))
	}
	if res.Dir != dir || res.Session.Key.SessionID != sid || res.Transcripts() != 3 || len(res.Files) != 5 {
		t.Errorf("result %+v", res)
	}
	if e, _ := res.Totals(); e != 7 {
		t.Errorf("%d entries counted, want 7 (4 main, 2 + 1 subagents)", e)
	}
}

func sorted(m map[string]string) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %q\n", k, m[k])
	}
	return b.String()
}

// gone fails the test unless path does not exist.
func gone(t *testing.T, path, why string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: %s is still there (%v): %v", why, path, err, tree(t, path))
	}
}

// TestMaterializeRefusesNames: names that cannot become paths, from the
// caller (refused before anything is made) or from the source (the
// folder made is removed), as seed 003 demands.
func TestMaterializeRefusesNames(t *testing.T) {
	// (A short lower-case name such as "6f1c5fbb" is a valid session id:
	// a name, not a UUID. Upper case is a UUID's alone.)
	for _, id := range []string{"", "6F1C5FBB", "../../etc/passwd", sid + "X", "{" + sid[1:35] + "}", strings.Replace(sid, "-", "/", 1), ".hidden", "s.jsonl"} {
		dir := filepath.Join(t.TempDir(), "copy")
		_, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: id}, Dir: dir})
		if !errors.Is(err, ErrRefused) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("session id %q: %v, want a refusal", id, err)
		}
		gone(t, dir, "refused id "+id)
	}
	for _, key := range []string{"..", "a/b", ".hidden", "a\x00b", ""} {
		dir := filepath.Join(t.TempDir(), "copy")
		if key != "" {
			_, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid, ProjectKey: key}, Dir: dir})
			if !errors.Is(err, ErrRefused) {
				t.Errorf("project key %q given: %v, want a refusal", key, err)
			}
			gone(t, dir, "refused project key "+key)
		}
		src := session()
		src.key.ProjectKey = key
		_, err := Materialize(context.Background(), src, Request{Ref: Ref{SessionID: sid}, Dir: dir})
		if err == nil || errors.Is(err, ErrRefused) {
			t.Errorf("project key %q from the source: %v, want an error after the folder was made", key, err)
		}
		gone(t, dir, "project key from the source "+key)
	}
	for _, sub := range []string{"", "/etc/passwd", `\\server\share`, "C:agent", "c:/x", "subagents/../../x", "./agent", "subagents/./a",
		"..", "a\x00b", `subagents\agent`, "subagents//a", "subagents/a.jsonl", "subagents/"} {
		src := session()
		src.subkeys = append(src.subkeys, sub)
		dir := filepath.Join(t.TempDir(), "copy")
		_, err := Materialize(context.Background(), src, Request{Ref: Ref{SessionID: sid}, Dir: dir})
		if err == nil || !strings.Contains(err.Error(), "materialize refuses") {
			t.Errorf("subpath %q: %v, want it refused", sub, err)
		}
		gone(t, dir, fmt.Sprintf("subpath %q", sub))
	}
	// A source that answers with another session, or lists a subpath twice.
	twice := session()
	twice.subkeys = append(twice.subkeys, "subagents/agent-a")
	for name, src := range map[string]Source{"another session": wrongAnswer{session()}, "a subpath twice": twice} {
		dir := filepath.Join(t.TempDir(), "copy")
		if _, err := Materialize(context.Background(), src, Request{Ref: Ref{SessionID: sid}, Dir: dir}); err == nil {
			t.Errorf("%s: no error", name)
		}
		gone(t, dir, name)
	}
}

// wrongAnswer resolves every session to another one.
type wrongAnswer struct{ *fakeSource }

func (w wrongAnswer) Resolve(ctx context.Context, ref Ref) (Session, error) {
	s, err := w.fakeSource.Resolve(ctx, ref)
	s.Key.SessionID = "00000000-0000-4000-8000-000000000000"
	return s, err
}

// TestMaterializeRefusesFolders: the folder must be new (in a parent that
// exists) or an empty folder of the caller's that others cannot write;
// what is refused is left exactly as it was.
func TestMaterializeRefusesFolders(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode fs.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode) // past the umask
		return p
	}
	empty := mk("empty-target", 0o700)
	link := filepath.Join(base, "link")
	if err := os.Symlink(empty, link); err != nil {
		t.Fatal(err)
	}
	full := mk("full", 0o700)
	os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o600)
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("a file"), 0o600)
	cases := map[string]string{
		"a symbolic link to an empty folder": link,
		"a folder that is not empty":         full,
		"a file":                             file,
		"a folder others may write":          mk("shared", 0o777),
		"a folder in a missing parent":       filepath.Join(base, "missing", "copy"),
		"a folder under a file":              filepath.Join(file, "copy"),
		"no folder":                          "",
	}
	if os.Geteuid() == 0 {
		foreign := mk("foreign", 0o700)
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases["a folder of another user"] = foreign
	}
	before := tree(t, base)
	for name, dir := range cases {
		_, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: dir})
		if !errors.Is(err, ErrRefused) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	if after := tree(t, base); !reflect.DeepEqual(after, before) {
		t.Errorf("refusals changed what was there:\n%s\nwas\n%s", sorted(after), sorted(before))
	}

	// An empty folder of ours is filled; on failure it is emptied and kept.
	mine := mk("mine", 0o750)
	if _, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: mine}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mine, "projects", pk, sid+".jsonl")); err != nil {
		t.Error(err)
	}
	mine2 := mk("mine2", 0o700)
	src := session()
	src.before = func(k layout.Key) error {
		if k.Subpath != "" {
			return errors.New("the source broke")
		}
		return nil
	}
	if _, err := Materialize(context.Background(), src, Request{Ref: Ref{SessionID: sid}, Dir: mine2}); err == nil || !strings.Contains(err.Error(), "the source broke") {
		t.Fatalf("got %v, want the source's error", err)
	}
	if got := tree(t, mine2); len(got) != 1 {
		t.Errorf("the empty folder given holds after a failure: %s", sorted(got))
	}
}

// TestMaterializeRemovesTheFolderOnEveryFault fails each filesystem
// operation in turn: every one is reported, and the folder is gone.
func TestMaterializeRemovesTheFolderOnEveryFault(t *testing.T) {
	count := fstest.NewFaultFS(fsys.OS)
	base := t.TempDir()
	if _, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: filepath.Join(base, "count"), FS: count}); err != nil {
		t.Fatal(err)
	}
	n := count.Ops()
	if n < 20 {
		t.Fatalf("only %d operations counted", n)
	}
	whole := tree(t, filepath.Join(base, "count"))
	failed := 0
	for i := int64(1); i <= n; i++ {
		ff := fstest.NewFaultFS(fsys.OS)
		ff.Inject(fstest.Fault{Nth: i})
		dir := filepath.Join(base, fmt.Sprint(i))
		_, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: dir, FS: ff})
		if err == nil {
			// Only a fault Materialize can get past (the removal of a
			// temp file it tries again) may end in a copy: a whole one.
			if got := tree(t, dir); !reflect.DeepEqual(got, whole) {
				t.Errorf("fault %v: no error, and the copy holds\n%s\nwant\n%s", ff.Fired(), sorted(got), sorted(whole))
			}
			os.RemoveAll(dir)
			continue
		}
		failed++
		gone(t, dir, fmt.Sprintf("after a fault at %v", ff.Fired()))
	}
	if failed < int(n)-2 {
		t.Errorf("only %d of %d faults failed the copy", failed, n)
	}
	ents, _ := os.ReadDir(base)
	if len(ents) != 1 {
		t.Errorf("left in the parent: %v", ents)
	}
}

// TestMaterializeInterrupted: the context ends (SIGINT, SIGTERM) while
// the copy is under way, or once it is written but before Materialize
// returned: the folder is removed before it returns.
func TestMaterializeInterrupted(t *testing.T) {
	for _, at := range []string{"before a subagent", "amid the main transcript", "after the last line"} {
		t.Run(at, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := session()
			sawMain := false
			switch at {
			case "before a subagent":
				src.before = func(k layout.Key) error {
					if k.Subpath != "" {
						_, err := os.Stat(filepath.Join(dir, "projects", pk, sid+".jsonl"))
						sawMain = err == nil
						cancel()
					}
					return nil
				}
			case "amid the main transcript":
				sawMain = true
				src.lines[""] = append(src.lines[""][:1], append([]string{"CANCEL"}, src.lines[""][1:]...)...)
				ctxSrc := &cancelOn{fakeSource: src, line: "CANCEL", cancel: cancel}
				_, err := Materialize(ctx, ctxSrc, Request{Ref: Ref{SessionID: sid}, Dir: dir})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, want context.Canceled", err)
				}
				gone(t, dir, at)
				return
			case "after the last line":
				sawMain = true
				src.after = func(k layout.Key) {
					if k.Subpath == src.subkeys[len(src.subkeys)-1] {
						cancel()
					}
				}
			}
			_, err := Materialize(ctx, src, Request{Ref: Ref{SessionID: sid}, Dir: dir})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if !sawMain {
				t.Error("the main transcript was not written when the context ended: not mid-copy")
			}
			gone(t, dir, at)
		})
	}
}

// cancelOn cancels when it reaches a line, as a signal arriving while a
// transcript streams in.
type cancelOn struct {
	*fakeSource
	line   string
	cancel func()
}

func (c *cancelOn) Lines(ctx context.Context, k layout.Key, fn func([]byte) error) error {
	return c.fakeSource.Lines(ctx, k, func(l []byte) error {
		if string(l) == c.line {
			c.cancel()
		}
		return fn(l)
	})
}

// TestMaterializeIsDurable: once Materialize returned, a power loss keeps
// every file whole: each was synced, and each folder entry too.
func TestMaterializeIsDurable(t *testing.T) {
	c := fstest.NewCrashFS()
	if err := c.Mkdir("/base", 0o755); err != nil {
		t.Fatal(err)
	}
	c.SyncDir("/")
	res, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: "/base/copy", FS: c})
	if err != nil {
		t.Fatal(err)
	}
	after := c.CrashClone(nil)
	for _, f := range res.Files {
		p := "/base/copy/" + f.Path
		want, err := readAll(c, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(after, p)
		if err != nil || got != want || int64(len(got)) != f.Bytes {
			t.Errorf("%s after a power loss: %q, %v; want %q (%d bytes)", f.Path, got, err, want, f.Bytes)
		}
	}
	ents, _ := after.ReadDir("/base/copy/projects/" + pk)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temp file %s left", e.Name())
		}
	}
}

func readAll(fsy fsys.FS, p string) (string, error) {
	f, err := fsy.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// TestMaterializeSaysWhenItCannotRemove: a copy that failed and could not
// be removed either says so, naming the folder, for the user to remove.
func TestMaterializeSaysWhenItCannotRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "copy")
	ff := fstest.NewFaultFS(fsys.OS)
	ff.Inject(fstest.Fault{Op: fstest.OpSync, Nth: 2})
	ff.Inject(fstest.Fault{Op: fstest.OpRemove, Sticky: true, Err: fs.ErrPermission})
	_, err := Materialize(context.Background(), session(), Request{Ref: Ref{SessionID: sid}, Dir: dir, FS: ff})
	var ce *CleanupError
	if !errors.As(err, &ce) || ce.Dir != dir || !strings.Contains(err.Error(), "removing "+dir+" failed too, remove it yourself") {
		t.Fatalf("got %v, want the failure and the folder left named", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the fault did not keep the folder: %v", err)
	}
}
