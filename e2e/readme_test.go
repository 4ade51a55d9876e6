package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks returns the ```sh blocks of README.md's section that starts
// with heading (up to the next "## " heading), in order.
func readmeBlocks(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	text = text[start+len(heading)+2:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var blocks []string
	for {
		i := strings.Index(text, "```sh\n")
		if i < 0 {
			break
		}
		text = text[i+len("```sh\n"):]
		j := strings.Index(text, "```")
		if j < 0 {
			t.Fatalf("unterminated code block in %q", heading)
		}
		blocks = append(blocks, text[:j])
		text = text[j+3:]
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md's %q section has no sh block", heading)
	}
	return blocks
}

// runReadme runs script with bash -euo pipefail from the repository root in
// a fresh home, waits for every process it started (the daemon it stops
// itself) and returns the output.
func runReadme(t *testing.T, script string, env ...string) string {
	t.Helper()
	home, tmp := t.TempDir(), t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = ".."
	cmd.Env = append(envWith("HOME="+home, "TMPDIR="+tmp), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	pgid := cmd.Process.Pid
	// The daemon the walkthrough started must go away by itself (its
	// last line stops it); anything left is killed.
	deadline := time.Now().Add(time.Minute)
	for syscall.Kill(-pgid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if syscall.Kill(-pgid, 0) == nil {
		syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("processes of the walkthrough still ran a minute after it ended (the daemon did not stop)")
	}
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out.String())
	}
	// What the commands made in the temp folder they cleaned up after
	// themselves (a walkthrough's state folder holds a 64 MiB ballast).
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the README's commands left %d entries in the temp folder (%s...)", len(left), left[0].Name())
	}
	return out.String()
}

// TestReadmeWalkthrough runs README.md's "sessionctl walkthrough" exactly
// as written: a newcomer who copies it block by block gets no error.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	script := strings.Join(readmeBlocks(t, "## sessionctl walkthrough"), "\n")
	// What a newcomer trips on: a command a fresh machine lacks, go run
	// (its exit status is go's), an alias, a placeholder such as [--up-to ID].
	traps := regexp.MustCompile(`uuidgen|go run|alias |\[(--|[A-Z]{2})`)
	for _, line := range strings.Split(script, "\n") {
		if code, _, _ := strings.Cut(line, "# "); traps.MatchString(code) {
			t.Errorf("walkthrough line %q uses %q (not on a fresh machine, hides exit codes, or is a placeholder)", line, traps.FindString(code))
		}
	}
	out := runReadme(t, script)
	for _, want := range []string{"now holds 1 entry", "now holds 2 entries", "subagents/agent-abc", ": clean (2 lines)",
		"nothing to repair", `"customTitle":"First turn"`, "restored", "materialized session"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "multiple_roots") {
		t.Errorf("the walkthrough's own data is not one conversation:\n%s", out)
	}
}

// TestReadmeListsEveryRPC: the API section names every RPC of the proto.
func TestReadmeListsEveryRPC(t *testing.T) {
	t.Parallel()
	proto, err := os.ReadFile(filepath.Join("..", "api", "proto", "sessiond", "v1", "sessiond.proto"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	api := string(readme)
	if i := strings.Index(api, "\n## The API\n"); i >= 0 {
		api = api[i:]
		if j := strings.Index(api[1:], "\n## "); j >= 0 {
			api = api[:j+1]
		}
	}
	rpcs := regexp.MustCompile(`(?m)^\s*rpc (\w+)\(`).FindAllStringSubmatch(string(proto), -1)
	if len(rpcs) < 18 {
		t.Fatalf("found %d rpcs in the proto", len(rpcs))
	}
	for _, m := range rpcs {
		if !strings.Contains(api, "`"+m[1]+"`") {
			t.Errorf("README's API section does not name the RPC %s", m[1])
		}
	}
}

// TestReadmeGrpcurl runs the README's grpcurl block (plain JSON text in,
// text out) against a real daemon with the real grpcurl, installed by
// make tools into .bin.
func TestReadmeGrpcurl(t *testing.T) {
	t.Parallel()
	grpcurl, err := exec.LookPath("grpcurl")
	if err != nil {
		grpcurl = filepath.Join("..", ".bin", "grpcurl")
		if _, err := os.Stat(grpcurl); err != nil {
			const why = "grpcurl is not installed: make tools installs it into .bin"
			if os.Getenv("CI") != "" || os.Getenv("SESSIOND_REQUIRE_SDK") != "" {
				t.Fatal(why)
			}
			t.Skip(why)
		}
	}
	abs, _ := filepath.Abs(grpcurl)
	d := newDaemon(t)
	d.start()
	sid := "0b8f2a56-7d3e-4c1a-9e2b-5f6a7b8c9d0e"
	blocks := readmeBlocks(t, "## The API")
	out := runReadme(t, blocks[0], "SESSIOND_SOCKET="+d.socket, "SID="+sid, "PATH="+filepath.Dir(abs)+":"+os.Getenv("PATH"))
	for _, want := range []string{"sessiond.v1.Sessiond.ListSummaries", `"socket": "` + d.socket, "ENTRY_OUTCOME_STORED", `"text": "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"from grpcurl\"}}"`} {
		if !strings.Contains(out, want) {
			t.Errorf("grpcurl output lacks %q:\n%s", want, out)
		}
	}
}
