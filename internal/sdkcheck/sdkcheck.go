// Package sdkcheck runs the official TypeScript SDK's session readers against
// a folder, for tests.
//
// sessiond's canonical transcripts must read, through the official Claude
// Agent SDK (@anthropic-ai/claude-agent-sdk), exactly as if the agent had
// written them. Rather than trust a re-implementation of the readers, tests
// ask the real SDK: e2e/sdk/ pins the npm package, and e2e/sdk/sdkcli.mjs runs
// one SDK session function per process, reading one JSON request on stdin and
// writing one JSON response on stdout. This package finds that folder, runs
// the script with CLAUDE_CONFIG_DIR pointing at the folder under test, and
// decodes the answer.
//
// Install the SDK once, from the repository root:
//
//	npm ci --prefix e2e/sdk
//
// Tests call [Require], which skips when the SDK is missing on a developer's
// machine and fails when CI is set (or SESSIOND_REQUIRE_SDK=1), so that CI
// cannot pass without having asked the real SDK.
package sdkcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// InstallCommand is what installs the SDK, run from the repository root.
const InstallCommand = "npm ci --prefix e2e/sdk"

// CallTimeout bounds one run of the SDK script.
const CallTimeout = 60 * time.Second

const (
	sdkPackage = "@anthropic-ai/claude-agent-sdk"
	script     = "sdkcli.mjs"
	envDir     = "SESSIOND_SDK_DIR"
	envRequire = "SESSIOND_REQUIRE_SDK"
)

// SDK is an installed copy of the official SDK with the sdkcli.mjs script.
type SDK struct {
	// Dir is the e2e/sdk folder: sdkcli.mjs, package.json and node_modules.
	Dir string
}

// Find locates e2e/sdk with the SDK installed in node_modules: the folder
// named by SESSIOND_SDK_DIR when set, else e2e/sdk in the module that holds
// the working directory (found by walking up to go.mod). It also checks that
// node is on PATH and that the installed SDK is the version package.json
// pins. Its error says what to run.
func Find() (*SDK, error) {
	dir := os.Getenv(envDir)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(root, "e2e", "sdk")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sdkcheck: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, script)); err != nil {
		return nil, fmt.Errorf("sdkcheck: %s has no %s (set %s to the e2e/sdk folder of the sessiond repository): %w", dir, script, envDir, err)
	}
	pinned, err := pinnedVersion(dir)
	if err != nil {
		return nil, err
	}
	installed, err := installedVersion(dir)
	if err != nil {
		return nil, fmt.Errorf("sdkcheck: the official SDK is not installed in %s: run `%s` from the repository root (%v)", dir, InstallCommand, err)
	}
	if installed != pinned {
		return nil, fmt.Errorf("sdkcheck: %s has %s %s installed but package.json pins %s: run `%s` from the repository root", dir, sdkPackage, installed, pinned, InstallCommand)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("sdkcheck: node is not on PATH: install Node.js 18.14 or later (Debian: apt-get install nodejs npm), then run `%s`: %w", InstallCommand, err)
	}
	return &SDK{Dir: dir}, nil
}

// Require returns the installed SDK. When it is missing, the test fails if
// the environment variable CI is set (to anything but "false" or "0") or
// SESSIOND_REQUIRE_SDK=1, and is skipped otherwise; either way the message
// says what to run.
func Require(t testing.TB) *SDK {
	t.Helper()
	s, err := Find()
	if err == nil {
		return s
	}
	if required() {
		t.Fatalf("%v (the official SDK is required here: CI or %s=1 is set)", err, envRequire)
	}
	t.Skipf("%v (skipping; set %s=1 to make this a failure)", err, envRequire)
	return nil
}

func required() bool {
	if os.Getenv(envRequire) == "1" {
		return true
	}
	ci := strings.ToLower(os.Getenv("CI"))
	return ci != "" && ci != "false" && ci != "0"
}

// moduleRoot walks up from the working directory to the folder with go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("sdkcheck: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("sdkcheck: no go.mod above %s: set %s to the e2e/sdk folder of the sessiond repository", wd, envDir)
		}
		dir = parent
	}
}

func pinnedVersion(dir string) (string, error) {
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &pkg); err != nil {
		return "", fmt.Errorf("sdkcheck: %w", err)
	}
	v := pkg.Dependencies[sdkPackage]
	if v == "" {
		return "", fmt.Errorf("sdkcheck: %s does not depend on %s", filepath.Join(dir, "package.json"), sdkPackage)
	}
	return v, nil
}

