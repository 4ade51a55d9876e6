package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	set := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, c := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"(devel)", nil, unstamped},
		{"v1.4.0", nil, "v1.4.0"},
		{"(devel)", set("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), "dev (commit 0123456789ab)"},
		{"(devel)", set("vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), "dev (commit 0123456789ab, modified)"},
		{"v0.0.0-20260101000000-0123456789ab", set("vcs.revision", "0123456789ab"), "dev (commit 0123456789ab)"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: c.version}, Settings: c.settings}
		if got := describe(bi); got != c.want {
			t.Errorf("describe(%q, %v) = %q, want %q", c.version, c.settings, got, c.want)
		}
	}
}
