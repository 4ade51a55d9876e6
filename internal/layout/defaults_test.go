package layout

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func homeIs(dir string, err error) func() (string, error) {
	return func() (string, error) { return dir, err }
}

var noHome = homeIs("", errors.New("no passwd entry"))

func TestDefaultRoot(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		home    func() (string, error)
		want    string
		wantErr string
	}{
		{"SESSIOND_ROOT wins", map[string]string{"SESSIOND_ROOT": "/srv/agents/", "CLAUDE_CONFIG_DIR": "/c", "HOME": "/h"}, noHome, "/srv/agents", ""},
		{"CLAUDE_CONFIG_DIR", map[string]string{"CLAUDE_CONFIG_DIR": "/c/conf", "HOME": "/h"}, noHome, "/c/conf", ""},
		{"HOME", map[string]string{"HOME": "/home/me"}, noHome, "/home/me/.claude", ""},
		{"user database when HOME is unset", map[string]string{}, homeIs("/var/lib/me", nil), "/var/lib/me/.claude", ""},
		{"NFD config dir becomes NFC, as in the SDK", map[string]string{"CLAUDE_CONFIG_DIR": "/cafe\u0301"}, noHome, "/caf\u00e9", ""},
		{"relative SESSIOND_ROOT", map[string]string{"SESSIOND_ROOT": "agents"}, noHome, "", "SESSIOND_ROOT=\"agents\" is not an absolute path"},
		{"tilde is not expanded", map[string]string{"CLAUDE_CONFIG_DIR": "~/.claude"}, noHome, "", "CLAUDE_CONFIG_DIR=\"~/.claude\" is not an absolute path"},
		{"relative HOME", map[string]string{"HOME": "me"}, noHome, "", "HOME=\"me\" is not an absolute path"},
		{"not UTF-8", map[string]string{"CLAUDE_CONFIG_DIR": "/c\xff"}, noHome, "", "not valid UTF-8"},
		{"no home at all", map[string]string{}, noHome, "", "cannot find the home folder (no passwd entry); set HOME or SESSIOND_ROOT"},
		{"relative home from the user database", map[string]string{}, homeIs("x", nil), "", "is not absolute"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := defaultRoot(envOf(c.env), c.home)
			checkDefault(t, got, err, c.want, c.wantErr)
		})
	}
}

func TestDefaultStateDir(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		home    func() (string, error)
		want    string
		wantErr string
	}{
		{"SESSIOND_STATE_DIR wins", map[string]string{"SESSIOND_STATE_DIR": "/var/lib/sessiond", "XDG_STATE_HOME": "/x", "HOME": "/h"}, noHome, "/var/lib/sessiond", ""},
		{"XDG_STATE_HOME", map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/h"}, noHome, "/x/state/sessiond", ""},
		{"relative XDG_STATE_HOME is ignored", map[string]string{"XDG_STATE_HOME": "state", "HOME": "/h"}, noHome, "/h/.local/state/sessiond", ""},
		{"HOME", map[string]string{"HOME": "/h"}, noHome, "/h/.local/state/sessiond", ""},
		{"user database", map[string]string{}, homeIs("/u", nil), "/u/.local/state/sessiond", ""},
		{"relative SESSIOND_STATE_DIR", map[string]string{"SESSIOND_STATE_DIR": "./state"}, noHome, "", "SESSIOND_STATE_DIR=\"./state\" is not an absolute path"},
		{"no home", map[string]string{}, noHome, "", "set HOME or SESSIOND_STATE_DIR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := defaultStateDir(envOf(c.env), c.home)
			checkDefault(t, got, err, c.want, c.wantErr)
		})
	}
}

func checkDefault(t *testing.T, got string, err error, want, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil || got != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
		return
	}
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("got %q, %v; want an ErrInvalidArgument mentioning %q", got, err, wantErr)
	}
}

