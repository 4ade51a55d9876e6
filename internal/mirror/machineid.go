package mirror

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

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
func MachineID(fsy fsys.FS, stateDir string) (string, error) {
	path := filepath.Join(stateDir, "machine-id")
	if b, err := readSmall(fsy, path); err == nil {
		id := strings.TrimSpace(string(b))
		if err := CheckMachineID(id); err != nil {
			return "", fmt.Errorf("%s: %w (remove it, or pass --machine-id)", path, err)
		}
		return id, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, errdefs.FromIO(err))
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
		return "", err
	}
	id := host + "-" + hex.EncodeToString(rnd[:])
	if err := fsys.WriteFileAtomic(fsy, path, ".machine-id.tmp", 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, id+"\n")
		return err
	}); err != nil {
		return "", fmt.Errorf("write %s: %w", path, errdefs.FromIO(err))
	}
	return id, nil
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
