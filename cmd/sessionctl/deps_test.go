package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoAccessToTheDaemonsFiles: sessionctl changes transcripts and
// sessiond's state only through the daemon's API, so it can never be a
// second writer beside it: it links none of the packages that open them.
func TestNoAccessToTheDaemonsFiles(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range []string{"internal/writer", "internal/journal", "internal/journal", "internal/owner", "internal/mirror", "internal/daemon"} {
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasSuffix(dep, "/"+pkg) {
				t.Errorf("sessionctl depends on %s", dep)
			}
		}
	}
}
