package lease

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// TestMachineID: the default machine id is made once per state folder
// and kept (a restart holds its sessions as the same machine); another
// state folder gets another; a bad one on disk or given is refused.
func TestMachineID(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	a, _, err := MachineID(fsys.OS, d1)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := MachineID(fsys.OS, d1)
	if err != nil || again != a {
		t.Fatalf("second read %q, %v; want %q", again, err, a)
	}
	b, _, err := MachineID(fsys.OS, d2)
	if err != nil || b == a || CheckMachineID(a) != nil {
		t.Fatalf("ids %q and %q (%v): want two different valid ones", a, b, err)
	}
	if host, _ := os.Hostname(); host != "" && !strings.HasPrefix(a, strings.Split(host, ".")[0]) {
		t.Fatalf("id %q does not start with the host name %q", a, host)
	}
	if err := os.WriteFile(filepath.Join(d2, "machine-id"), []byte("bad id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := MachineID(fsys.OS, d2); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--machine-id") {
		t.Fatalf("a bad machine-id file: %v", err)
	}
	for _, bad := range []string{"", "a b", "-x", strings.Repeat("x", 129), "é"} {
		if CheckMachineID(bad) == nil {
			t.Errorf("machine id %q accepted", bad)
		}
	}
}

// TestMachineIDOnAnotherMachine: a state folder copied onto another
// machine gets a new machine id there (sharing the first one's would let
// both hold the same leases); an id file from before ids recorded their
// machine is kept and told its machine.
func TestMachineIDOnAnotherMachine(t *testing.T) {
	d := t.TempDir()
	a, moved, err := MachineID(fsys.OS, d)
	if err != nil || moved {
		t.Fatal(err, moved)
	}
	orig := HostFingerprint
	t.Cleanup(func() { HostFingerprint = orig })
	HostFingerprint = func() (string, error) { return "m:another", nil }
	b, moved, err := MachineID(fsys.OS, d)
	if err != nil || !moved || b == a {
		t.Fatalf("on another machine: id %q (was %q), moved %v, %v; want a new id", b, a, moved, err)
	}
	if again, moved, _ := MachineID(fsys.OS, d); again != b || moved {
		t.Fatalf("the new machine's id is not kept: %q, moved %v", again, moved)
	}
	// An id file of one line (no machine recorded) is this machine's.
	if err := os.WriteFile(filepath.Join(d, "machine-id"), []byte("old-id-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if id, moved, err := MachineID(fsys.OS, d); id != "old-id-1" || moved || err != nil {
		t.Fatalf("one-line id file: %q %v %v", id, moved, err)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "machine-id")); string(b) != "old-id-1\nhost m:another\n" {
		t.Fatalf("id file now %q", b)
	}
}

// TestMachineIDUnreadable: a machine-id file that cannot be read (the
// process out of descriptors, a failing disk) fails MachineID: taken for
// none, it would be replaced by a new id, and the sessions this machine
// holds leases on would look held by another.
func TestMachineIDUnreadable(t *testing.T) {
	dir := t.TempDir()
	id, _, err := MachineID(fsys.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	ff := fstest.NewFaultFS(fsys.OS)
	path := filepath.Join(dir, "machine-id")
	for _, f := range []fstest.Fault{
		{Op: fstest.OpOpen, Path: func(p string) bool { return p == path }, Err: syscall.EMFILE},
		{Op: fstest.OpRead, Path: func(p string) bool { return p == path }, Err: syscall.EIO},
	} {
		ff.Inject(f)
		if got, _, err := MachineID(ff, dir); !errors.Is(err, f.Err) {
			t.Fatalf("MachineID with the file failing %v: %q, %v; want the error", f.Op, got, err)
		}
		ff.Clear()
	}
	if again, _, err := MachineID(ff, dir); err != nil || again != id {
		t.Fatalf("MachineID once the file reads: %q, %v; want %q kept", again, err, id)
	}
}

// TestHostFingerprintUnreadable: an OS machine id that is there but cannot
// be read (EMFILE at start, EACCES) fails MachineID, leaving the id file
// as it was: taken for "none", the host name would have named another
// machine and a new id been made, as if the state folder had moved.
func TestHostFingerprintUnreadable(t *testing.T) {
	read := func(errs map[string]error, content string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if err, ok := errs[p]; ok {
				return nil, err
			}
			return []byte(content), nil
		}
	}
	first, second := osMachineIDs[0], osMachineIDs[1]
	m, err := hostFingerprint(read(nil, "abc\n"), "h1")
	if err != nil || !strings.HasPrefix(m, "m:") {
		t.Fatalf("with a machine id: %q %v", m, err)
	}
	if h, err := hostFingerprint(read(map[string]error{first: fs.ErrNotExist, second: fs.ErrNotExist}, ""), "h1"); err != nil || !strings.HasPrefix(h, "h:") {
		t.Fatalf("without one: %q %v", h, err)
	}
	if got, err := hostFingerprint(read(map[string]error{first: fs.ErrNotExist}, "abc\n"), "h1"); err != nil || got != m {
		t.Fatalf("the second place: %q %v, want %q", got, err, m)
	}
	for _, e := range []error{syscall.EMFILE, syscall.EACCES, syscall.EIO} {
		if got, err := hostFingerprint(read(map[string]error{first: e}, "abc\n"), "h1"); !errors.Is(err, e) {
			t.Fatalf("%v reading %s: %q %v, want the error", e, first, got, err)
		}
	}

	d := t.TempDir()
	id, _, err := MachineID(fsys.OS, d)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(d, "machine-id"))
	orig := HostFingerprint
	t.Cleanup(func() { HostFingerprint = orig })
	HostFingerprint = func() (string, error) {
		return hostFingerprint(read(map[string]error{first: syscall.EMFILE}, ""), "h1")
	}
	if got, moved, err := MachineID(fsys.OS, d); !errors.Is(err, syscall.EMFILE) || moved {
		t.Fatalf("MachineID with the OS machine id unreadable: %q (was %q), moved %v, %v; want the error", got, id, moved, err)
	}
	if after, _ := os.ReadFile(filepath.Join(d, "machine-id")); string(after) != string(before) {
		t.Fatalf("the id file changed: %q, was %q", after, before)
	}
}

// TestMachineIDAfterACrashAtEveryStep: a machine id's write killed (or the
// power lost) at any operation never keeps the next start from having
// one: a temp file left behind failed every later start.
func TestMachineIDAfterACrashAtEveryStep(t *testing.T) {
	for n := int64(1); ; n++ {
		c := fstest.NewCrashFS()
		if err := fsys.MkdirAll(c, "/s", 0o700); err != nil {
			t.Fatal(err)
		}
		c.CrashAt(c.Ops() + n)
		_, _, err := MachineID(c, "/s")
		if crashed, _ := c.Crashed(); !crashed {
			if err != nil {
				t.Fatal(err)
			}
			if n < 4 {
				t.Fatalf("only %d operations: the sweep covered nothing", n)
			}
			return
		}
		for name, after := range map[string]*fstest.CrashFS{"kill": c.KillClone(), "power loss": c.CrashClone(nil)} {
			id, _, err := MachineID(after, "/s")
			if err != nil || CheckMachineID(id) != nil {
				t.Fatalf("crash at operation %d, then a %s: %q, %v", n, name, id, err)
			}
			if again, moved, err := MachineID(after, "/s"); again != id || moved || err != nil {
				t.Fatalf("crash at operation %d, then a %s: the id is not kept: %q then %q, %v", n, name, id, again, err)
			}
		}
	}
}
