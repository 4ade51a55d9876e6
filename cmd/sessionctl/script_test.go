package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sessiond/sessiond/internal/testharness"
)

func TestMain(m *testing.M) {
	// sessionctl runs as this test binary re-executed: a process of its
	// own, so exit statuses are real. (RunMain runs the commands before
	// anything below; only the parent builds sessiond.)
	code := testscript.RunMain(m, map[string]func() int{"sessionctl": func() int { main(); return 0 }})
	testharness.RemoveBuilt()
	os.Exit(code)
}

// sessiondDir returns a folder holding only sessiond, built for the
// scripts: the harness builds sessionctl beside it, which must not shadow
// the sessionctl of this test binary on the scripts' PATH.
func sessiondDir(t *testing.T) string {
	t.Helper()
	bins, err := testharness.Build(testharness.BuildOptions{})
	if err != nil {
		t.Fatalf("building sessiond for the scripts: %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(bins.Sessiond(), filepath.Join(dir, "sessiond")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestScripts runs testdata/script/*.txtar: each a small session at the
// terminal, the commands a user types and what they must print and exit
// with (a command's status is checked as `exec sh -c '...; echo exit=$?'`
// where it matters). `exec sessiond &sd&` starts a daemon on $SESSIOND_SOCKET.
func TestScripts(t *testing.T) {
	dir := sessiondDir(t)
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
