package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/testharness"
)

// impostorUID is the other local user who plants a socket: nobody.
const impostorUID = 65534

// requireRoot fails the test in CI and skips it elsewhere when the test
// cannot act as another user.
func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set, so this test must run: " + why)
	}
	t.Skip(why)
}

// impostorListener is a raw Unix socket listener, run as another user,
// that records how many connections it accepted and how many bytes they
// sent: a client that checks the server before speaking sends none.
const impostorListener = `
import os, socket, sys
path, report = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(16)
conns = total = 0
while True:
    c, _ = s.accept()
    conns += 1
    c.settimeout(3)
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            total += len(b)
    except socket.timeout:
        pass
    c.close()
    with open(report + ".tmp", "w") as f:
        f.write("%d %d" % (conns, total))
    os.replace(report + ".tmp", report)
`

// impostorHome is a folder owned by the impostor, outside the test's own
// (private) temp dirs so that user can reach it.
func impostorHome(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sessiond-e2e-impostor")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, impostorUID, impostorUID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asImpostor starts cmd as the impostor user; it is killed when the test
// ends.
func asImpostor(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: impostorUID, Gid: impostorUID}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.Dir = "/"
	var out testharness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("impostor output:\n%s", out.String())
		}
	})
	return cmd
}

// waitSocket waits until a socket file exists at path.
func waitSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no socket appeared at %s", path)
}

