package deploy_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/testharness"
)

const (
	serviceFile = "systemd/sessiond.service"
	socketFile  = "systemd/sessiond.socket"
	plistFile   = "launchd/dev.sessiond.sessiond.plist"
	readmeFile  = "README.md"

	// defaultShutdownTimeout is cmd/sessiond's --shutdown-timeout default,
	// used when a definition does not pass the flag.
	defaultShutdownTimeout = 30 * time.Second
	// stopHeadroom is how much longer than --shutdown-timeout the service
	// manager must wait before SIGKILL: the drain deadline covers the drain
	// and the final compaction, not the process exit after it.
	stopHeadroom = 5 * time.Second
	// maxSocketPath is the longest Unix socket path macOS accepts (Linux
	// takes one byte more).
	maxSocketPath = 103
)

// userUnitUnsupported lists [Service]/[Socket] options a systemd user manager
// cannot apply: it has no privileges, so these need a mount, network or
// other namespace (which it can only get from an unprivileged user
// namespace, often disabled or restricted, and then the unit fails with
// 226/NAMESPACE) or a capability, BPF or device cgroup it does not have.
var userUnitUnsupported = map[string]string{
	"ProtectSystem":         "mount namespace",
	"ProtectHome":           "mount namespace",
	"PrivateTmp":            "mount namespace",
	"PrivateDevices":        "mount namespace and device cgroup",
	"PrivateNetwork":        "network namespace",
	"PrivateUsers":          "user namespace",
	"PrivateMounts":         "mount namespace",
	"PrivateIPC":            "IPC namespace",
	"ProtectKernelTunables": "mount namespace",
	"ProtectKernelModules":  "mount namespace",
	"ProtectKernelLogs":     "mount namespace",
	"ProtectControlGroups":  "mount namespace",
	"ProtectHostname":       "UTS namespace",
	"ProtectClock":          "device cgroup",
	"ProtectProc":           "mount namespace",
	"ProcSubset":            "mount namespace",
	"ReadWritePaths":        "mount namespace",
	"ReadOnlyPaths":         "mount namespace",
	"InaccessiblePaths":     "mount namespace",
	"ExecPaths":             "mount namespace",
	"NoExecPaths":           "mount namespace",
	"TemporaryFileSystem":   "mount namespace",
	"BindPaths":             "mount namespace",
	"BindReadOnlyPaths":     "mount namespace",
	"RootDirectory":         "chroot",
	"RootImage":             "mount namespace",
	"MountAPIVFS":           "mount namespace",
	"NetworkNamespacePath":  "network namespace",
	"IPCNamespacePath":      "IPC namespace",
	"IPAddressDeny":         "BPF cgroup programs",
	"IPAddressAllow":        "BPF cgroup programs",
	"SocketBindDeny":        "BPF cgroup programs",
	"SocketBindAllow":       "BPF cgroup programs",
	"RestrictFileSystems":   "BPF LSM",
	"DeviceAllow":           "device cgroup",
	"DevicePolicy":          "device cgroup",
	"CapabilityBoundingSet": "CAP_SETPCAP",
	"AmbientCapabilities":   "capabilities",
	"User":                  "setuid; a user unit runs as its user",
	"Group":                 "setgid; a user unit runs as its user",
	"DynamicUser":           "setuid",
	"SupplementaryGroups":   "setgroups",
	"RemoveIPC":             "system managers only",
}

