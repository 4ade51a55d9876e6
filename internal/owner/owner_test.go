package owner

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestMain lets the test binary play the other process: with
// OWNER_TEST_HOLD=<state>:<root> it takes the claim, says so, and holds it
// until killed.
func TestMain(m *testing.M) {
	if v := os.Getenv("OWNER_TEST_HOLD"); v != "" {
		state, root, _ := strings.Cut(v, ":")
		_, err := Acquire(fsys.OS, layout.Layout{StateDir: state, Root: root}, Self("test-1.2", "/run/test.sock"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("held")
		select {}
	}
	os.Exit(m.Run())
}

// holdInChild starts another process holding state and root, and returns
// it once the claim is held.
func holdInChild(t *testing.T, state, root string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OWNER_TEST_HOLD="+state+":"+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		t.Fatalf("holder said %q (%v)", line, err)
	}
	return cmd
}

// tree lists every file under dir with its size, mode and time, to tell
// whether a refused process changed anything.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func TestSecondProcessRefusedOnTheStateFolder(t *testing.T) {
	base := t.TempDir()
	l := layout.Layout{StateDir: filepath.Join(base, "state"), Root: filepath.Join(base, "root")}
	child := holdInChild(t, l.StateDir, l.Root)
	os.WriteFile(filepath.Join(l.StateDir, "wal-segment"), []byte("acknowledged"), 0o600)
	before := tree(t, base)

	for i := 0; i < 3; i++ {
		_, err := Acquire(fsys.OS, l, Self("test-9", "/other.sock"))
		var oe *OwnedError
		if !errors.As(err, &oe) || !errors.Is(err, ErrOwned) {
			t.Fatalf("second claim: %v, want an OwnedError", err)
		}
		if oe.What != "state folder" || oe.PID != child.Process.Pid || oe.Holder == nil {
			t.Fatalf("refusal %+v, want the state folder held by pid %d with its record", oe, child.Process.Pid)
		}
		msg := err.Error()
		for _, want := range []string{l.StateDir, fmt.Sprintf("pid %d", child.Process.Pid), "test-1.2",
			"serving on /run/test.sock", "since ", "systemctl --user stop sessiond", "--state-dir"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
	}
	if after := tree(t, base); after != before {
		t.Fatalf("the refused process changed files:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The kernel drops the lock with its holder, however it dies.
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	c, err := Acquire(fsys.OS, l, Self("test-9", "/other.sock"))
	if err != nil {
		t.Fatalf("after the holder's kill -9: %v", err)
	}
	if h, ok := readInfo(fsys.OS, l.StateDir); !ok || h.PID != os.Getpid() || h.Version != "test-9" {
		t.Fatalf("owner record %+v %v, want this process", h, ok)
	}
	c.Release()
}

func TestSecondProcessRefusedOnTheRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	child := holdInChild(t, filepath.Join(base, "stateA"), root)
	link := filepath.Join(base, "root-link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{root, link, root + "/"} {
		_, err := Acquire(fsys.OS, layout.Layout{StateDir: filepath.Join(base, "stateB"), Root: r}, Self("v", ""))
		var oe *OwnedError
		if !errors.As(err, &oe) || oe.What != "transcripts root" {
			t.Fatalf("root %s: %v, want the root refused", r, err)
		}
		if oe.PID != child.Process.Pid {
			t.Errorf("root %s: holder pid %d, want %d", r, oe.PID, child.Process.Pid)
		}
		if !strings.Contains(err.Error(), "state folder "+filepath.Join(base, "stateA")) {
			t.Errorf("message %q does not name the holder's state folder", err)
		}
	}
	// The refused process let its own state folder go: another may take it.
	c, err := Acquire(fsys.OS, layout.Layout{StateDir: filepath.Join(base, "stateB"), Root: filepath.Join(base, "root2")}, Self("v", ""))
	if err != nil {
		t.Fatalf("state folder B after the refusal: %v", err)
	}
	c.Release()
}

func TestReleaseAndSameProcess(t *testing.T) {
	base := t.TempDir()
	l := layout.Layout{StateDir: filepath.Join(base, "s"), Root: filepath.Join(base, "r")}
	c, err := Acquire(fsys.OS, l, Self("v", ""))
	if err != nil {
		t.Fatal(err)
	}
	// Two claims of one process exclude each other too (flock is per open
	// file), which is what lets tests play a second process in-process.
	if _, err := Acquire(fsys.OS, l, Self("v", "")); !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), "this very process") {
		t.Fatalf("second claim in one process: %v", err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	c.Release() // twice is fine
	c, err = Acquire(fsys.OS, l, Self("v", ""))
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	c.Release()
	// Root and state folder the same: one lock, not a refusal of itself.
	c, err = Acquire(fsys.OS, layout.Layout{StateDir: l.StateDir, Root: l.StateDir}, Self("v", ""))
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
}

func TestFormatStamp(t *testing.T) {
	for _, tc := range []struct {
		name, stamp string
		want        error
		msg         string
	}{
		{"absent", "", nil, ""},
		{"current", fmt.Sprintf("sessiond-state %d\n", Format), nil, ""},
		{"newer", fmt.Sprintf("sessiond-state %d\n", Format+1), ErrFormat, "written by a newer sessiond"},
		{"older", "sessiond-state 1\n", ErrFormat, "does not read: finish with the build that wrote it"},
		{"foreign", "hello\n", ErrFormat, "not a sessiond format stamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			l := layout.Layout{StateDir: filepath.Join(base, "s"), Root: filepath.Join(base, "r")}
			os.MkdirAll(l.StateDir, 0o700)
			if tc.stamp != "" {
				os.WriteFile(filepath.Join(l.StateDir, FormatName), []byte(tc.stamp), 0o600)
			}
			c, err := Acquire(fsys.OS, l, Self("v", ""))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				b, _ := os.ReadFile(filepath.Join(l.StateDir, FormatName))
				if string(b) != fmt.Sprintf("sessiond-state %d\n", Format) {
					t.Fatalf("stamp %q", b)
				}
				c.Release()
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.msg)
			}
			b, _ := os.ReadFile(filepath.Join(l.StateDir, FormatName))
			if string(b) != tc.stamp {
				t.Fatalf("the stamp was changed to %q", b)
			}
			// Refused: the locks are not kept.
			if lk, err := fsys.OS.Lock(l.StateDir); err != nil {
				t.Fatalf("state folder still locked after the refusal: %v", err)
			} else {
				lk.Close()
			}
		})
	}
}

