package sdkcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeSDKDir lays out an e2e/sdk folder pinning pinned, with installed
// ("" for none) in node_modules.
func fakeSDKDir(t *testing.T, pinned, installed string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(script, "// fake\n")
	write("package.json", fmt.Sprintf(`{"private":true,"dependencies":{%q:%q}}`, sdkPackage, pinned))
	if installed != "" {
		write("node_modules/"+sdkPackage+"/package.json", fmt.Sprintf(`{"name":%q,"version":%q}`, sdkPackage, installed))
	}
	return dir
}

func TestFindSaysWhatToRun(t *testing.T) {
	tests := []struct {
		name      string
		dir       func(t *testing.T) string
		wantParts []string
	}{
		{
			name:      "not installed",
			dir:       func(t *testing.T) string { return fakeSDKDir(t, "0.3.329", "") },
			wantParts: []string{"not installed", InstallCommand},
		},
		{
			name:      "other version installed",
			dir:       func(t *testing.T) string { return fakeSDKDir(t, "0.3.329", "0.3.1") },
			wantParts: []string{"0.3.1 installed", "pins 0.3.329", InstallCommand},
		},
		{
			name:      "not an e2e/sdk folder",
			dir:       func(t *testing.T) string { return t.TempDir() },
			wantParts: []string{script, envDir},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envDir, tc.dir(t))
			s, err := Find()
			if err == nil {
				t.Fatalf("Find() = %+v, want an error", s)
			}
			for _, part := range tc.wantParts {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("Find() error %q does not say %q", err, part)
				}
			}
		})
	}
}

func TestFindHonoursEnv(t *testing.T) {
	dir := fakeSDKDir(t, "0.3.329", "0.3.329")
	t.Setenv(envDir, dir)
	s, err := Find()
	if err != nil {
		t.Skipf("node is needed for this test: %v", err)
	}
	if s.Dir != dir {
		t.Errorf("Find().Dir = %q, want %q", s.Dir, dir)
	}
}

func TestFindWalksUpToModuleRoot(t *testing.T) {
	t.Setenv(envDir, "")
	s, err := Find()
	if err != nil {
		if !strings.Contains(err.Error(), InstallCommand) {
			t.Fatalf("Find() error %q does not say to run %q", err, InstallCommand)
		}
		return // not installed here; the message is what matters
	}
	// This test runs in internal/sdkcheck: two folders below the root.
	want, err := filepath.Abs(filepath.Join("..", "..", "e2e", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Dir != want {
		t.Errorf("Find().Dir = %q, want %q", s.Dir, want)
	}
}

// fakeTB records how Require ended a test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestRequireSkipsOrFails(t *testing.T) {
	tests := []struct {
		ci, require string
		wantFail    bool
	}{
		{ci: "", require: "", wantFail: false},
		{ci: "true", require: "", wantFail: true},
		{ci: "1", require: "", wantFail: true},
		{ci: "false", require: "", wantFail: false},
		{ci: "", require: "1", wantFail: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("CI=%q,%s=%q", tc.ci, envRequire, tc.require), func(t *testing.T) {
			t.Setenv(envDir, fakeSDKDir(t, "0.3.329", ""))
			t.Setenv("CI", tc.ci)
			t.Setenv(envRequire, tc.require)
			f := &fakeTB{TB: t}
			done := make(chan *SDK)
			go func() {
				defer close(done)
				done <- Require(f)
			}()
			if s := <-done; s != nil {
				t.Fatalf("Require returned %+v for a missing SDK", s)
			}
			if f.failed != tc.wantFail || f.skipped == tc.wantFail {
				t.Errorf("failed=%v skipped=%v, want failed=%v", f.failed, f.skipped, tc.wantFail)
			}
			if !strings.Contains(f.msg, InstallCommand) {
				t.Errorf("message %q does not say to run %q", f.msg, InstallCommand)
			}
		})
	}
}
