package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
)

// TestAdapterPackages builds the three SessionStore adapters as packages
// with `make packages`, installs each into a scratch agent project the way
// its README says (npm install of the tarball beside the agent's own SDK; a
// venv with Debian's grpcio and pip install of the wheel; gem install
// --user-install of the gem), and runs a small script there that appends
// two batches through the installed package to a real sessiond and loads
// them back: the entries round-trip, the daemon holds them, and the package
// was loaded from the install location, not from the checkout.
//
// It needs what `make tools` installs (node and npm, Debian's python3 with
// python3-grpcio, python3-venv and pip, ruby with ruby-grpc and gem), and
// fails, rather than skips, when one is missing.
func TestAdapterPackages(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	python := "/usr/bin/python3" // Debian's: the Makefile's PY, with python3-grpcio
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	for _, tool := range []string{"make", "node", "npm", "ruby", "gem", python} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (make tools installs what this test needs): %v", tool, err)
		}
	}

	dist := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", repo, "packages", "PKGDIR="+dist)
	cmd.Env = envWithout(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make packages: %v\n%s", err, out)
	}
	artefact := func(pattern string) string {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(dist, pattern))
		if len(m) != 1 {
			t.Fatalf("make packages made %d files %s in %s, want 1: %v", len(m), pattern, dist, m)
		}
		return m[0]
	}
	tarball := artefact("sessiond-store-*.tgz")
	wheel := artefact("sessiond_store-*-py3-none-any.whl")
	gem := artefact("sessiond_store-*.gem")

	d := newDaemon(t)
	d.start()
	c := d.client()
	t.Cleanup(func() { c.Close() })

	// check installs nothing: it runs one adapter's script in its scratch
	// project and checks what came back.
	check := func(t *testing.T, lang, scratch string, script *exec.Cmd) map[string]any {
		t.Helper()
		projectKey, sid := "-scratch-"+lang, uuid.NewString()
		u1, u2, u3 := uuid.NewString(), uuid.NewString(), uuid.NewString()
		batches := []any{
			[]any{
				map[string]any{"type": "user", "uuid": u1, "sessionId": sid, "message": map[string]any{"role": "user", "content": "hello from " + lang + " ✓ \u2028"}},
				map[string]any{"type": "assistant", "uuid": u2, "parentUuid": u1, "sessionId": sid,
					"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "hi"}}}},
			},
			[]any{
				map[string]any{"type": "user", "uuid": u3, "parentUuid": u2, "sessionId": sid, "message": map[string]any{"role": "user", "content": "again"}},
			},
		}
		var want []any
		for _, b := range batches {
			want = append(want, b.([]any)...)
		}
		// JSON as the scripts see it (and as they print it back).
		want = jsonRoundTripped(t, want).([]any)
		entries, err := json.Marshal(batches)
		if err != nil {
			t.Fatal(err)
		}
		script.Args = append(script.Args, d.socket, projectKey, sid)
		script.Dir = scratch
		script.Env = append(script.Env, "ENTRIES="+string(entries), "CLAUDE_CONFIG_DIR="+filepath.Join(scratch, "agent-config"))
		out, errOut, code := runCmd(t, script, "")
		if code != 0 {
			t.Fatalf("%s script: exit %d\nstdout:\n%s\nstderr:\n%s", lang, code, out, errOut)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(lastOutputLine(out)), &got); err != nil {
			t.Fatalf("%s script printed %q (stderr %q): %v", lang, out, errOut, err)
		}
		t.Logf("%s script: %s", lang, lastOutputLine(out))
		if !reflect.DeepEqual(got["loaded"], want) {
			t.Errorf("%s: load returned\n%v\nwant the appended entries\n%v", lang, got["loaded"], want)
		}
		// sessiond itself holds them, in order.
		var stored []any
		err = c.Read(t.Context(), client.Session{ProjectKey: projectKey, ID: sid}, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
			var v any
			text := e.GetText()
			if text == "" {
				text = string(e.GetData())
			}
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				t.Errorf("%s: stored line %d %q: %v", lang, e.GetIndex(), text, err)
			}
			stored = append(stored, v)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: reading the session back from sessiond: %v", lang, err)
		}
		if !reflect.DeepEqual(stored, want) {
			t.Errorf("%s: sessiond holds\n%v\nwant\n%v", lang, stored, want)
		}
		if p, _ := got["module"].(string); !pathInside(p, scratch) || pathInside(p, repo) {
			t.Errorf("%s: the package was loaded from %q, want the scratch project's install (%s), not the checkout (%s)", lang, p, scratch, repo)
		}
		return got
	}

	t.Run("npm", func(t *testing.T) {
		var pkg struct {
			DevDependencies map[string]string `json:"devDependencies"`
		}
		data, err := os.ReadFile(filepath.Join(repo, "sdk", "typescript", "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &pkg); err != nil {
			t.Fatal(err)
		}
		sdkVersion := pkg.DevDependencies["@anthropic-ai/claude-agent-sdk"]
		if sdkVersion == "" {
			t.Fatal("sdk/typescript/package.json pins no @anthropic-ai/claude-agent-sdk devDependency")
		}
		scratch := t.TempDir()
		writeScratchFiles(t, scratch, map[string]string{
			"package.json":  `{"name": "scratch-agent", "version": "1.0.0", "private": true}` + "\n",
			"roundtrip.mjs": npmScript,
			"cjs.cjs":       npmCJSScript,
		})
		env := envWithoutPrefix(os.Environ(), "npm_", "NODE_PATH", "NODE_OPTIONS")
		// The agent's own SDK, the version the adapter is built against,
		// from npm's cache when it is there. Optional dependencies (the
		// SDK's platform package with the Claude Code CLI) are left out:
		// the store does not run the CLI.
		npmInstall(t, scratch, env, "install", "--no-audit", "--no-fund", "--prefer-offline", "--omit=optional",
			tarball, "@anthropic-ai/claude-agent-sdk@"+sdkVersion)
		// A copy, not a link to the checkout (which would load its dev SDK).
		if fi, err := os.Lstat(filepath.Join(scratch, "node_modules", "sessiond-store")); err != nil || !fi.IsDir() {
			t.Fatalf("node_modules/sessiond-store is not a folder: %v %v", fi, err)
		}
		if _, err := os.Stat(filepath.Join(scratch, "node_modules", "sessiond-store", "node_modules", "@anthropic-ai")); err == nil {
			t.Errorf("npm installed a second @anthropic-ai SDK under sessiond-store: it must use the agent's (a peer dependency)")
		}
		script := exec.Command("node", "roundtrip.mjs")
		script.Env = env
		got := check(t, "npm", scratch, script)
		// The SDK resolves to the agent's own (and, with no copy under
		// sessiond-store checked above, so it does for the adapter).
		if p, _ := got["sdk"].(string); !pathInside(p, filepath.Join(scratch, "node_modules", "@anthropic-ai", "claude-agent-sdk")) {
			t.Errorf("@anthropic-ai/claude-agent-sdk resolves to %q, want the agent's own, in %s", p, scratch)
		}

		// CommonJS: the package is ESM-only; import() loads it (the
		// README's form).
		cjs := exec.Command("node", "cjs.cjs")
		cjs.Dir, cjs.Env = scratch, env
		out, errOut, code := runCmd(t, cjs, "")
		if code != 0 || strings.TrimSpace(out) != "function" {
			t.Errorf("import() from CommonJS: exit %d, out %q, err %q; want SessiondStore to be a function", code, out, errOut)
		}
	})

	t.Run("python", func(t *testing.T) {
		scratch := t.TempDir()
		writeScratchFiles(t, scratch, map[string]string{"roundtrip.py": pythonScript})
		env := envWithoutPrefix(os.Environ(), "PYTHON", "PIP_", "VIRTUAL_ENV")
		venv := filepath.Join(scratch, "venv")
		for _, args := range [][]string{
			// Debian's grpcio and protobuf come from the system site
			// packages; the wheel's requirements must be met by them
			// (no --no-deps), and nothing comes from an index.
			{python, "-m", "venv", "--system-site-packages", venv},
			{filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--disable-pip-version-check", wheel},
		} {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir, cmd.Env = scratch, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		script := exec.Command(filepath.Join(venv, "bin", "python"), "roundtrip.py")
		script.Env = env
		got := check(t, "python", scratch, script)
		if p, _ := got["module"].(string); !pathInside(p, filepath.Join(venv, "lib")) {
			t.Errorf("sessiond_store was imported from %q, want the venv's site-packages", p)
		}
	})

	t.Run("ruby", func(t *testing.T) {
		scratch := t.TempDir()
		home := filepath.Join(scratch, "home")
		writeScratchFiles(t, scratch, map[string]string{"roundtrip.rb": rubyScript, "home/.keep": ""})
		env := append(envWithout(os.Environ(), "HOME", "XDG_DATA_HOME", "GEM_HOME", "GEM_PATH", "RUBYLIB", "RUBYOPT", "BUNDLE_GEMFILE"),
			"HOME="+home)
		// --user-install into the fake HOME; the dependencies (grpc,
		// google-protobuf, googleapis-common-protos-types) are Debian's
		// gems, and --local reaches no registry.
		install := exec.Command("gem", "install", "--user-install", "--local", "--no-document", gem)
		install.Dir, install.Env = scratch, env
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("gem install %s: %v\n%s", gem, err, out)
		}
		script := exec.Command("ruby", "roundtrip.rb")
		script.Env = env
		got := check(t, "ruby", scratch, script)
		if p, _ := got["gem"].(string); !pathInside(p, filepath.Join(home, ".local", "share", "gem")) {
			t.Errorf("the sessiond_store gem loaded is %q, want the one installed under %s", p, home)
		}
	})
}

const npmScript = `import { fileURLToPath } from "node:url";
import { realpathSync } from "node:fs";
import { SessiondStore } from "sessiond-store";

const [socketPath, projectKey, sessionId] = process.argv.slice(2);
const store = new SessiondStore({ socketPath });
const key = { projectKey, sessionId };
for (const batch of JSON.parse(process.env.ENTRIES)) await store.append(key, batch);
const loaded = await store.load(key);
await store.close();
const where = (spec) => realpathSync(fileURLToPath(import.meta.resolve(spec)));
console.log(JSON.stringify({ loaded, module: where("sessiond-store"), sdk: where("@anthropic-ai/claude-agent-sdk") }));
`

const npmCJSScript = `import("sessiond-store").then((m) => console.log(typeof m.SessiondStore));
`

const pythonScript = `import asyncio, json, os, sys

import sessiond_store
from sessiond_store import SessiondStore


async def main():
    socket_path, project_key, session_id = sys.argv[1:4]
    store = SessiondStore(socket_path=socket_path, fold=None)
    key = {"project_key": project_key, "session_id": session_id}
    for batch in json.loads(os.environ["ENTRIES"]):
        await store.append(key, batch)
    loaded = await store.load(key)
    await store.close()
    print(json.dumps({"loaded": loaded, "module": os.path.realpath(sessiond_store.__file__)}))


asyncio.run(main())
`

const rubyScript = `require 'json'
require 'sessiond_store'

socket_path, project_key, session_id = ARGV
store = SessiondStore.new(socket_path: socket_path, fold: nil)
key = { 'project_key' => project_key, 'session_id' => session_id }
JSON.parse(ENV.fetch('ENTRIES')).each { |batch| store.append(key, batch) }
loaded = store.load(key)
store.close
feature = $LOADED_FEATURES.find { |f| f.end_with?('/sessiond_store.rb') }
puts JSON.generate('loaded' => loaded, 'module' => File.realpath(feature),
                   'gem' => File.realpath(Gem.loaded_specs.fetch('sessiond_store').full_gem_path))
`

func writeScratchFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pathInside reports whether p is dir or below it (both cleaned, symlinks in
// dir resolved as the scripts resolve theirs).
func pathInside(p, dir string) bool {
	if p == "" {
		return false
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func jsonRoundTripped(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func lastOutputLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func envWithout(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if k == n {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// envWithoutPrefix drops the variables whose names start with any of
// prefixes.
func envWithoutPrefix(env []string, prefixes ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// npmInstall runs npm with args in dir. npm itself can hang: in one CI run
// an install whose every package was a cache hit stopped doing anything
// for over 7 minutes (no CPU, no socket) until killed. So an attempt that
// has not ended in 3 minutes is killed and tried once more, saying so; a
// failure that is not a hang fails at once.
func npmInstall(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	const limit = 3 * time.Minute
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = dir, env, 10*time.Second
		out, err := cmd.CombinedOutput()
		hung := ctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return
		case hung && attempt == 1:
			t.Logf("npm %v did not end within %v (npm hung; killed): trying once more\n%s", args, limit, out)
			os.RemoveAll(filepath.Join(dir, "node_modules"))
		default:
			t.Fatalf("npm %v: %v (ended by its %v limit: %v)\n%s", args, err, limit, hung, out)
		}
	}
}