// An unstamped state folder holding a development build's journal in
// <state>/wal is refused and left as it is.
func TestOlderJournalRefused(t *testing.T) {
	for _, tc := range []struct{ name, path, msg string }{
		{"wal folder", "wal/0000000000000001.wal", "holds a journal in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			l := layout.Layout{StateDir: filepath.Join(base, "s"), Root: filepath.Join(base, "r")}
			p := filepath.Join(l.StateDir, tc.path)
			os.MkdirAll(filepath.Dir(p), 0o700)
			os.WriteFile(p, []byte("entries"), 0o600)
			_, err := Acquire(fsys.OS, l, Self("v", ""))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "sessionctl flush --all") {
				t.Fatalf("got %v, want ErrFormat saying %q and what to do", err, tc.msg)
			}
			if _, err := os.Stat(filepath.Join(l.StateDir, FormatName)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a refused folder was stamped: %v", err)
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != "entries" {
				t.Fatalf("the older journal was touched: %q %v", b, err)
			}
		})
	}
}

// A stamp that cannot be read is not an absent one: the start fails and
// the stamp is left alone.
func TestFormatStampUnreadable(t *testing.T) {
	c := fstest.NewCrashFS()
	if err := c.WriteFile("/s/format", []byte("sessiond-state 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ff := fstest.NewFaultFS(c)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: func(p string) bool { return p == "/s/format" }, Err: syscall.EMFILE})
	_, err := Acquire(ff, layout.Layout{StateDir: "/s", Root: "/r"}, Self("v", ""))
	if err == nil || errors.Is(err, ErrFormat) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("got %v, want the read's EMFILE", err)
	}
	if c.LockHeld("/s") || c.LockHeld("/r") {
		t.Fatal("locks kept after a failed start")
	}
	if b, _ := c.ReadFile("/s/format"); string(b) != "sessiond-state 1\n" {
		t.Fatalf("stamp now %q", b)
	}
}

// The refused process's only operations are the lock and the reads of
// the holder's record: it creates, writes, syncs and removes nothing.
func TestRefusedProcessOnlyLocksAndReads(t *testing.T) {
	c := fstest.NewCrashFS()
	l := layout.Layout{StateDir: "/state", Root: "/root"}
	first, err := Acquire(c, l, Holder{PID: 4242, Program: "sessiond"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	ff := fstest.NewFaultFS(c)
	ff.CountReads(true)
	var ops []string
	ff.Trace(func(ev fstest.Event) { ops = append(ops, ev.Op.String()+" "+ev.Path) })
	_, err = Acquire(ff, l, Self("v", ""))
	var oe *OwnedError
	if !errors.As(err, &oe) || oe.Holder == nil || oe.Holder.PID != 4242 {
		t.Fatalf("got %v, want the holder pid 4242 named", err)
	}
	for _, op := range ops {
		if !strings.HasPrefix(op, "lock ") && !strings.HasPrefix(op, "open /state/owner") && !strings.HasPrefix(op, "read ") {
			t.Errorf("the refused process did %s", op)
		}
	}
	if len(ops) == 0 || ops[0] != "lock /state" {
		t.Fatalf("operations %v, want the state folder's lock first", ops)
	}
}

func TestOwnedErrorWithoutRecord(t *testing.T) {
	e := &OwnedError{What: "transcripts root", Path: "/r", PID: 77}
	if s := e.Error(); !strings.Contains(s, "(pid 77)") || !strings.Contains(s, "kill 77") {
		t.Fatal(s)
	}
}

// A claim says whether the state folder was new (no stamp yet), so the
// first start can say what it makes there; the next start is not fresh.
func TestClaimFresh(t *testing.T) {
	base := t.TempDir()
	l := layout.Layout{StateDir: filepath.Join(base, "s"), Root: filepath.Join(base, "r")}
	for i, want := range []bool{true, false} {
		c, err := Acquire(fsys.OS, l, Self("v", ""))
		if err != nil {
			t.Fatal(err)
		}
		if c.Fresh() != want {
			t.Errorf("start %d: Fresh() = %v, want %v", i+1, c.Fresh(), want)
		}
		c.Release()
	}
}

// TestStartAfterACrashAtEveryStep: a start killed (or the power lost) at
// any operation of its claim, the format stamp's first write included,
// never keeps the next start from claiming the folder: a temp file of
// that write left behind failed every later start with "file exists".
func TestStartAfterACrashAtEveryStep(t *testing.T) {
	l := layout.Layout{StateDir: "/s", Root: "/r"}
	for n := int64(1); ; n++ {
		c := fstest.NewCrashFS()
		c.CrashAt(n)
		claim, err := Acquire(c, l, Self("v", ""))
		if crashed, _ := c.Crashed(); !crashed {
			if err != nil {
				t.Fatal(err)
			}
			claim.Release()
			if n < 5 {
				t.Fatalf("only %d operations: the sweep covered nothing", n)
			}
			return
		}
		for name, after := range map[string]*fstest.CrashFS{"kill": c.KillClone(), "power loss": c.CrashClone(nil)} {
			claim, err := Acquire(after, l, Self("v", ""))
			if err != nil {
				t.Fatalf("crash at operation %d, then a %s: the next start: %v", n, name, err)
			}
			if b, err := after.ReadFile("/s/" + FormatName); err != nil || !strings.HasPrefix(string(b), formatTag+" ") {
				t.Fatalf("crash at operation %d, then a %s: stamp %q, %v", n, name, b, err)
			}
			claim.Release()
		}
	}
}
