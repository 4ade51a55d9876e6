package mirror

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// TestMachineID: the default machine id is made once per state folder
// and kept (a restart holds its sessions as the same machine); another
// state folder gets another; a bad one on disk or given is refused.
func TestMachineID(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	a, err := MachineID(fsys.OS, d1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := MachineID(fsys.OS, d1)
	if err != nil || again != a {
		t.Fatalf("second read %q, %v; want %q", again, err, a)
	}
	b, err := MachineID(fsys.OS, d2)
	if err != nil || b == a || CheckMachineID(a) != nil {
		t.Fatalf("ids %q and %q (%v): want two different valid ones", a, b, err)
	}
	if host, _ := os.Hostname(); host != "" && !strings.HasPrefix(a, strings.Split(host, ".")[0]) {
		t.Fatalf("id %q does not start with the host name %q", a, host)
	}
	if err := os.WriteFile(filepath.Join(d2, "machine-id"), []byte("bad id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := MachineID(fsys.OS, d2); !errdefs.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--machine-id") {
		t.Fatalf("a bad machine-id file: %v", err)
	}
	for _, bad := range []string{"", "a b", "-x", strings.Repeat("x", 129), "é"} {
		if CheckMachineID(bad) == nil {
			t.Errorf("machine id %q accepted", bad)
		}
	}
}