// startImpostorListener runs impostorListener as the impostor at sock and
// returns a function reporting (connections, bytes) once at least one
// connection was read to its end.
func startImpostorListener(t *testing.T, home, sock string) func() (int, int) {
	t.Helper()
	script := filepath.Join(home, "listen.py")
	if err := os.WriteFile(script, []byte(impostorListener), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(home, fmt.Sprintf("report-%d", time.Now().UnixNano()))
	asImpostor(t, exec.Command("/usr/bin/python3", script, sock, report))
	waitSocket(t, sock)
	return func() (int, int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(report); err == nil {
				f := strings.Fields(string(b))
				conns, _ := strconv.Atoi(f[0])
				n, _ := strconv.Atoi(f[1])
				return conns, n
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("the impostor never saw a connection: the client did not even try the socket")
		return 0, 0
	}
}

// ctlEnv runs sessionctl with exactly env (no --socket: the default).
func ctlEnv(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bins.Sessionctl(), args...)
	cmd.Env = env
	return runCmd(t, cmd, stdin)
}

// envWith is the test's environment without the variables that choose
// the socket, plus extra.
func envWith(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "SESSIOND_SOCKET", "XDG_RUNTIME_DIR", "SESSIOND_STATE_DIR", "XDG_STATE_HOME", "TMPDIR":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// TestTrustImpostorAtDefaultSocket is the attack the client must defeat:
// with XDG_RUNTIME_DIR unset and no private folder to use, the default
// socket is /tmp/sessiond-<uid>/sessiond.sock, and another local user can
// create that folder first (or a symlink by that name to a folder of
// theirs) and serve there. sessionctl and the Go client refuse such a
// socket before sending a byte, exit with their own status and say what
// to do; the user's own daemon at the same default still takes entries.
func TestTrustImpostorAtDefaultSocket(t *testing.T) {
	requireRoot(t, "the impostor must run as another uid, which needs root")
	folder := fmt.Sprintf("/tmp/sessiond-%d", os.Geteuid())
	sock := filepath.Join(folder, "sessiond.sock")
	if _, err := os.Lstat(folder); err == nil {
		t.Fatalf("%s exists already (a daemon of yours, or a leftover); this test plays an impostor there: stop that daemon or remove the folder", folder)
	}
	t.Cleanup(func() { os.RemoveAll(folder) })

	// A state folder too deep to hold a socket, as with a deep home: the
	// default falls through to /tmp.
	state := filepath.Join(t.TempDir(), strings.Repeat("s", layout.MaxSocketPath))
	env := envWith("SESSIOND_STATE_DIR=" + state)
	if got := layout.DefaultSocket(func(k string) string {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v
			}
		}
		return ""
	}); got != sock {
		t.Fatalf("with this environment the default socket is %s, not %s (is /run/user/%d a private folder here?); the test needs the /tmp fallback", got, sock, os.Geteuid())
	}
	help, _, _ := ctlEnv(t, env, "", "--help")
	if !strings.Contains(help, sock) {
		t.Fatalf("sessionctl --help does not show the default socket %s:\n%s", sock, help)
	}

	cwd := t.TempDir()
	sid := uuid.NewString()
	secret := "AKIA-not-for-" + uuid.NewString()
	entry := fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":null,"sessionId":%q,"cwd":%q,"message":{"role":"user","content":%q}}`,
		uuid.NewString(), sid, cwd, secret)
	appendArgs := []string{"append", "--cwd", cwd, "--session", sid}

	// refused runs the client side of every case: sessionctl append and
	// status, and the Go client, each refused with the socket, the
	// impostor's uid and what to do.
	refused := func(t *testing.T, also ...string) {
		t.Helper()
		for _, args := range [][]string{appendArgs, {"status"}} {
			_, errOut, code := ctlEnv(t, env, entry+"\n", args...)
			if code != 3 {
				t.Errorf("sessionctl %s exited %d, want 3 (untrusted socket); stderr:\n%s", args[0], code, errOut)
			}
			for _, want := range append([]string{"refusing the socket " + sock, fmt.Sprintf("uid %d", impostorUID),
				"nothing was sent", "remove " + folder, "SESSIOND_SOCKET"}, also...) {
				if !strings.Contains(errOut, want) {
					t.Errorf("sessionctl %s: stderr %q lacks %q", args[0], errOut, want)
				}
			}
		}
		c, err := client.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = c.Append(ctx, client.Session{Cwd: cwd, ID: sid}, []byte(entry))
		var u *client.UntrustedSocketError
		if !errors.As(err, &u) || u.ServerUID != impostorUID {
			t.Errorf("Go client Append = %v, want an UntrustedSocketError naming uid %d", err, impostorUID)
		}
	}

	t.Run("folder of theirs", func(t *testing.T) {
		home := impostorHome(t)
		if err := os.Mkdir(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(folder) })
		if err := os.Chown(folder, impostorUID, impostorUID); err != nil {
			t.Fatal(err)
		}
		seen := startImpostorListener(t, home, sock)
		refused(t, fmt.Sprintf("Its folder %s belongs to uid %d", folder, impostorUID))
		if conns, n := seen(); conns < 1 || n != 0 {
			t.Errorf("the impostor saw %d connections carrying %d bytes; want at least one connection and no byte", conns, n)
		}
	})

	t.Run("behind a symlink", func(t *testing.T) {
		home := impostorHome(t)
		theirs := filepath.Join(home, "sock")
		if err := os.Mkdir(theirs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, impostorUID, impostorUID); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(theirs, folder); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(folder) })
		if err := os.Lchown(folder, impostorUID, impostorUID); err != nil {
			t.Fatal(err)
		}
		seen := startImpostorListener(t, home, filepath.Join(theirs, "sessiond.sock"))
		refused(t, fmt.Sprintf("Its folder %s is a symlink to %s", folder, theirs))
		if conns, n := seen(); conns < 1 || n != 0 {
			t.Errorf("the impostor saw %d connections carrying %d bytes; want at least one connection and no byte", conns, n)
		}
	})

	t.Run("a real sessiond of theirs", func(t *testing.T) {
		// The strongest impostor: a working sessiond run by the other
		// user, which would store whatever it is sent.
		home := impostorHome(t)
		exe := bins.Sessiond() // executable by that user too (TestMain)
		theirRoot := filepath.Join(home, "claude")
		asImpostor(t, exec.Command(exe, "--socket", sock, "--root", theirRoot, "--state-dir", filepath.Join(home, "state")))
		waitSocket(t, sock)
		t.Cleanup(func() { os.RemoveAll(folder) })
		refused(t)
		filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() != "sessiond" {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
					t.Errorf("the impostor stored the entry in %s", p)
				}
			}
			return nil
		})
	})

	t.Run("own daemon at the same default", func(t *testing.T) {
		if _, err := os.Lstat(folder); err == nil {
			t.Fatalf("%s is still there after the impostor cases", folder)
		}
		root := filepath.Join(t.TempDir(), "claude")
		// No --socket: the default.
		d, err := testharness.Start(testharness.Config{Sessiond: bins.Sessiond(), Root: root, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, _, err := d.Stop(syscall.SIGTERM, time.Minute); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("sessiond log:\n%s", d.LogTail(logTail))
			}
		}()
		waitSocket(t, sock)
		var out, errOut string
		var code int
		for i := 0; i < 200; i++ { // the socket exists a moment before it serves
			if out, errOut, code = ctlEnv(t, env, entry+"\n", appendArgs...); code == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code != 0 {
			t.Fatalf("append to the own daemon at the default socket exited %d: %s%s", code, out, errOut)
		}
		shown, errOut, code := ctlEnv(t, env, "", "show", sid, "--cwd", cwd)
		if code != 0 || !strings.Contains(shown, secret) {
			t.Fatalf("show exited %d, output %q %s; want the entry", code, shown, errOut)
		}
	})
}
