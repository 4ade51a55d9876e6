package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// sessiondDir holds a sessiond built for the scripts.
var sessiondDir string

func TestMain(m *testing.M) {
	// sessionctl runs as this test binary re-executed: a process of its
	// own, so exit statuses are real. (RunMain runs the commands before
	// anything below; only the parent builds sessiond.)
	os.Exit(testscript.RunMain(m, map[string]func() int{"sessionctl": func() int { main(); return 0 }}))
}

var buildOnce sync.Once

// buildSessiond builds sessiond once for every script.
func buildSessiond(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sessionctl-scripts")
		if err != nil {
			t.Fatal(err)
		}
		build := exec.Command("go", "build", "-o", dir+"/", "../sessiond")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("building sessiond for the scripts: %v", err)
		}
		sessiondDir = dir
	})
	if sessiondDir == "" {
		t.Fatal("sessiond could not be built")
	}
	return sessiondDir
}

// TestScripts runs testdata/script/*.txtar: each a small session at the
// terminal, the commands a user types and what they must print and exit
// with (a command's status is checked as `exec sh -c '...; echo exit=$?'`
// where it matters). `exec sessiond &sd&` starts a daemon on $SESSIOND_SOCKET.
func TestScripts(t *testing.T) {
	dir := buildSessiond(t)
	t.Cleanup(func() { os.RemoveAll(dir) })
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(e *testscript.Env) error {
			e.Setenv("PATH", dir+string(os.PathListSeparator)+e.Getenv("PATH"))
			e.Setenv("HOME", e.WorkDir+"/home")
			sock := e.WorkDir + "/run/s.sock"
			e.Setenv("SESSIOND_SOCKET", sock)
			// sessiond's folders come from the environment, so that
			// `exec sessiond &sd&` is all a script needs.
			e.Setenv("SESSIOND_ROOT", e.WorkDir+"/claude")
			e.Setenv("SESSIOND_STATE_DIR", e.WorkDir+"/state")
			e.Setenv("SID", "6f1c5fbb-1f6e-4b8e-9b9e-0a3f3c1f2a10")
			return nil
		},
	})
}
