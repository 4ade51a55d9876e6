// Package buildinfo says which build of sessiond's programs is running:
// the module version when built from a tagged module, else "dev", with the
// commit and whether the tree had uncommitted changes, from the stamp Go
// writes into binaries built inside a git checkout (go build, go install;
// go run and go test do not stamp).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// unstamped is the version of a build that knows neither its module
// version nor its commit: saying how to get one beats a bare "dev" in a
// bug report.
const unstamped = "dev (no commit recorded: go run and go test builds carry none; make install stamps one)"

// Version is "v1.2.3", or "dev", followed by " (commit abcdef123456)" and
// ", modified" when the binary knows them.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return describe(bi)
}

func describe(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" || v == "(devel)" || strings.HasPrefix(v, "v0.0.0-") {
		v = "dev"
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		if v == "dev" {
			return unstamped
		}
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v += " (commit " + rev
	if modified {
		v += ", modified"
	}
	return v + ")"
}
