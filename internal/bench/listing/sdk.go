package listing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// sdkListInfo is the part of the SDK's SDKSessionInfo that is compared.
type sdkListInfo struct {
	SessionID    string `json:"sessionId"`
	Summary      string `json:"summary"`
	LastModified int64  `json:"lastModified"`
	FileSize     int64  `json:"fileSize"`
	CustomTitle  string `json:"customTitle"`
	FirstPrompt  string `json:"firstPrompt"`
	GitBranch    string `json:"gitBranch"`
	Cwd          string `json:"cwd"`
	Tag          string `json:"tag"`
	CreatedAt    int64  `json:"createdAt"`
}

// sdkListRun is listbench.mjs's answer.
type sdkListRun struct {
	Node     string        `json:"node"`
	SDK      string        `json:"sdk"`
	ImportMs float64       `json:"importMs"`
	TimesMs  []float64     `json:"timesMs"`
	Result   []sdkListInfo `json:"result"`
	Error    string        `json:"error"`
	// Wall is the whole node process as the bench saw it.
	Wall time.Duration `json:"-"`
}

// checkListSDK says what is missing for the SDK comparison, if anything.
func checkListSDK(sdkDir string) error {
	if sdkDir == "" {
		return errors.New("no SDK folder given (--sdk-dir)")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "listbench.mjs")); err != nil {
		return fmt.Errorf("SDK folder: %w", err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@anthropic-ai", "claude-agent-sdk", "package.json")); err != nil {
		return fmt.Errorf("the official SDK is not installed (run `npm ci --prefix e2e/sdk`): %w", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("node is not on PATH: %w", err)
	}
	return nil
}

// runSDKList runs listbench.mjs with reps calls of listSessions() on
// configDir. Like internal/sdkcheck, node gets only the environment it
// needs, with an empty HOME, so nothing from the real ~/.claude leaks in.
func runSDKList(ctx context.Context, sdkDir, configDir string, reps int) (*sdkListRun, error) {
	home, err := os.MkdirTemp("", "listbench-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(sdkDir, "listbench.mjs"))
	cmd.Dir = home
	cmd.Env = []string{"CLAUDE_CONFIG_DIR=" + configDir, "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH")}
	if v, ok := os.LookupEnv("TMPDIR"); ok {
		cmd.Env = append(cmd.Env, "TMPDIR="+v)
	}
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"reps":%d}`, reps))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("node listbench.mjs: %w; stderr: %.2000s", err, stderr.String())
	}
	var run sdkListRun
	if err := json.Unmarshal(stdout.Bytes(), &run); err != nil {
		return nil, fmt.Errorf("node listbench.mjs answered %.200q: %w; stderr: %.2000s", stdout.String(), err, stderr.String())
	}
	if run.Error != "" {
		return nil, fmt.Errorf("node listbench.mjs: %s", run.Error)
	}
	if len(run.TimesMs) != reps {
		return nil, fmt.Errorf("node listbench.mjs timed %d calls, want %d", len(run.TimesMs), reps)
	}
	run.Wall = wall
	return &run, nil
}
