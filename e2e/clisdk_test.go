package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Python and Ruby Agent SDKs drive the same real Claude Code CLI as the
// TypeScript agent tests (the binary in the TypeScript SDK's platform
// package), on defaults: sdk/python/tests/agent/driver.py and
// sdk/ruby/test/agent/driver.rb run query() with the project's
// SessiondStore, installed the way each adapter's README says (a venv with
// Debian's packages and pip install of the wheel; gem install
// --user-install of the gem into the agent's HOME), and the SDKs vendored
// in ../shared/vendor (see its SOURCES.md). The driver processes see only
// PATH and HOME; the CLI gets the mock API's address and a key from the
// options' env, as the TypeScript driver passes them. The stores name the
// test daemon's socket (socket_path:), as the TypeScript driver's does: the
// default socket is one per user, which parallel tests cannot share.

var (
	vendorDir  = filepath.Join("..", "..", "shared", "vendor")
	cliInTSPkg = filepath.Join(agentDir, "node_modules", "@anthropic-ai", "claude-agent-sdk-linux-x64", "claude")
	pyDriver   = filepath.Join("..", "sdk", "python", "tests", "agent", "driver.py")
	rbDriver   = filepath.Join("..", "sdk", "ruby", "test", "agent", "driver.rb")
)

// vendoredSDK is the folder of a vendored SDK's sources ($env, else under
// ../shared/vendor); missing, the test fails in CI and under
// SESSIOND_REQUIRE_SDK, as the adapters' own tests do, and skips elsewhere.
func vendoredSDK(t *testing.T, env, rel, marker string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		dir = filepath.Join(vendorDir, rel)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		why := "the vendored SDK is not at " + dir + " (see ../shared/vendor/SOURCES.md, or set " + env + ")"
		if os.Getenv("CI") != "" || os.Getenv("SESSIOND_REQUIRE_SDK") != "" {
			t.Fatalf("%s: %v", why, err)
		}
		t.Skip(why)
	}
	return dir
}

// adapterPackage builds one adapter's package with make (package-py,
// package-rb) and returns the file matching pattern.
func adapterPackage(t *testing.T, target, pattern string) string {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", repo, target, "PKGDIR="+dir)
	cmd.Env = envWithout(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("make %s made %v, want one %s", target, m, pattern)
	}
	return m[0]
}

// driverEnv is what a driver process sees: PATH and the agent's HOME.
func driverEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
}

// sdkTurn runs one turn of a Python or Ruby driver on defaults and returns
// its result, failing on an error or a mirror error.
func (a *agentEnv) sdkTurn(argv []string, prompt, resume, flush string) turnResult {
	a.t.Helper()
	cli, err := filepath.Abs(cliInTSPkg)
	if err != nil {
		a.t.Fatal(err)
	}
	args := map[string]string{"op": "turn", "socket": a.d.socket, "cwd": a.cwd, "home": a.home,
		"baseURL": a.api.URL, "cli": cli, "prompt": prompt, "resume": resume, "flush": flush}
	if resume == "" {
		delete(args, "resume")
	}
	cfg, _ := json.Marshal(args)
	cmd := exec.Command(argv[0], append(argv[1:], string(cfg))...)
	cmd.Env = driverEnv(a.home)
	r := a.mustTurn(a.runTurn(cmd, prompt)(), prompt)
	if len(r.Appended) == 0 {
		a.t.Fatalf("the driver reported no mirrored batch (adapter loaded from %q)", r.Module)
	}
	a.t.Logf("turn %q: session %s, %d entries mirrored in %d batches, adapter from %s", prompt, r.SessionID, len(flat(r.Appended)), len(r.Appended), r.Module)
	return r
}

