package damage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/transcript/transcripttest"
)

// The official TypeScript SDK is the judge of whether a repaired
// transcript resumes: its getSessionMessages builds the conversation the
// way the CLI does, and the script below checks, as the API will, that
// every tool_use is answered in the next user turn and every tool_result
// answers the turn before it.

// sdkCheckScript reads {sdk, jobs: [{sid, dir}]} from argv[2] and prints,
// per job, what it found.
const sdkCheckScript = `
const spec = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'));
(async () => {
  const m = await import(spec.sdk + '/sdk.mjs');
  const out = [];
  for (const job of spec.jobs) {
    const msgs = await m.getSessionMessages(job.sid, {dir: job.dir});
    let pending = new Map(), missing = [], stray = [], uses = 0, results = 0, lastId = null;
    for (const x of msgs) {
      const c = x.message && Array.isArray(x.message.content) ? x.message.content : [];
      if (x.type === 'assistant') {
        const id = x.message && x.message.id;
        if (id !== lastId && pending.size) { missing.push(...pending.keys()); pending.clear(); }
        lastId = id;
        for (const b of c) if (b && b.type === 'tool_use') { pending.set(b.id, true); uses++; }
      } else if (x.type === 'user') {
        let prompt = true;
        for (const b of c) if (b && b.type === 'tool_result') {
          prompt = false; results++;
          if (pending.has(b.tool_use_id)) pending.delete(b.tool_use_id); else stray.push(b.tool_use_id);
        }
        if (prompt && pending.size) { missing.push(...pending.keys()); pending.clear(); }
        lastId = null;
      }
    }
    missing.push(...pending.keys());
    out.push({name: job.name, messages: msgs.length, toolUses: uses, toolResults: results, missing, stray});
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
`

// sdkPath finds the SDK: $SESSIOND_SDK_DIR, else the copy the e2e suite
// installs. Without it (or without node) the test skips, saying why, unless
// SESSIOND_REQUIRE_SDK=1 (CI), where it fails.
func sdkPath(t *testing.T) (node, sdk string) {
	t.Helper()
	sdk = os.Getenv("SESSIOND_SDK_DIR")
	if sdk == "" {
		sdk = "../../../e2e/sdk/node_modules/@anthropic-ai/claude-agent-sdk"
	}
	sdk, _ = filepath.Abs(sdk)
	node, nodeErr := exec.LookPath("node")
	_, sdkErr := os.Stat(filepath.Join(sdk, "sdk.mjs"))
	if nodeErr == nil && sdkErr == nil {
		return node, sdk
	}
	why := fmt.Sprintf("node: %v; SDK at %s: %v (set SESSIOND_SDK_DIR to an installed @anthropic-ai/claude-agent-sdk)", nodeErr, sdk, sdkErr)
	if os.Getenv("SESSIOND_REQUIRE_SDK") == "1" {
		t.Fatalf("SESSIOND_REQUIRE_SDK=1 but the official SDK cannot run: %s", why)
	}
	t.Skipf("official SDK not available: %s", why)
	return "", ""
}

type sdkVerdict struct {
	Name        string   `json:"name"`
	Messages    int      `json:"messages"`
	ToolUses    int      `json:"toolUses"`
	ToolResults int      `json:"toolResults"`
	Missing     []string `json:"missing"`
	Stray       []string `json:"stray"`
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// sdkRead lays the transcripts out as the CLI does under a fresh config
// dir, one project each, and has the SDK read them all in one node run.
func sdkRead(t *testing.T, transcripts map[string][]byte) map[string]sdkVerdict {
	t.Helper()
	node, sdk := sdkPath(t)
	root := t.TempDir()
	cfg := filepath.Join(root, "config")
	type job struct {
		Name string `json:"name"`
		Sid  string `json:"sid"`
		Dir  string `json:"dir"`
	}
	var jobs []job
	for name, data := range transcripts {
		sid := fileSessionID(data)
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(sid) {
			t.Fatalf("%s: no session id to name the file by", name)
		}
		cwd := filepath.Join(root, "cwd", fmt.Sprint(len(jobs)))
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			t.Fatal(err)
		}
		real, err := filepath.EvalSymlinks(cwd)
		if err != nil {
			t.Fatal(err)
		}
		project := filepath.Join(cfg, "projects", nonAlnum.ReplaceAllString(real, "-"))
		if err := os.MkdirAll(project, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, sid+".jsonl"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{name, sid, real})
	}
	spec, _ := json.Marshal(map[string]any{"sdk": sdk, "jobs": jobs})
	specFile, scriptFile := filepath.Join(root, "spec.json"), filepath.Join(root, "check.cjs")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scriptFile, []byte(sdkCheckScript), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, scriptFile, specFile)
	cmd.Env = append(os.Environ(), "CLAUDE_CONFIG_DIR="+cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	var verdicts []sdkVerdict
	if err := json.Unmarshal(out, &verdicts); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	byName := map[string]sdkVerdict{}
	for _, v := range verdicts {
		byName[v.Name] = v
	}
	return byName
}

// TestSDKReadsRepairedTranscripts has the official SDK read every repaired
// golden and the repaired real damaged fixtures, and requires every tool
// call to be answered. The damaged real fixtures go through it too,
// unrepaired, to show the check can fail.
func TestSDKReadsRepairedTranscripts(t *testing.T) {
	sdkPath(t) // skip early, before any work
	transcripts := map[string][]byte{}
	for _, name := range goldenNames(t) {
		transcripts[name] = readGolden(t, filepath.Join(goldenDir, name+".repaired.jsonl"))
	}
	damaged := []string{"jimmc414__cctrace__main.jsonl", "marot__spotter__8463c716-a2ea-4c14-9efa-87158ebd9f20.TRUNCATED.jsonl"}
	for _, f := range damaged {
		data, err := os.ReadFile(filepath.Join(transcripttest.FixtureDir, f))
		if err != nil {
			t.Fatalf("%v: the real transcripts from /work/shared/fixtures are needed", err)
		}
		var out bytes.Buffer
		if _, err := Repair(bytes.NewReader(data), int64(len(data)), &out, RepairOptions{}); err != nil {
			t.Fatal(err)
		}
		transcripts["unrepaired "+f] = data
		transcripts["repaired "+f] = out.Bytes()
	}
	verdicts := sdkRead(t, transcripts)
	for name := range transcripts {
		v, ok := verdicts[name]
		switch {
		case !ok:
			t.Errorf("%s: no verdict from the SDK", name)
		case name[:2] == "un":
			if len(v.Missing) != 1 {
				t.Errorf("%s: the SDK should see exactly one unanswered tool_use, got %+v", name, v)
			}
		case v.Messages == 0:
			t.Errorf("%s: the SDK read no messages", name)
		case len(v.Missing) > 0 || len(v.Stray) > 0 || v.ToolUses != v.ToolResults:
			t.Errorf("%s: the SDK sees broken tool pairing: %+v", name, v)
		}
	}
}
