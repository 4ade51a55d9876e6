package writer

import (
	"errors"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestInvalidKeyRefusedAtOpen: the writer's calls do not check the key of
// every request again (the server's resolver and the puller did), but a
// key that does not validate, from an in-process caller that skipped
// them, opens no writer: refused with the key rule's message, and nothing
// is written anywhere.
func TestInvalidKeyRefusedAtOpen(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	defer closeManager(t, m)
	before := c.Walk("/")
	ok := fixedKey(1, "")
	bad := []layout.Key{
		{ProjectKey: "../escape", SessionID: ok.SessionID},
		{ProjectKey: crashProject, SessionID: "../../x"},
		{ProjectKey: crashProject, SessionID: ok.SessionID, Subpath: "../../../etc/passwd"},
		{ProjectKey: crashProject, SessionID: ""},
	}
	line := []byte(`{"type":"user","uuid":"u1"}`)
	for _, k := range bad {
		ops := map[string]error{}
		_, ops["append"] = m.Append(bg, k, [][]byte{line})
		ops["metadata"] = m.AppendMetadata(bg, k, []byte(`{"type":"custom-title","customTitle":"x"}`))
		ops["import"] = m.Import(bg, k, [][]byte{line}, nil)
		_, ops["flush"] = m.Flush(bg, k)
		for op, err := range ops {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s %+v: %v, want an invalid argument", op, k, err)
			}
		}
	}
	if after := c.Walk("/"); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("invalid keys changed the disk:\nbefore %q\nafter  %q", before, after)
	}
}