func TestDefaultSocket(t *testing.T) {
	long := "/" + strings.Repeat("d", MaxSocketPath) // no socket fits under it
	privateRun := func(dir string, uid int) bool { return dir == "/run/user/1000" && uid == 1000 }
	nonePrivate := func(string, int) bool { return false }
	cases := []struct {
		name    string
		goos    string
		env     map[string]string
		home    func() (string, error)
		private func(string, int) bool
		want    string
	}{
		{"SESSIOND_SOCKET wins", "linux", map[string]string{"SESSIOND_SOCKET": "/run/s.sock", "XDG_RUNTIME_DIR": "/run/user/1000"}, noHome, privateRun, "/run/s.sock"},
		{"XDG_RUNTIME_DIR", "linux", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/h"}, noHome, nonePrivate, "/run/user/1000/sessiond/sessiond.sock"},
		{"logind's runtime folder without XDG_RUNTIME_DIR (cron, ssh)", "linux", map[string]string{"HOME": "/h"}, noHome, privateRun, "/run/user/1000/sessiond/sessiond.sock"},
		{"relative XDG_RUNTIME_DIR is ignored", "linux", map[string]string{"XDG_RUNTIME_DIR": "run", "HOME": "/h"}, noHome, nonePrivate, "/h/.local/state/sessiond/run/sessiond.sock"},
		{"state folder from HOME", "linux", map[string]string{"HOME": "/home/me"}, noHome, nonePrivate, "/home/me/.local/state/sessiond/run/sessiond.sock"},
		{"state folder from XDG_STATE_HOME", "linux", map[string]string{"XDG_STATE_HOME": "/s", "HOME": "/h"}, noHome, nonePrivate, "/s/sessiond/run/sessiond.sock"},
		{"state folder from SESSIOND_STATE_DIR", "linux", map[string]string{"SESSIOND_STATE_DIR": "/var/lib/sd", "HOME": "/h"}, noHome, nonePrivate, "/var/lib/sd/run/sessiond.sock"},
		{"state folder from the user database", "linux", map[string]string{}, homeIs("/var/lib/me", nil), nonePrivate, "/var/lib/me/.local/state/sessiond/run/sessiond.sock"},
		{"state folder too deep for a socket: /tmp", "linux", map[string]string{"SESSIOND_STATE_DIR": long}, noHome, nonePrivate, "/tmp/sessiond-1000/sessiond.sock"},
		{"no home at all: /tmp", "linux", map[string]string{}, noHome, nonePrivate, "/tmp/sessiond-1000/sessiond.sock"},
		{"macOS: the per-user TMPDIR", "darwin", map[string]string{"TMPDIR": "/var/folders/ab/cd/T/", "HOME": "/Users/me"}, noHome, privateRun, "/var/folders/ab/cd/T/sessiond/sessiond.sock"},
		{"macOS without TMPDIR: the state folder", "darwin", map[string]string{"HOME": "/Users/me"}, noHome, privateRun, "/Users/me/.local/state/sessiond/run/sessiond.sock"},
		{"macOS TMPDIR too deep: the state folder", "darwin", map[string]string{"TMPDIR": long, "HOME": "/Users/me"}, noHome, nonePrivate, "/Users/me/.local/state/sessiond/run/sessiond.sock"},
		{"Linux ignores TMPDIR (often the shared /tmp)", "linux", map[string]string{"TMPDIR": "/tmp", "HOME": "/h"}, noHome, nonePrivate, "/h/.local/state/sessiond/run/sessiond.sock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := defaultSocket(socketPlatform{getenv: envOf(c.env), uid: 1000, goos: c.goos, home: c.home, private: c.private})
			if got != c.want {
				t.Errorf("defaultSocket(%v on %s) = %q, want %q", c.env, c.goos, got, c.want)
			}
		})
	}
	t.Run("real process", func(t *testing.T) {
		dir := t.TempDir()
		if got, want := DefaultSocket(envOf(map[string]string{"SESSIOND_STATE_DIR": dir})), dir+"/run/sessiond.sock"; got != want && !strings.HasPrefix(got, "/run/user/") {
			t.Errorf("DefaultSocket = %q, want %q", got, want)
		}
	})
}

// TestPrivateFolder: only a real folder owned by the user with no access
// for others is private.
func TestPrivateFolder(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := base + "/" + name
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := os.Getuid()
	priv := mk("priv", 0o700)
	open := mk("open", 0o755)
	link := base + "/link"
	if err := os.Symlink(priv, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		uid  int
		want bool
	}{{priv, own, true}, {open, own, false}, {link, own, false}, {priv, own + 1, false}, {base + "/missing", own, false}} {
		if got := privateFolder(c.dir, c.uid); got != c.want {
			t.Errorf("privateFolder(%s, %d) = %v, want %v", c.dir, c.uid, got, c.want)
		}
	}
}

func TestDefaultsExported(t *testing.T) {
	env := envOf(map[string]string{"HOME": "/h"})
	if got, err := DefaultRoot(env); err != nil || got != "/h/.claude" {
		t.Errorf("DefaultRoot = %q, %v", got, err)
	}
	if got, err := DefaultStateDir(env); err != nil || got != "/h/.local/state/sessiond" {
		t.Errorf("DefaultStateDir = %q, %v", got, err)
	}
}

func TestDefaultsNilGetenvUsesProcessEnv(t *testing.T) {
	t.Setenv("SESSIOND_ROOT", "/from/env")
	t.Setenv("SESSIOND_STATE_DIR", "/state/env")
	t.Setenv("SESSIOND_SOCKET", "/sock/env")
	if got, err := DefaultRoot(nil); err != nil || got != "/from/env" {
		t.Errorf("DefaultRoot(nil) = %q, %v", got, err)
	}
	if got, err := DefaultStateDir(nil); err != nil || got != "/state/env" {
		t.Errorf("DefaultStateDir(nil) = %q, %v", got, err)
	}
	if got := DefaultSocket(nil); got != "/sock/env" {
		t.Errorf("DefaultSocket(nil) = %q", got)
	}
}
