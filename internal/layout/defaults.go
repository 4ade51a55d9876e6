package layout

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"syscall"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Environment variables the defaults read.
const (
	EnvRoot            = "SESSIOND_ROOT"
	EnvClaudeConfigDir = "CLAUDE_CONFIG_DIR"
	EnvStateDir        = "SESSIOND_STATE_DIR"
	EnvSocket          = "SESSIOND_SOCKET"

	envHome          = "HOME"
	envXDGStateHome  = "XDG_STATE_HOME"
	envXDGRuntimeDir = "XDG_RUNTIME_DIR"
)

// DefaultRoot is the folder transcripts live under: $SESSIOND_ROOT, else
// $CLAUDE_CONFIG_DIR, else ~/.claude. A value that is set must be an
// absolute path. The result is NFC-normalised on every platform because the
// SDK normalises its config dir that way; without it an NFD
// CLAUDE_CONFIG_DIR would make sessiond and the agent use different folders
// on Linux. getenv looks variables up (nil means os.Getenv); the home folder
// comes from $HOME, else from the user database.
func DefaultRoot(getenv func(string) string) (string, error) {
	return defaultRoot(orOSGetenv(getenv), userHomeDir)
}

// DefaultStateDir is the folder for journals and other daemon state:
// $SESSIOND_STATE_DIR (must be absolute), else $XDG_STATE_HOME/sessiond
// (ignored unless absolute, as the XDG spec says), else
// ~/.local/state/sessiond. getenv as for DefaultRoot.
func DefaultStateDir(getenv func(string) string) (string, error) {
	return defaultStateDir(orOSGetenv(getenv), userHomeDir)
}

// DefaultSocket is the daemon's Unix socket, the first of:
//
//   - $SESSIOND_SOCKET as given;
//   - $XDG_RUNTIME_DIR/sessiond/sessiond.sock (when absolute);
//   - on Linux, /run/user/<uid>/sessiond/sessiond.sock when that runtime
//     folder exists and is private to the user (logind makes it; cron and
//     ssh sessions without XDG_RUNTIME_DIR then find the systemd unit's
//     socket);
//   - on macOS, $TMPDIR/sessiond/sessiond.sock (the per-user temp folder);
//   - <state folder>/run/sessiond.sock, the state folder as DefaultStateDir
//     finds it from the environment, when the path fits a socket address;
//   - /tmp/sessiond-<uid>/sessiond.sock.
//
// Every choice but the last is a folder only the user controls. The last is
// in a folder anyone may create first: the daemon refuses a socket folder it
// does not own, and clients refuse a socket served by another user
// (internal/socket.DialTrusted). getenv as for DefaultRoot.
func DefaultSocket(getenv func(string) string) string {
	return defaultSocket(socketPlatform{
		getenv: orOSGetenv(getenv), uid: os.Getuid(), goos: runtime.GOOS,
		home: userHomeDir, private: privateFolder,
	})
}

// MaxSocketPath is the longest Unix socket path the kernel accepts:
// sun_path minus the NUL that macOS insists on (Linux would take one byte
// more).
const MaxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// socketPlatform is what DefaultSocket reads besides the environment.
type socketPlatform struct {
	getenv  func(string) string
	uid     int
	goos    string
	home    func() (string, error)
	private func(dir string, uid int) bool
}

func defaultSocket(p socketPlatform) string {
	const name = "sessiond.sock"
	if v := p.getenv(EnvSocket); v != "" {
		return v
	}
	if v := p.getenv(envXDGRuntimeDir); filepath.IsAbs(v) {
		return filepath.Join(v, "sessiond", name)
	}
	fits := func(path string) bool { return len(path) <= MaxSocketPath }
	switch p.goos {
	case "linux":
		if dir := fmt.Sprintf("/run/user/%d", p.uid); p.private(dir, p.uid) {
			return filepath.Join(dir, "sessiond", name)
		}
	case "darwin":
		if v := p.getenv("TMPDIR"); filepath.IsAbs(v) && fits(filepath.Join(v, "sessiond", name)) {
			return filepath.Join(v, "sessiond", name)
		}
	}
	if st, err := defaultStateDir(p.getenv, p.home); err == nil && fits(filepath.Join(st, "run", name)) {
		return filepath.Join(st, "run", name)
	}
	return filepath.Join("/tmp", fmt.Sprintf("sessiond-%d", p.uid), name)
}

// privateFolder reports whether dir is a real folder (not a symlink) owned
// by uid that nobody else may enter.
func privateFolder(dir string, uid int) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

func defaultRoot(getenv func(string) string, home func() (string, error)) (string, error) {
	for _, name := range []string{EnvRoot, EnvClaudeConfigDir} {
		v, set, err := absFromEnv(getenv, name)
		if err != nil {
			return "", err
		}
		if set {
			return norm.NFC.String(v), nil
		}
	}
	h, err := homeDir(getenv, home, EnvRoot)
	if err != nil {
		return "", err
	}
	return norm.NFC.String(filepath.Join(h, ".claude")), nil
}

func defaultStateDir(getenv func(string) string, home func() (string, error)) (string, error) {
	v, set, err := absFromEnv(getenv, EnvStateDir)
	if err != nil {
		return "", err
	}
	if set {
		return v, nil
	}
	if v := getenv(envXDGStateHome); filepath.IsAbs(v) {
		return filepath.Join(v, "sessiond"), nil
	}
	h, err := homeDir(getenv, home, EnvStateDir)
	if err != nil {
		return "", err
	}
	return filepath.Join(h, ".local", "state", "sessiond"), nil
}

// absFromEnv reads a folder from the environment: unset or empty is not an
// error, anything else must be an absolute path in UTF-8.
func absFromEnv(getenv func(string) string, name string) (dir string, set bool, err error) {
	v := getenv(name)
	if v == "" {
		return "", false, nil
	}
	if !utf8.ValidString(v) {
		return "", true, invalidf("%s=%s is not valid UTF-8; the agents would not find that folder, set it to an absolute path in UTF-8", name, quote(v))
	}
	if !filepath.IsAbs(v) {
		return "", true, invalidf("%s=%s is not an absolute path; set it to an absolute folder (a leading ~ is not expanded)", name, quote(v))
	}
	return filepath.Clean(v), true, nil
}

// homeDir finds the home folder the way Node's os.homedir does: $HOME, else
// the user database. override names the variable that avoids the need.
func homeDir(getenv func(string) string, fallback func() (string, error), override string) (string, error) {
	if v, set, err := absFromEnv(getenv, envHome); err != nil {
		return "", err
	} else if set {
		return v, nil
	}
	h, err := fallback()
	if err == nil && !filepath.IsAbs(h) {
		err = fmt.Errorf("home folder %q is not absolute", h)
	}
	if err != nil {
		return "", invalidf("cannot find the home folder (%v); set HOME or %s", err, override)
	}
	return filepath.Clean(h), nil
}

func userHomeDir() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	if u.HomeDir == "" {
		return "", fmt.Errorf("user %s has no home folder", u.Username)
	}
	return u.HomeDir, nil
}

func orOSGetenv(getenv func(string) string) func(string) string {
	if getenv == nil {
		return os.Getenv
	}
	return getenv
}