// sdkReaders compares an SDK's session functions with the store and from
// sessiond's files (after a flush), as compareFunctions does for the
// TypeScript SDK.
func (a *agentEnv) sdkReaders(argv []string, sid string) {
	a.t.Helper()
	if _, errOut, code := a.d.ctl("", "flush", "--all"); code != 0 {
		a.t.Fatalf("flush: %s", errOut)
	}
	cfg, _ := json.Marshal(map[string]string{"op": "functions", "socket": a.d.socket, "root": a.d.root, "cwd": a.cwd, "sessionId": sid})
	cmd := exec.Command(argv[0], append(argv[1:], string(cfg))...)
	cmd.Env = driverEnv(a.home)
	out, errOut, code := runCmd(a.t, cmd, "")
	if code != 0 {
		a.t.Fatalf("driver functions: exit %d\n%s%s", code, out, errOut)
	}
	compareReaders(a.t, []byte(out))
}

// TestAgentDefaultsSharedFilePython is TestAgentDefaultsSharedFile with the
// Python Agent SDK (query() with ClaudeAgentOptions(session_store=
// SessiondStore(), cli_path=the real CLI)): the same two turns and checks.
//
// The SDK requires anyio>=4.0.0 (its pyproject.toml) and Debian 12 has
// python3-anyio 3.6.2, where the SDK cannot start the CLI at all: its
// transport calls anyio.open_process(..., user=...) ("open_process() got an
// unexpected keyword argument 'user'") and its Query subscripts
// anyio.create_memory_object_stream[...] (a function in 3.x, a generic
// class in 4.x). So the test takes Debian 13's python3-anyio (4.x, pure
// Python) and the typing_extensions it needs, which `make sdk-py-deps`
// fetches and unpacks (not installs) into .bin/pydeps, or the folder
// $SESSIOND_SDK_PY_DEPS names, put on the venv's path ahead of Debian's.
// Without it, under SESSIOND_REQUIRE_SDK (make test) the test fails;
// otherwise it checks that the SDK fails in exactly that way, so it
// notices when that changes, and says that the two turns did not run.
func TestAgentDefaultsSharedFilePython(t *testing.T) {
	t.Parallel()
	requireAgentSetup(t)
	src := vendoredSDK(t, "SESSIOND_SDK_PY_SRC", filepath.Join("claude-agent-sdk-python", "src"), filepath.Join("claude_agent_sdk", "__init__.py"))
	deps := os.Getenv("SESSIOND_SDK_PY_DEPS")
	if deps == "" {
		deps = filepath.Join("..", ".bin", "pydeps", "usr", "lib", "python3", "dist-packages")
	}
	if deps, _ = filepath.Abs(deps); !fileExists(filepath.Join(deps, "anyio", "__init__.py")) {
		deps = ""
	}
	python := "/usr/bin/python3" // Debian's: the Makefile's PY, with python3-grpcio and python3-anyio
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	wheel := adapterPackage(t, "package-py", "sessiond_store-*-py3-none-any.whl")
	// The README's install: a venv that sees Debian's packages, the wheel
	// with pip and no index. The vendored SDK (and anyio 4) are put on the
	// venv's path by a .pth file, as installing them would; the venv's
	// .pth entries come before Debian's dist-packages.
	venv := filepath.Join(t.TempDir(), "venv")
	env := envWithoutPrefix(os.Environ(), "PYTHON", "PIP_", "VIRTUAL_ENV")
	for _, args := range [][]string{
		{python, "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--disable-pip-version-check", wheel},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	site, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if len(site) != 1 {
		t.Fatalf("the venv's site-packages: %v", site)
	}
	pth := src + "\n"
	if deps != "" {
		pth = deps + "\n" + pth
	}
	if err := os.WriteFile(filepath.Join(site[0], "claude_agent_sdk_vendored.pth"), []byte(pth), 0o644); err != nil {
		t.Fatal(err)
	}
	venvPython := filepath.Join(venv, "bin", "python")
	probe := exec.Command(venvPython, "-c", "import anyio, inspect; print(anyio.__file__, 'user' in inspect.signature(anyio.open_process).parameters)")
	probe.Env = driverEnv(t.TempDir())
	out, errOut, code := runCmd(t, probe, "")
	if code != 0 {
		t.Fatalf("importing anyio in the venv: exit %d\n%s", code, errOut)
	}
	anyioFile, anyio4, _ := strings.Cut(strings.TrimSpace(out), " ")
	if deps != "" && !pathInside(anyioFile, deps) {
		t.Fatalf("anyio is imported from %s, want %s", anyioFile, deps)
	}
	driver, err := filepath.Abs(pyDriver)
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{venvPython, driver}
	if anyio4 != "True" {
		a := newAgentEnvRoot(t, true)
		cli, _ := filepath.Abs(cliInTSPkg)
		cfg, _ := json.Marshal(map[string]string{"op": "turn", "socket": a.d.socket, "cwd": a.cwd, "home": a.home,
			"baseURL": a.api.URL, "cli": cli, "prompt": "run the commands", "flush": "batched"})
		cmd := exec.Command(venvPython, driver, string(cfg))
		cmd.Env = driverEnv(a.home)
		r := a.runTurn(cmd, "run the commands")()
		const want = "open_process() got an unexpected keyword argument 'user'"
		if !strings.Contains(r.Error, want) {
			t.Fatalf("with anyio 3 (%s) the Python SDK was expected to fail to start the CLI (%s); it reported %q after %d mirrored batches: if it can run now, drop this branch", anyioFile, want, r.Error, len(r.Appended))
		}
		msg := fmt.Sprintf("the two turns through the Python SDK need anyio>=4 (the venv has Debian's %s, where the SDK fails: %s); run `make sdk-py-deps` (Debian 13's python3-anyio, unpacked into .bin/pydeps) or set SESSIOND_SDK_PY_DEPS", anyioFile, want)
		if os.Getenv("SESSIOND_REQUIRE_SDK") != "" {
			t.Fatal(msg)
		}
		t.Log("NOT RUN: " + msg)
		return
	}
	for _, flush := range []string{"batched", "eager"} {
		t.Run(flush, func(t *testing.T) {
			t.Parallel()
			a := newAgentEnvRoot(t, true)
			checkDefaultsTwoTurns(t, a, func(prompt, resume string) turnResult {
				r := a.sdkTurn(argv, prompt, resume, flush)
				if !pathInside(r.Module, venv) {
					t.Fatalf("sessiond_store was imported from %q, want the venv's install in %s", r.Module, venv)
				}
				return r
			}, func(sid string) { a.sdkReaders(argv, sid) })
		})
	}
}

// TestAgentDefaultsSharedFileRuby is TestAgentDefaultsSharedFile with the
// Ruby Agent SDK (ClaudeAgentSDK.query with session_store: SessiondStore.new
// and cli_path: the real CLI; the SDK passes --session-mirror): the same two
// turns and checks.
func TestAgentDefaultsSharedFileRuby(t *testing.T) {
	t.Parallel()
	requireAgentSetup(t)
	lib := vendoredSDK(t, "SESSIOND_SDK_RB_LIB", filepath.Join("claude-agent-sdk-ruby", "lib"), "claude_agent_sdk.rb")
	gem := adapterPackage(t, "package-rb", "sessiond_store-*.gem")
	driver, err := filepath.Abs(rbDriver)
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"ruby", "-I", lib, driver}
	for _, flush := range []string{"batched", "eager"} {
		t.Run(flush, func(t *testing.T) {
			t.Parallel()
			a := newAgentEnvRoot(t, true)
			// The README's install, into the agent's HOME: --user-install,
			// the dependencies Debian's gems, --local reaching no registry.
			install := exec.Command("gem", "install", "--user-install", "--local", "--no-document", gem)
			install.Env = driverEnv(a.home)
			if out, err := install.CombinedOutput(); err != nil {
				t.Fatalf("gem install %s: %v\n%s", gem, err, out)
			}
			checkDefaultsTwoTurns(t, a, func(prompt, resume string) turnResult {
				r := a.sdkTurn(argv, prompt, resume, flush)
				if !pathInside(r.Module, filepath.Join(a.home, ".local", "share", "gem")) {
					t.Fatalf("the sessiond_store gem loaded is %q, want the one installed under %s", r.Module, a.home)
				}
				return r
			}, func(sid string) { a.sdkReaders(argv, sid) })
		})
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
