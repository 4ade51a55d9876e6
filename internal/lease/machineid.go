package lease

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// machineIDRule keeps a machine id printable and short: it is shown in
// every refusal of an append leased elsewhere.
var machineIDRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// CheckMachineID refuses a machine id that would not read well in a
// refusal (or could not be told from another).
func CheckMachineID(id string) error {
	if !machineIDRule.MatchString(id) {
		return fmt.Errorf("machine id %q: use 1 to 128 letters, digits and . _ : @ - (starting with a letter or digit): %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// MachineID is this machine's lease holder name when none is given: the
// host name and a random suffix, made once and kept in
// <stateDir>/machine-id, so that a restart holds its sessions as the
// same machine and two machines with one host name (containers) differ.
//
// The file also records which machine made it (HostFingerprint). A state
// folder copied onto another machine (a backup restored there, a cloned
// home) must not hold leases under the first machine's name, or both
// would write the same sessions: there MachineID makes a new id, and
// moved says so for the log.
func MachineID(fsy fsys.FS, stateDir string) (id string, moved bool, err error) {
	path := filepath.Join(stateDir, "machine-id")
	here, err := HostFingerprint()
	if err != nil {
		// Taken for "no machine id", the host name would name another
		// machine, and this one would take a new id, as if moved.
		return "", false, err
	}
	b, err := readSmall(fsy, path)
	switch {
	case err == nil:
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		id = strings.TrimSpace(lines[0])
		if err := CheckMachineID(id); err != nil {
			return "", false, fmt.Errorf("%s: %w (remove it, or pass --machine-id)", path, err)
		}
		made := ""
		if len(lines) > 1 {
			made = strings.TrimPrefix(strings.TrimSpace(lines[1]), "host ")
		}
		if made == here {
			return id, false, nil
		}
		if made == "" {
			// Made before ids recorded their machine: it was made here.
			return id, false, writeMachineID(fsy, path, id, here)
		}
		moved = true
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return -1
	}, host)
	if host == "" || len(host) > 100 {
		host = "sessiond"
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", false, err
	}
	id = host + "-" + hex.EncodeToString(rnd[:])
	return id, moved, writeMachineID(fsy, path, id, here)
}

func writeMachineID(fsy fsys.FS, path, id, host string) error {
	if err := fsys.WriteFileAtomicOwned(fsy, path, ".machine-id.tmp", 0o600, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s\nhost %s\n", id, host)
		return err
	}); err != nil {
		return fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	return nil
}

// HostFingerprint names this machine for the machine-id file: a hash of
// the OS's machine id (/etc/machine-id, which survives a change of host
// name) where there is one, else the host name. A variable so tests can
// play another machine.
var HostFingerprint = func() (string, error) {
	host, _ := os.Hostname()
	return hostFingerprint(os.ReadFile, host)
}

// osMachineIDs are where the OS keeps its machine id, first found first.
var osMachineIDs = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// hostFingerprint is HostFingerprint reading with read. A file that is
// there but cannot be read is an error, not a machine without an id.
func hostFingerprint(read func(string) ([]byte, error), host string) (string, error) {
	for _, p := range osMachineIDs {
		b, err := read(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read the machine id in %s: %w", p, errdefs.FromIO(err))
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			sum := sha256.Sum256([]byte("sessiond machine " + strings.TrimSpace(string(b))))
			return "m:" + hex.EncodeToString(sum[:8]), nil
		}
	}
	sum := sha256.Sum256([]byte("sessiond host " + host))
	return "h:" + hex.EncodeToString(sum[:8]), nil
}

// readSmall reads a small state file through fsy.
func readSmall(fsy fsys.FS, path string) ([]byte, error) {
	f, err := fsy.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}