// TestSystemdUnits checks sessiond.service and sessiond.socket, and runs
// systemd-analyze verify on them where it is installed.
func TestSystemdUnits(t *testing.T) {
	svc := loadUnit(t, serviceFile)
	sock := loadUnit(t, socketFile)

	// Specifier values for comparing paths; any absolute folders do.
	specs := map[byte]string{'t': "/run/user/1000", 'h': "/home/someone", 'U': "1000", 'u': "someone"}

	args := execStart(t, svc, specs)
	shutdown := shutdownTimeout(t, args)

	t.Run("service", func(t *testing.T) {
		wantValue(t, svc, "Service", "Type", "notify")
		wantValue(t, svc, "Service", "NotifyAccess", "main")

		if !strings.HasPrefix(args[0], "/") {
			t.Errorf("%s: ExecStart binary %q is not an absolute path", svc.path, args[0])
		}
		if v, ok := flagValue(args, "log-format"); ok && !slices.Contains([]string{"auto", "console", "json"}, v) {
			t.Errorf("%s: --log-format %q is not auto, console or json", svc.path, v)
		}

		stop, ok := svc.last("Service", "TimeoutStopSec")
		if !ok {
			stop, ok = svc.last("Service", "TimeoutSec")
		}
		if !ok {
			t.Errorf("%s: no TimeoutStopSec=; the default may SIGKILL sessiond mid-drain", svc.path)
		} else if d, err := parseTimespan(stop); err != nil {
			t.Errorf("%s: TimeoutStopSec=%s: %v", svc.path, stop, err)
		} else if d < shutdown+stopHeadroom {
			t.Errorf("%s: TimeoutStopSec=%s (%v) must exceed --shutdown-timeout (%v) by at least %v, or systemd SIGKILLs sessiond before its drain ends",
				svc.path, stop, d, shutdown, stopHeadroom)
		}

		if v, _ := svc.last("Service", "KillMode"); v != "mixed" && v != "process" {
			t.Errorf("%s: KillMode=%q, want mixed or process", svc.path, v)
		}
		if v, _ := svc.last("Service", "KillSignal"); v != "SIGTERM" && v != "TERM" && v != "15" {
			t.Errorf("%s: KillSignal=%q, want SIGTERM (what sessiond drains on)", svc.path, v)
		}
		if v, _ := svc.last("Service", "SendSIGKILL"); v != "" && !isTrue(v) {
			t.Errorf("%s: SendSIGKILL=%s: a hung sessiond would never be stopped", svc.path, v)
		}
		wantValue(t, svc, "Service", "Restart", "on-failure")
		if v, _ := svc.last("Service", "RestartPreventExitStatus"); !slices.Contains(strings.Fields(v), "3") {
			t.Errorf("%s: RestartPreventExitStatus=%q lacks 3: a sessiond refused because another owns its folders would be restarted in a loop", svc.path, v)
		}
		if v, ok := svc.last("Service", "RestartSec"); !ok {
			t.Errorf("%s: no RestartSec=", svc.path)
		} else if d, err := parseTimespan(v); err != nil || d <= 0 {
			t.Errorf("%s: RestartSec=%s is not a positive time span (%v)", svc.path, v, err)
		}

		for _, key := range []string{"NoNewPrivileges", "LockPersonality", "RestrictRealtime", "MemoryDenyWriteExecute"} {
			if v, _ := svc.last("Service", key); !isTrue(v) {
				t.Errorf("%s: %s=%q, want yes", svc.path, key, v)
			}
		}
		wantValue(t, svc, "Service", "SystemCallArchitectures", "native")
		if fams := svc.fields("Service", "RestrictAddressFamilies"); !slices.Equal(fams, []string{"AF_UNIX"}) {
			t.Errorf("%s: RestrictAddressFamilies=%q, want AF_UNIX alone (sessiond uses no other socket family unless a drop-in mirrors to PostgreSQL over TCP)", svc.path, strings.Join(fams, " "))
		}
		if v, _ := svc.last("Service", "UMask"); !modeIs(v, 0o077) {
			t.Errorf("%s: UMask=%q, want 0077", svc.path, v)
		}

		if w := svc.fields("Install", "WantedBy"); !slices.Contains(w, "default.target") {
			t.Errorf("%s: WantedBy=%q, want default.target", svc.path, strings.Join(w, " "))
		}
		if a := svc.fields("Install", "Also"); !slices.Contains(a, filepath.Base(socketFile)) {
			t.Errorf("%s: Also=%q, want %s so enabling the service enables its socket", svc.path, strings.Join(a, " "), filepath.Base(socketFile))
		}
	})

	t.Run("socket", func(t *testing.T) {
		wantValue(t, sock, "Socket", "ListenStream", "%t/sessiond/sessiond.sock")
		for _, key := range []string{"ListenDatagram", "ListenSequentialPacket", "ListenFIFO", "ListenSpecial", "ListenNetlink", "ListenMessageQueue", "ListenUSBFunction"} {
			if sock.has("Socket", key) {
				t.Errorf("%s: %s= given; sessiond refuses anything but one ListenStream= socket", sock.path, key)
			}
		}
		if v, _ := sock.last("Socket", "Accept"); v != "" && isTrue(v) {
			t.Errorf("%s: Accept=%s; sessiond needs the listening socket (Accept=no)", sock.path, v)
		}
		if v, _ := sock.last("Socket", "SocketMode"); !modeIs(v, 0o600) {
			t.Errorf("%s: SocketMode=%q, want 0600", sock.path, v)
		}
		if v, _ := sock.last("Socket", "DirectoryMode"); !modeIs(v, 0o700) {
			t.Errorf("%s: DirectoryMode=%q, want 0700", sock.path, v)
		}
		if v, ok := sock.last("Socket", "Service"); ok && v != filepath.Base(serviceFile) {
			t.Errorf("%s: Service=%s, want %s", sock.path, v, filepath.Base(serviceFile))
		} else if !ok && strings.TrimSuffix(filepath.Base(sock.path), ".socket") != strings.TrimSuffix(filepath.Base(svc.path), ".service") {
			t.Errorf("%s does not activate %s: the names differ and there is no Service=", sock.path, svc.path)
		}
		if w := sock.fields("Install", "WantedBy"); !slices.Contains(w, "sockets.target") {
			t.Errorf("%s: WantedBy=%q, want sockets.target", sock.path, strings.Join(w, " "))
		}
	})

	t.Run("same socket path", func(t *testing.T) {
		streams := sock.values("Socket", "ListenStream")
		if len(streams) != 1 {
			t.Fatalf("%s: %d ListenStream= values, want exactly one", sock.path, len(streams))
		}
		listen, err := expandSpecifiers(streams[0], specs)
		if err != nil {
			t.Fatalf("%s: ListenStream=%s: %v", sock.path, streams[0], err)
		}
		if !strings.HasPrefix(listen, "/") {
			t.Fatalf("%s: ListenStream=%s is not a socket path", sock.path, streams[0])
		}
		long, _ := expandSpecifiers(streams[0], map[byte]string{'t': "/run/user/4294967295"})
		if len(long) > maxSocketPath {
			t.Errorf("%s: ListenStream can be %d bytes long, more than a Unix socket path may be (%d)", sock.path, len(long), maxSocketPath)
		}
		flag, ok := flagValue(args, "socket")
		if !ok {
			t.Errorf("%s: ExecStart passes no --socket, so sessiond would report its default rather than %s", svc.path, streams[0])
		} else if flag != listen {
			t.Errorf("%s: ExecStart passes --socket %s, but %s listens on %s", svc.path, flag, sock.path, listen)
		}
		env, err := environment(svc, specs)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := env["SESSIOND_SOCKET"]; ok && v != listen {
			t.Errorf("%s: Environment=SESSIOND_SOCKET=%s, but %s listens on %s", svc.path, v, sock.path, listen)
		}
	})

	t.Run("user manager options", func(t *testing.T) {
		for _, u := range []*unit{svc, sock} {
			for section, keys := range u.sections {
				for key := range keys {
					if why, bad := userUnitUnsupported[key]; bad {
						t.Errorf("%s: [%s] %s= does not work in a systemd user unit (needs %s)", u.path, section, key, why)
					}
				}
			}
		}
	})

	t.Run("systemd-analyze verify", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Logf("systemd-analyze not available (%v): only the parser checks above ran", err)
			return
		}
		dir := t.TempDir()
		fake := filepath.Join(dir, "bin", "sessiond")
		units := filepath.Join(dir, "units")
		for _, d := range []string{filepath.Dir(fake), units, filepath.Join(dir, "run"), filepath.Join(dir, "home")} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, u := range []*unit{svc, sock} {
			text, n := replaceExecBinary(string(u.raw), fake)
			if u == svc && n != 1 {
				t.Fatalf("%s: rewrote %d ExecStart= lines for verify, want 1", u.path, n)
			}
			p := filepath.Join(units, filepath.Base(u.path))
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		analyzeVerify(t, analyze, dir, paths)
	})
}

