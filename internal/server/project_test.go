package server

import (
	"errors"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestProjectOf: every request's project oneof is read the same way: a
// cwd becomes its project key, a key is checked, neither names none.
func TestProjectOf(t *testing.T) {
	fromCwd, err := layout.ProjectKeyFromCwd("/home/u/repo")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		oneof  any
		key    string
		named  bool
		refuse bool
	}{
		{"ref cwd", &sessiondv1.SessionRef_Cwd{Cwd: "/home/u/repo"}, fromCwd, true, false},
		{"ref key", &sessiondv1.SessionRef_ProjectKey{ProjectKey: fromCwd}, fromCwd, true, false},
		{"ref bad key", &sessiondv1.SessionRef_ProjectKey{ProjectKey: "../x"}, "", true, true},
		{"ref relative cwd", &sessiondv1.SessionRef_Cwd{Cwd: "repo"}, "", true, true},
		{"sessions cwd", &sessiondv1.ListSessionsRequest_Cwd{Cwd: "/home/u/repo"}, fromCwd, true, false},
		{"sessions key", &sessiondv1.ListSessionsRequest_ProjectKey{ProjectKey: fromCwd}, fromCwd, true, false},
		{"summaries cwd", &sessiondv1.ListSummariesRequest_Cwd{Cwd: "/home/u/repo"}, fromCwd, true, false},
		{"summaries bad key", &sessiondv1.ListSummariesRequest_ProjectKey{ProjectKey: "a/b"}, "", true, true},
		{"trash cwd", &sessiondv1.ListTrashRequest_Cwd{Cwd: "/home/u/repo"}, fromCwd, true, false},
		{"trash key", &sessiondv1.ListTrashRequest_ProjectKey{ProjectKey: fromCwd}, fromCwd, true, false},
		{"none", nil, "", false, false},
	} {
		key, named, err := projectOf(c.oneof)
		switch {
		case c.refuse && !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("%s: %v, want it refused as invalid", c.name, err)
		case !c.refuse && (err != nil || key != c.key):
			t.Errorf("%s: %q, %v; want %q", c.name, key, err, c.key)
		case named != c.named:
			t.Errorf("%s: named %v, want %v", c.name, named, c.named)
		}
	}
}