func installedVersion(dir string) (string, error) {
	var pkg struct {
		Version string `json:"version"`
	}
	err := readJSON(filepath.Join(dir, "node_modules", filepath.FromSlash(sdkPackage), "package.json"), &pkg)
	return pkg.Version, err
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// SDKError is an error thrown by the SDK function itself, such as "Session
// ... not found": the request was fine and the SDK said no.
type SDKError struct {
	Op      string // the sdkcli op, which is the SDK function's name
	Name    string // the JavaScript error's name, e.g. "Error"
	Message string // the JavaScript error's message
}

func (e *SDKError) Error() string {
	return fmt.Sprintf("sdk %s: %s", e.Op, e.Message)
}

// response is sdkcli.mjs's answer.
type response struct {
	Result    json.RawMessage `json:"result"`
	Error     *string         `json:"error"`
	ErrorName string          `json:"errorName"`
	Kind      string          `json:"kind"`
}

// Call runs sdkcli.mjs once with req (a JSON object with "op" and the op's
// arguments) and decodes the result into resp, which may be nil. The SDK
// sees CLAUDE_CONFIG_DIR=configDir and a fresh empty HOME, and of the
// caller's environment only PATH and TMPDIR, so that nothing leaks in from
// the real ~/.claude or from variables such as CLAUDE_CODE_PROJECT_DIR_NAME
// (which replaces the project key) or CLAUDE_CODE_DISABLE_PRECOMPACT_SKIP
// that change what the SDK reads. A run is limited to [CallTimeout]. An
// error thrown by the SDK function comes back as an [*SDKError].
func (s *SDK) Call(ctx context.Context, configDir string, req any, resp any) error {
	if configDir == "" {
		return errors.New("sdkcheck: empty configDir: the SDK would read the real ~/.claude")
	}
	configDir, err := filepath.Abs(configDir)
	if err != nil {
		return fmt.Errorf("sdkcheck: %w", err)
	}
	in, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("sdkcheck: encoding request: %w", err)
	}
	var head struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(in, &head); err != nil || head.Op == "" {
		return fmt.Errorf("sdkcheck: request %s is not a JSON object with an op", in)
	}
	r, err := s.run(ctx, configDir, in)
	if err != nil {
		return fmt.Errorf("sdkcheck: %s: %w", head.Op, err)
	}
	if r.Error != nil {
		if r.Kind == "sdk" {
			return &SDKError{Op: head.Op, Name: r.ErrorName, Message: *r.Error}
		}
		return fmt.Errorf("sdkcheck: %s: bad request: %s", head.Op, *r.Error)
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(r.Result, resp); err != nil {
		return fmt.Errorf("sdkcheck: %s: decoding result %.200s: %w", head.Op, r.Result, err)
	}
	return nil
}

// run executes the script and returns its one response.
func (s *SDK) run(ctx context.Context, configDir string, in []byte) (*response, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node is not on PATH: %w", err)
	}
	home, err := os.MkdirTemp("", "sdkcheck-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)

	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(s.Dir, script))
	// The SDK resolves nothing against its working directory when given
	// absolute paths; the empty home keeps it away from the repository.
	cmd.Dir = home
	cmd.Env = sdkEnv(home, configDir)
	cmd.Stdin = bytes.NewReader(in)
	var stdout bytes.Buffer
	stderr := &capped{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("node %s did not answer within %v (%v): %w; stderr: %s", script, CallTimeout, err, ctx.Err(), stderr)
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w; stderr: %s", script, err, stderr)
	}
	dec := json.NewDecoder(&stdout)
	var r response
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("node %s wrote no JSON response (%w); stderr: %s", script, err, stderr)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("node %s wrote more than one JSON value on stdout; stderr: %s", script, stderr)
	}
	if r.Error == nil && r.Result == nil {
		return nil, fmt.Errorf("node %s answered with neither result nor error; stderr: %s", script, stderr)
	}
	return &r, nil
}

// sdkEnv is the whole environment of the SDK process.
func sdkEnv(home, configDir string) []string {
	env := []string{
		"CLAUDE_CONFIG_DIR=" + configDir,
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		// The SDK runs `git worktree list` in the project folder; keep the
		// machine's git configuration out of it.
		"GIT_CONFIG_NOSYSTEM=1",
		"PATH=" + os.Getenv("PATH"),
	}
	if runtime.GOOS == "windows" {
		env = append(env, "USERPROFILE="+home)
		for _, k := range []string{"SYSTEMROOT", "TEMP", "TMP", "PATHEXT"} {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
	} else if v, ok := os.LookupEnv("TMPDIR"); ok {
		env = append(env, "TMPDIR="+v)
	}
	return env
}

// capped keeps the first max bytes written to it, for error messages.
type capped struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.cut = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) String() string {
	s := strings.TrimSpace(c.buf.String())
	if s == "" {
		return "(empty)"
	}
	if c.cut {
		s += " [cut]"
	}
	return s
}