// analyzeVerify runs systemd-analyze verify --user on the unit files at
// paths, with dir/run, dir/home as its runtime and home folders.
func analyzeVerify(t *testing.T, analyze, dir string, paths []string) {
	t.Helper()
	for _, d := range []string{filepath.Join(dir, "run"), filepath.Join(dir, "home")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--user", "--man=no"}, paths...)...)
	// A private runtime and config folder: CI runs as root without a
	// user manager (so no XDG_RUNTIME_DIR), and a developer's own
	// ~/.config/systemd/user must not be verified instead.
	cmd.Env = append(withoutEnv(os.Environ(), "XDG_RUNTIME_DIR", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "SYSTEMD_UNIT_PATH"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"),
		"HOME="+filepath.Join(dir, "home"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "home", ".config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "home", ".local", "share"))
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		// Parse warnings (unknown keys, bad values) do not change the
		// exit status, so any line about our units is a failure.
		if strings.Contains(line, dir) || strings.Contains(line, "sessiond") {
			t.Errorf("systemd-analyze: %s", line)
		} else {
			t.Logf("systemd-analyze: %s", line)
		}
	}
	if err != nil {
		t.Errorf("%s: %v", cmd, err)
	}
}

// TestLaunchdPlist checks the macOS LaunchAgent.
func TestLaunchdPlist(t *testing.T) {
	data, err := os.ReadFile(plistFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parsePlist(data)
	if err != nil {
		t.Fatalf("%s: %v", plistFile, err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: top-level value is %T, want a dict", plistFile, v)
	}
	for key := range top {
		if !slices.Contains(launchdKeys, key) {
			t.Errorf("%s: unknown key %q (launchd ignores it silently)", plistFile, key)
		}
	}

	label, _ := top["Label"].(string)
	if want := strings.TrimSuffix(filepath.Base(plistFile), ".plist"); label != want {
		t.Errorf("%s: Label=%q, want %q (the file name)", plistFile, label, want)
	}
	if _, ok := top["Program"]; ok {
		t.Errorf("%s: has Program; use ProgramArguments alone", plistFile)
	}
	args := plistArgs(t, top)
	if len(args) == 0 {
		t.FailNow()
	}
	if !strings.HasPrefix(args[0], "/") || path.Base(args[0]) != "sessiond" {
		t.Errorf("%s: ProgramArguments[0]=%q, want an absolute path to sessiond", plistFile, args[0])
	}
	for _, a := range args {
		if strings.ContainsAny(a, "~$") {
			t.Errorf("%s: ProgramArguments has %q; launchd expands neither ~ nor variables", plistFile, a)
		}
	}
	if v, _ := flagValue(args, "log-format"); v != "json" {
		t.Errorf("%s: --log-format %q, want json", plistFile, v)
	}
	shutdown := shutdownTimeout(t, args)

	if top["RunAtLoad"] != true {
		t.Errorf("%s: RunAtLoad=%v, want true", plistFile, top["RunAtLoad"])
	}
	if ka, ok := top["KeepAlive"].(map[string]any); !ok {
		t.Errorf("%s: KeepAlive=%v, want a dict with SuccessfulExit=false", plistFile, top["KeepAlive"])
	} else {
		if ka["SuccessfulExit"] != false {
			t.Errorf("%s: KeepAlive.SuccessfulExit=%v, want false (restart after failures, not after a clean stop)", plistFile, ka["SuccessfulExit"])
		}
		for key := range ka {
			if !slices.Contains([]string{"SuccessfulExit", "Crashed", "NetworkState", "PathState", "OtherJobEnabled", "AfterInitialDemand"}, key) {
				t.Errorf("%s: unknown KeepAlive key %q", plistFile, key)
			}
		}
	}
	if secs, ok := top["ExitTimeOut"].(int64); !ok {
		t.Errorf("%s: ExitTimeOut=%v, want an integer (launchd's default is 20s)", plistFile, top["ExitTimeOut"])
	} else if d := time.Duration(secs) * time.Second; d < shutdown+stopHeadroom {
		t.Errorf("%s: ExitTimeOut=%d (%v) must exceed --shutdown-timeout (%v) by at least %v, or launchd SIGKILLs sessiond before its drain ends",
			plistFile, secs, d, shutdown, stopHeadroom)
	}
	if pt, _ := top["ProcessType"].(string); !slices.Contains([]string{"Background", "Standard", "Adaptive", "Interactive"}, pt) {
		t.Errorf("%s: ProcessType=%q is not one launchd knows", plistFile, pt)
	}
	if _, ok := top["Sockets"]; ok {
		t.Errorf("%s: has Sockets, but sessiond does not take sockets from launchd", plistFile)
	}
	if um, ok := top["Umask"]; ok {
		if n, isInt := um.(int64); !isInt || n&0o077 != 0o077 {
			t.Errorf("%s: Umask=%v, want a decimal integer denying group and others (63 = 0077)", plistFile, um)
		}
	}
	if env, ok := top["EnvironmentVariables"]; ok {
		m, isDict := env.(map[string]any)
		for k, v := range m {
			if _, isString := v.(string); !isString {
				t.Errorf("%s: EnvironmentVariables.%s is %T, want a string", plistFile, k, v)
			}
		}
		if !isDict {
			t.Errorf("%s: EnvironmentVariables is %T, want a dict", plistFile, env)
		}
	}

	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	placeholders := []string{args[0]}
	for _, key := range []string{"StandardErrorPath", "StandardOutPath"} {
		v, ok := top[key]
		if !ok {
			continue
		}
		p, _ := v.(string)
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "~$") {
			t.Errorf("%s: %s=%q, want an absolute path (launchd expands neither ~ nor variables)", plistFile, key, v)
			continue
		}
		if parts := strings.SplitN(p, "/", 4); len(parts) == 4 && parts[1] == "Users" {
			placeholders = append(placeholders, "/"+parts[1]+"/"+parts[2])
		}
	}
	for _, p := range placeholders {
		if !bytes.Contains(readme, []byte(p)) {
			t.Errorf("%s uses %s, but %s does not tell users to replace it", plistFile, p, readmeFile)
		}
	}

	if plutil, err := exec.LookPath("plutil"); err != nil {
		t.Logf("plutil not available: only the parser checks ran")
	} else if out, err := exec.Command(plutil, "-lint", plistFile).CombinedOutput(); err != nil {
		t.Errorf("plutil -lint %s: %v\n%s", plistFile, err, out)
	}
}

// TestDaemonAcceptsArguments builds cmd/sessiond and has it parse the
// arguments each definition passes (with -version, so it exits right after
// parsing): a flag it does not know, or a bad value, would make the service
// fail on every start.
func TestDaemonAcceptsArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/sessiond")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("go not on PATH: %v", err)
	}
	dir := t.TempDir()
	if err := testharness.BuildInto(context.Background(), dir, testharness.BuildOptions{}, "sessiond"); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sessiond")

	svc := loadUnit(t, serviceFile)
	specs := map[byte]string{'t': filepath.Join(dir, "run"), 'h': filepath.Join(dir, "home"), 'U': "1000", 'u': "someone"}
	data, err := os.ReadFile(plistFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parsePlist(data)
	if err != nil {
		t.Fatalf("%s: %v", plistFile, err)
	}
	top, _ := v.(map[string]any)
	for name, args := range map[string][]string{
		serviceFile: execStart(t, svc, specs),
		plistFile:   plistArgs(t, top),
	} {
		if len(args) == 0 {
			continue
		}
		cmd := exec.Command(bin, append(slices.Clone(args[1:]), "-version")...)
		cmd.Env = []string{"HOME=" + filepath.Join(dir, "home"), "PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sessiond rejects the arguments %q: %v\n%s", name, args[1:], err, out)
		}
	}
}

// TestUnitTwiceRefused runs the service's own command line as systemd
// would, socket-activated, then a second instance of it and a manual
// `sessiond` in the same environment: both are refused with an exit
// status the unit's RestartPreventExitStatus= names, and the first one
// still serves.
func TestUnitTwiceRefused(t *testing.T) {
	dir := t.TempDir()
	if err := testharness.BuildInto(context.Background(), dir, testharness.BuildOptions{}, "sessiond"); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sessiond")
	svc := loadUnit(t, serviceFile)
	home, rt := filepath.Join(dir, "home"), filepath.Join(dir, "run")
	for _, p := range []string{home, filepath.Join(rt, "sessiond")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	specs := map[byte]string{'t': rt, 'h': home, 'U': strconv.Itoa(os.Getuid()), 'u': "someone"}
	args := execStart(t, svc, specs)
	env := []string{"HOME=" + home, "XDG_RUNTIME_DIR=" + rt, "PATH=" + os.Getenv("PATH")}
	prevent, _ := svc.last("Service", "RestartPreventExitStatus")

	// activated starts the unit's command with a listener on path passed
	// as systemd passes it (fd 3, LISTEN_PID, LISTEN_FDS).
	activated := func(path string) (*testharness.Daemon, error) {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return nil, err
		}
		ln.SetUnlinkOnClose(false) // the path stays: the daemon serves it
		defer ln.Close()
		f, err := ln.File()
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return testharness.Start(testharness.Config{Sessiond: bin, Args: args[1:], Env: env,
			Wrapper:    []string{"/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`},
			ExtraFiles: []*os.File{f}})
	}
	sock, _ := flagValue(args, "socket")
	first, err := activated(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Kill)
	waitStatus := func() {
		t.Helper()
		if err := testharness.WaitStatus(sock, 30*time.Second); err != nil {
			t.Fatalf("the unit's sessiond does not serve: %v\n%s", err, first.LogTail(100))
		}
	}
	waitStatus()
	for name, start := range map[string]func() (*testharness.Daemon, error){
		"a second instance of the unit": func() (*testharness.Daemon, error) { return activated(filepath.Join(rt, "second.sock")) },
		"a manual sessiond": func() (*testharness.Daemon, error) {
			return testharness.Start(testharness.Config{Sessiond: bin, Env: env})
		},
	} {
		p, err := start()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Exited():
		case <-time.After(20 * time.Second):
			p.Kill()
			t.Fatalf("%s still runs beside the unit's:\n%s", name, p.LogTail(50))
		}
		code := p.ExitCode()
		if !slices.Contains(strings.Fields(prevent), strconv.Itoa(code)) {
			t.Errorf("%s exited %d, which RestartPreventExitStatus=%q does not name:\n%s", name, code, prevent, p.Log())
		}
		if want := fmt.Sprintf("pid %d", first.Pid()); !strings.Contains(p.Log(), want) {
			t.Errorf("%s: the refusal does not name the running one (%s):\n%s", name, want, p.Log())
		}
	}
	waitStatus()
}

// TestMakeInstall runs `make install` and `make uninstall` (deploy/install.sh)
// with a fake HOME, PREFIX and SYSTEMD_USER_DIR, and no user manager to
// reach: the binaries carry the commit, the installed units run the
// installed binary and pass systemd-analyze verify, and uninstall removes
// exactly what install wrote (and the links an enable made to it), never
// the transcripts, the state folder or anyone else's files.
func TestMakeInstall(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	prefix := filepath.Join(dir, "prefix")
	bin := filepath.Join(prefix, "bin")
	units := filepath.Join(dir, "units")

	// What is there before: another program and another unit beside
	// ours, a drop-in for ours, transcripts, sessiond's state, and the
	// links `systemctl --user enable` would make to our units (dangling
	// until install writes them).
	others := map[string]string{
		filepath.Join(bin, "other-tool"):                                 "#!/bin/sh\n",
		filepath.Join(units, "other.service"):                            "[Service]\nExecStart=/bin/true\n",
		filepath.Join(units, "sessiond.service.d", "override.conf"):      "[Service]\nEnvironment=X=1\n",
		filepath.Join(home, ".claude", "projects", "-p", "s.jsonl"):      "{\"type\":\"user\"}\n",
		filepath.Join(home, ".local", "state", "sessiond", "machine-id"): "m\n",
		filepath.Join(home, ".config", "sessiond", "mirror.env"):         "SESSIOND_MIRROR=x\n",
	}
	for p, content := range others {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	enableLinks := map[string]string{
		filepath.Join(units, "sockets.target.wants", "sessiond.socket"):  filepath.Join(units, "sessiond.socket"),
		filepath.Join(units, "default.target.wants", "sessiond.service"): filepath.Join(units, "sessiond.service"),
		filepath.Join(units, "default.target.wants", "other.service"):    filepath.Join(units, "other.service"),
	}
	for link, target := range enableLinks {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, dir)

	runMake := makeInstaller(t, dir, home, "Linux", "PREFIX="+prefix, "SYSTEMD_USER_DIR="+units)

	installOut := runMake("install")
	for _, b := range []string{"sessiond", "sessionctl"} {
		fi, err := os.Stat(filepath.Join(bin, b))
		if err != nil {
			t.Fatalf("make install did not install %s: %v", b, err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want 0755", b, fi.Mode().Perm())
		}
	}
	if want := "systemctl --user enable --now sessiond.socket"; !strings.Contains(installOut, "not enabled") || !strings.Contains(installOut, want) {
		t.Errorf("make install, with no user manager to reach, does not say the units are not enabled and what to run (%q)", want)
	}

	// The version: the commit, unless this is a linked worktree, where Go
	// cannot stamp it (install says so).
	version := func(b string, args ...string) string {
		out, err := exec.Command(filepath.Join(bin, b), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", b, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitDir, _ := exec.Command("git", "-C", "..", "rev-parse", "--path-format=absolute", "--git-dir").Output()
	commonDir, _ := exec.Command("git", "-C", "..", "rev-parse", "--path-format=absolute", "--git-common-dir").Output()
	head, _ := exec.Command("git", "-C", "..", "rev-parse", "HEAD").Output()
	v, ctlV := version("sessiond", "--version"), version("sessionctl", "--version")
	switch {
	case len(gitDir) == 0 || len(head) < 12:
		if !strings.Contains(installOut, "not a git checkout") {
			t.Errorf("not in a git checkout, and make install does not warn that the binaries carry no commit")
		}
	case !bytes.Equal(gitDir, commonDir):
		if v != "sessiond dev" || !strings.Contains(installOut, "linked git worktree") {
			t.Errorf("in a linked worktree: sessiond --version says %q (want sessiond dev), and make install must say why", v)
		}
	default:
		want := "(commit " + string(head[:12])
		if !strings.HasPrefix(v, "sessiond ") || v == "sessiond dev" || !strings.Contains(v, want) {
			t.Errorf("installed sessiond --version says %q, want the commit stamped: %q", v, want)
		}
		if !strings.Contains(ctlV, want) {
			t.Errorf("installed sessionctl --version says %q, want %q", ctlV, want)
		}
	}

	// The units: the socket as shipped, the service running the installed
	// binary and otherwise as shipped.
	for _, name := range []string{socketFile, serviceFile} {
		shipped, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		installed, err := os.ReadFile(filepath.Join(units, filepath.Base(name)))
		if err != nil {
			t.Fatalf("make install did not install %s: %v", filepath.Base(name), err)
		}
		want := string(shipped)
		if name == serviceFile {
			var n int
			want, n = replaceExecBinary(want, filepath.Join(bin, "sessiond"))
			if n != 1 {
				t.Fatalf("%s: %d ExecStart= lines", name, n)
			}
		}
		if string(installed) != want {
			t.Errorf("installed %s differs from %s with ExecStart= pointed at %s:\n%s", filepath.Base(name), name, bin, installed)
		}
	}
	svc := loadUnit(t, filepath.Join(units, "sessiond.service"))
	specs := map[byte]string{'t': filepath.Join(dir, "run"), 'h': home, 'U': "1000", 'u': "someone"}
	if args := execStart(t, svc, specs); args[0] != filepath.Join(bin, "sessiond") {
		t.Errorf("installed sessiond.service runs %s, want %s", args[0], filepath.Join(bin, "sessiond"))
	}
	if analyze, err := exec.LookPath("systemd-analyze"); err != nil {
		// make tools installs it on Linux; elsewhere there is none.
		if runtime.GOOS == "linux" {
			t.Errorf("systemd-analyze is missing (make tools installs Debian's systemd package): the installed units were not verified: %v", err)
		} else {
			t.Logf("systemd-analyze not available on %s: the installed units were not verified", runtime.GOOS)
		}
	} else {
		analyzeVerify(t, analyze, filepath.Join(dir, "verify"), []string{filepath.Join(units, "sessiond.socket"), filepath.Join(units, "sessiond.service")})
	}
	os.RemoveAll(filepath.Join(dir, "verify"))

	// make install again (an upgrade) changes nothing but the files.
	runMake("install")

	runMake("uninstall")
	after := tree(t, dir)
	want := map[string]string{}
	for p, kind := range before {
		want[p] = kind
	}
	delete(want, filepath.Join(units, "sockets.target.wants", "sessiond.socket"))
	delete(want, filepath.Join(units, "default.target.wants", "sessiond.service"))
	for p, kind := range after {
		if _, ok := want[p]; !ok {
			t.Errorf("after make uninstall, %s (%s) is left that was not there before install", p, kind)
		}
	}
	for p, kind := range want {
		if got, ok := after[p]; !ok {
			t.Errorf("make uninstall removed %s (%s), which install did not write", p, kind)
		} else if got != kind {
			t.Errorf("make uninstall changed %s: %s, was %s", p, got, kind)
		}
	}
	for _, p := range []string{filepath.Join(bin, "sessiond"), filepath.Join(bin, "sessionctl"), filepath.Join(units, "sessiond.socket"), filepath.Join(units, "sessiond.service")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("make uninstall left %s (%v)", p, err)
		}
	}
}

// makeInstaller returns a function running `make TARGET vars...` in the
// repository as deploy/install.sh would run on goos (SERVICE_OS), with home
// as HOME. The fake HOME keeps the Go caches and settings of the real one;
// there is no DBUS_SESSION_BUS_ADDRESS and the runtime folder is dir/run,
// so systemctl --user reaches no manager, whatever runs on this machine,
// and launchctl, where there is one, is left alone (install.sh only calls
// it for ~/Library/LaunchAgents).
func makeInstaller(t *testing.T, dir, home, goos string, vars ...string) func(target string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make not on PATH: %v", err)
	}
	env := withoutEnv(os.Environ(), "HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "DBUS_SESSION_BUS_ADDRESS",
		"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PREFIX", "BINDIR", "SYSTEMD_USER_DIR", "LAUNCHD_DIR", "SERVICE_OS")
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	for i, v := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if i < len(names) && os.Getenv(names[i]) == "" {
			env = append(env, names[i]+"="+v)
		}
	}
	env = append(env, "HOME="+home, "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "SERVICE_OS="+goos)
	return func(target string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", "..", target}, vars...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
		t.Logf("make %s:\n%s", target, out)
		return string(out)
	}
}

// TestMakeInstallLaunchd runs `make install` and `make uninstall` as they run
// on macOS, into a LAUNCHD_DIR that is not ~/Library/LaunchAgents (so
// nothing is loaded): the plist has its placeholders filled in with the
// installed binary and the home folder, and uninstall removes it and the
// binaries.
func TestMakeInstallLaunchd(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	bin := filepath.Join(dir, "prefix", "bin")
	agents := filepath.Join(dir, "agents")
	runMake := makeInstaller(t, dir, home, "Darwin", "PREFIX="+filepath.Join(dir, "prefix"), "LAUNCHD_DIR="+agents)

	out := runMake("install")
	installed := filepath.Join(agents, filepath.Base(plistFile))
	data, err := os.ReadFile(installed)
	if err != nil {
		t.Fatalf("make install wrote no plist: %v", err)
	}
	if want := "launchctl bootstrap gui/"; !strings.Contains(out, want) {
		t.Errorf("make install into %s does not say how to load the plist (%q)", agents, want)
	}
	if bytes.Contains(data, []byte("<string>/usr/local/bin/sessiond</string>")) || bytes.Contains(data, []byte("<string>/Users/YOURNAME")) {
		t.Errorf("the installed plist still holds a placeholder:\n%s", data)
	}
	v, err := parsePlist(data)
	if err != nil {
		t.Fatalf("installed plist: %v", err)
	}
	top, _ := v.(map[string]any)
	if args := plistArgs(t, top); len(args) == 0 || args[0] != filepath.Join(bin, "sessiond") {
		t.Errorf("installed plist runs %q, want %s", args, filepath.Join(bin, "sessiond"))
	}
	for _, key := range []string{"StandardErrorPath", "StandardOutPath"} {
		if p, ok := top[key].(string); ok && !strings.HasPrefix(p, home+"/") {
			t.Errorf("installed plist: %s=%q, want a path in the home folder %s", key, p, home)
		}
	}
	if plutil, err := exec.LookPath("plutil"); err == nil {
		if out, err := exec.Command(plutil, "-lint", installed).CombinedOutput(); err != nil {
			t.Errorf("plutil -lint %s: %v\n%s", installed, err, out)
		}
	}

	runMake("uninstall")
	for _, p := range []string{installed, filepath.Join(bin, "sessiond"), filepath.Join(bin, "sessionctl")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("make uninstall left %s (%v)", p, err)
		}
	}
	if _, err := os.Stat(agents); err != nil {
		t.Errorf("make uninstall removed the LaunchAgents folder itself: %v", err)
	}
}

// tree maps every path under root (its folders, files and links, but not
// the runtime folder or what Go may leave in a fake home: caches,
// telemetry) to what it is: "dir",
// "link -> target" or "file <content>".
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case p == root:
		case d.IsDir():
			if rel, _ := filepath.Rel(root, p); slices.Contains([]string{"run", "home/go", "home/.cache", "home/.config/go"}, rel) {
				return fs.SkipDir
			}
			m[p] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[p] = "link -> " + target
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[p] = "file " + string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestParsers checks the little parsers the tests above rely on.
func TestParsers(t *testing.T) {
	u, err := parseUnit("x.service", []byte(strings.Join([]string{
		"# comment", "; comment", "[Service]", "A = one", "A=two", "B=x \\", "  y", "C=1", "C=", "C=2", "[Install]", "D=a b",
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := u.values("Service", "A"); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("A = %q", got)
	}
	if got, _ := u.last("Service", "B"); got != "x y" {
		t.Errorf("B = %q, want continued line", got)
	}
	if got := u.values("Service", "C"); !slices.Equal(got, []string{"2"}) {
		t.Errorf("C = %q, want the empty assignment to reset the list", got)
	}
	if got := u.fields("Install", "D"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("D = %q", got)
	}
	for _, bad := range []string{"A=1", "[Service]\nnoequals", "[Service"} {
		if _, err := parseUnit("bad", []byte(bad)); err == nil {
			t.Errorf("parseUnit(%q) did not fail", bad)
		}
	}

	for in, want := range map[string]time.Duration{
		"45": 45 * time.Second, "45s": 45 * time.Second, "1min 30s": 90 * time.Second, "2min5s": 125 * time.Second,
		"500ms": 500 * time.Millisecond, "1h": time.Hour, "infinity": time.Duration(1<<63 - 1),
	} {
		if got, err := parseTimespan(in); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "s", "5 parsecs", "-1s"} {
		if _, err := parseTimespan(bad); err == nil {
			t.Errorf("parseTimespan(%q) did not fail", bad)
		}
	}

	v, err := parsePlist([]byte(`<?xml version="1.0"?><plist version="1.0"><dict><!-- c -->
		<key>a</key><array><string>x</string><integer>-3</integer></array><key>b</key><true/>
		<key>c</key><dict><key>d</key><false/></dict></dict></plist>`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if a := m["a"].([]any); len(a) != 2 || a[0] != "x" || a[1] != int64(-3) || m["b"] != true || m["c"].(map[string]any)["d"] != false {
		t.Errorf("parsePlist = %#v", v)
	}
	for _, bad := range []string{
		`<plist><dict><!-- a -- b --><key>a</key><true/></dict></plist>`,
		`<plist><dict><key>a</key><true/><key>a</key><true/></dict></plist>`,
		`<plist><dict><key>a</key></dict></plist>`,
		`<plist><dict><key>a</key><integer>x</integer></dict></plist>`,
		`<plist><dict>text<key>a</key><true/></dict></plist>`,
	} {
		if _, err := parsePlist([]byte(bad)); err == nil {
			t.Errorf("parsePlist(%s) did not fail", bad)
		}
	}
}

// launchdKeys are the top-level keys of launchd.plist(5).
var launchdKeys = []string{
	"Label", "Disabled", "UserName", "GroupName", "inetdCompatibility", "LimitLoadToHosts", "LimitLoadFromHosts",
	"LimitLoadToSessionType", "LimitLoadToHardware", "LimitLoadFromHardware", "Program", "ProgramArguments",
	"EnableGlobbing", "EnableTransactions", "EnablePressuredExit", "OnDemand", "ServiceIPC", "KeepAlive", "RunAtLoad",
	"RootDirectory", "WorkingDirectory", "EnvironmentVariables", "Umask", "TimeOut", "ExitTimeOut", "ThrottleInterval",
	"InitGroups", "WatchPaths", "QueueDirectories", "StartOnMount", "StartInterval", "StartCalendarInterval",
	"StandardInPath", "StandardOutPath", "StandardErrorPath", "Debug", "WaitForDebugger", "SoftResourceLimits",
	"HardResourceLimits", "Nice", "ProcessType", "AbandonProcessGroup", "LowPriorityIO", "LowPriorityBackgroundIO",
	"MaterializeDatalessFiles", "LaunchOnlyOnce", "MachServices", "Sockets", "LaunchEvents", "SessionCreate",
	"AssociatedBundleIdentifiers",
}

// ---- systemd unit files ----

// unit is a parsed systemd unit file: section -> key -> values, in order.
type unit struct {
	path     string
	raw      []byte
	sections map[string]map[string][]string
}

func loadUnit(t *testing.T, name string) *unit {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// parseUnit reads the INI dialect of systemd.syntax(7): [Section] headers,
// Key=Value lines, # and ; comments, lines continued by a trailing
// backslash, and an empty value resetting a list.
func parseUnit(name string, data []byte) (*unit, error) {
	u := &unit{path: name, raw: data, sections: map[string]map[string][]string{}}
	var section string
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if next != "" && (next[0] == '#' || next[0] == ';') {
				continue
			}
			line = strings.TrimRight(strings.TrimSuffix(line, "\\"), " \t") + " " + next
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return nil, fmt.Errorf("%s:%d: bad section header %q", name, lineNo, line)
			}
			section = line[1 : len(line)-1]
			if u.sections[section] == nil {
				u.sections[section] = map[string][]string{}
			}
			continue
		}
		if section == "" {
			return nil, fmt.Errorf("%s:%d: %q outside any section", name, lineNo, line)
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" {
			return nil, fmt.Errorf("%s:%d: %q is not Key=Value", name, lineNo, line)
		}
		if value == "" {
			u.sections[section][key] = []string{}
		} else {
			u.sections[section][key] = append(u.sections[section][key], value)
		}
	}
	return u, nil
}

func (u *unit) has(section, key string) bool {
	_, ok := u.sections[section][key]
	return ok
}

func (u *unit) values(section, key string) []string { return u.sections[section][key] }

// last is the value in effect for a single-valued key.
func (u *unit) last(section, key string) (string, bool) {
	v := u.sections[section][key]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// fields is a list-valued key split into words.
func (u *unit) fields(section, key string) []string {
	var out []string
	for _, v := range u.values(section, key) {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

func wantValue(t *testing.T, u *unit, section, key, want string) {
	t.Helper()
	if got, ok := u.last(section, key); !ok {
		t.Errorf("%s: no %s= in [%s], want %s", u.path, key, section, want)
	} else if got != want {
		t.Errorf("%s: %s=%s, want %s", u.path, key, got, want)
	}
}

func isTrue(v string) bool {
	return slices.Contains([]string{"1", "yes", "y", "true", "t", "on"}, strings.ToLower(v))
}

func modeIs(v string, want uint64) bool {
	n, err := strconv.ParseUint(v, 8, 32)
	return err == nil && n == want
}

// execStart is the service's single ExecStart= command line, with
// specifiers and $VARIABLES from Environment= expanded.
func execStart(t *testing.T, svc *unit, specs map[byte]string) []string {
	t.Helper()
	lines := svc.values("Service", "ExecStart")
	if len(lines) != 1 {
		t.Fatalf("%s: %d ExecStart= commands, want one", svc.path, len(lines))
	}
	env, err := environment(svc, specs)
	if err != nil {
		t.Fatal(err)
	}
	words, err := splitWords(lines[0])
	if err != nil {
		t.Fatalf("%s: ExecStart: %v", svc.path, err)
	}
	var args []string
	for i, w := range words {
		if i == 0 {
			w = strings.TrimLeft(w, "-@:+!|")
		}
		w, err = expandSpecifiers(w, specs)
		if err != nil {
			t.Fatalf("%s: ExecStart: %v", svc.path, err)
		}
		exp, err := expandVars(w, env)
		if err != nil {
			t.Fatalf("%s: ExecStart: %v", svc.path, err)
		}
		args = append(args, exp...)
	}
	if len(args) == 0 {
		t.Fatalf("%s: empty ExecStart=", svc.path)
	}
	return args
}

// environment collects the service's Environment= assignments.
func environment(svc *unit, specs map[byte]string) (map[string]string, error) {
	env := map[string]string{}
	for _, line := range svc.values("Service", "Environment") {
		words, err := splitWords(line)
		if err != nil {
			return nil, fmt.Errorf("%s: Environment=%s: %w", svc.path, line, err)
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("%s: Environment=%s: %q is not NAME=value", svc.path, line, w)
			}
			if env[k], err = expandSpecifiers(v, specs); err != nil {
				return nil, fmt.Errorf("%s: Environment=%s: %w", svc.path, line, err)
			}
		}
	}
	return env, nil
}

// splitWords splits a command line or an Environment= value into words,
// honouring double and single quotes and backslash escapes.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// expandSpecifiers replaces %x specifiers; one without a value is an error,
// so a test cannot compare unexpanded text by accident.
func expandSpecifiers(s string, specs map[byte]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q ends in %%", s)
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
		} else if v, ok := specs[s[i]]; ok {
			b.WriteString(v)
		} else {
			return "", fmt.Errorf("specifier %%%c in %q not supported by this test", s[i], s)
		}
	}
	return b.String(), nil
}

// expandVars expands ${NAME} within a word and a lone $NAME word into its
// value's words, as systemd does in ExecStart=. Unset variables are an error
// here: systemd would expand them to nothing.
func expandVars(w string, env map[string]string) ([]string, error) {
	if strings.HasPrefix(w, "$") && !strings.HasPrefix(w, "${") {
		v, ok := env[w[1:]]
		if !ok {
			return nil, fmt.Errorf("%s is not set by Environment=", w)
		}
		return strings.Fields(v), nil
	}
	var b strings.Builder
	for {
		i := strings.Index(w, "${")
		if i < 0 {
			b.WriteString(w)
			return []string{b.String()}, nil
		}
		j := strings.IndexByte(w[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unterminated ${ in %q", w)
		}
		name := w[i+2 : i+j]
		v, ok := env[name]
		if !ok {
			return nil, fmt.Errorf("${%s} is not set by Environment=", name)
		}
		b.WriteString(w[:i])
		b.WriteString(v)
		w = w[i+j+1:]
	}
}

// replaceExecBinary points every ExecStart= line of a unit file at bin,
// keeping the arguments.
func replaceExecBinary(text, bin string) (string, int) {
	lines := strings.Split(text, "\n")
	n := 0
	for i, line := range lines {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.TrimSpace(key) != "ExecStart" || strings.TrimSpace(value) == "" {
			continue
		}
		value = strings.TrimSpace(value)
		prog, rest, _ := strings.Cut(value, " ")
		prefix := prog[:len(prog)-len(strings.TrimLeft(prog, "-@:+!|"))]
		lines[i] = "ExecStart=" + prefix + bin + " " + rest
		n++
	}
	return strings.Join(lines, "\n"), n
}

// parseTimespan parses a systemd time span (systemd.time(7)): a bare number
// is seconds, else number+unit pairs such as "1min 30s"; "infinity".
func parseTimespan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "infinity" {
		return time.Duration(1<<63 - 1), nil
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond,
		"ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
		"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	}
	var total time.Duration
	rest := s
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 {
			return 0, fmt.Errorf("bad time span %q", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("bad time span %q: %w", s, err)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return r < 'a' || r > 'z' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("bad time span %q: unit %q", s, rest[:j])
		}
		total += time.Duration(n * float64(unit))
		rest = rest[j:]
	}
	if s == "" {
		return 0, errors.New("empty time span")
	}
	return total, nil
}

// ---- command lines ----

// flagValue finds --name VALUE, --name=VALUE (or one dash) in args.
func flagValue(args []string, name string) (string, bool) {
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		trimmed := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if trimmed == a {
			continue
		}
		if trimmed == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(trimmed, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func shutdownTimeout(t *testing.T, args []string) time.Duration {
	t.Helper()
	v, ok := flagValue(args, "shutdown-timeout")
	if !ok {
		return defaultShutdownTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("--shutdown-timeout %q is not a positive Go duration (%v)", v, err)
	}
	return d
}

func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

// ---- launchd property lists ----

func plistArgs(t *testing.T, top map[string]any) []string {
	t.Helper()
	raw, ok := top["ProgramArguments"].([]any)
	if !ok || len(raw) == 0 {
		t.Errorf("%s: ProgramArguments=%v, want a non-empty array", plistFile, top["ProgramArguments"])
		return nil
	}
	args := make([]string, len(raw))
	for i, a := range raw {
		if args[i], ok = a.(string); !ok {
			t.Errorf("%s: ProgramArguments[%d] is %T, want a string", plistFile, i, a)
			return nil
		}
	}
	return args
}

// parsePlist decodes an XML property list into map[string]any, []any,
// string, int64, float64 and bool (date and data stay strings). The XML
// decoder is strict: it also rejects "--" inside comments.
func parsePlist(data []byte) (any, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("no <plist> element: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != "plist" {
				return nil, fmt.Errorf("root element <%s>, want <plist>", se.Name.Local)
			}
			break
		}
	}
	se, err := nextStart(d, "plist")
	if err != nil {
		return nil, err
	}
	if se == nil {
		return nil, errors.New("empty <plist>")
	}
	v, err := plistValue(d, *se)
	if err != nil {
		return nil, err
	}
	if se, err := nextStart(d, "plist"); err != nil {
		return nil, err
	} else if se != nil {
		return nil, fmt.Errorf("<plist> holds more than one value (<%s>)", se.Name.Local)
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return nil, err
		}
		if cd, ok := tok.(xml.CharData); ok && len(bytes.TrimSpace(cd)) == 0 {
			continue
		}
		if _, ok := tok.(xml.Comment); ok {
			continue
		}
		return nil, fmt.Errorf("content after </plist>: %v", tok)
	}
}

// nextStart returns the next child element inside parent, or nil at the end
// of parent. Comments and whitespace are skipped; other text is an error.
func nextStart(d *xml.Decoder, parent string) (*xml.StartElement, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			return &tok, nil
		case xml.EndElement:
			return nil, nil
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) != 0 {
				return nil, fmt.Errorf("stray text %q in <%s>", bytes.TrimSpace(tok), parent)
			}
		case xml.Comment, xml.ProcInst, xml.Directive:
		}
	}
}

func plistValue(d *xml.Decoder, se xml.StartElement) (any, error) {
	switch se.Name.Local {
	case "dict":
		m := map[string]any{}
		for {
			k, err := nextStart(d, "dict")
			if err != nil {
				return nil, err
			}
			if k == nil {
				return m, nil
			}
			if k.Name.Local != "key" {
				return nil, fmt.Errorf("<%s> in <dict> where a <key> belongs", k.Name.Local)
			}
			key, err := plistText(d)
			if err != nil {
				return nil, err
			}
			ve, err := nextStart(d, "dict")
			if err != nil {
				return nil, err
			}
			if ve == nil {
				return nil, fmt.Errorf("key %q has no value", key)
			}
			v, err := plistValue(d, *ve)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("key %q twice in one <dict>", key)
			}
			m[key] = v
		}
	case "array":
		a := []any{}
		for {
			ve, err := nextStart(d, "array")
			if err != nil {
				return nil, err
			}
			if ve == nil {
				return a, nil
			}
			v, err := plistValue(d, *ve)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case "true", "false":
		if ve, err := nextStart(d, se.Name.Local); err != nil {
			return nil, err
		} else if ve != nil {
			return nil, fmt.Errorf("<%s> is not empty", se.Name.Local)
		}
		return se.Name.Local == "true", nil
	case "integer":
		s, err := plistText(d)
		if err != nil {
			return nil, err
		}
		return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	case "real":
		s, err := plistText(d)
		if err != nil {
			return nil, err
		}
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	case "string", "date", "data":
		return plistText(d)
	default:
		return nil, fmt.Errorf("unknown plist element <%s>", se.Name.Local)
	}
}

// plistText reads an element's text up to its end tag.
func plistText(d *xml.Decoder) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		switch tok := tok.(type) {
		case xml.CharData:
			b.Write(tok)
		case xml.EndElement:
			return b.String(), nil
		case xml.StartElement:
			return "", fmt.Errorf("<%s> inside a text element", tok.Name.Local)
		}
	}
}
