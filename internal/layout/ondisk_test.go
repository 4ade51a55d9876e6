package layout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// TestCheckOnDisk plants a link (or a wrong kind of file) at each place a
// key's files and folders go, and checks that CheckOnDisk refuses it with
// ErrUnsafePath naming the place, and that it accepts real folders and
// files, missing parts, and a root reached through a link.
func TestCheckOnDisk(t *testing.T) {
	const pk = "-p"
	main := Key{ProjectKey: pk, SessionID: testSID}
	sub := Key{ProjectKey: pk, SessionID: testSID, Subpath: "subagents/agent-a"}
	cases := []struct {
		name string
		key  Key
		// plant makes the tree; it returns the path the error must name
		// ("" when the key must be accepted).
		plant func(t *testing.T, l Layout, outside string) string
	}{
		{"nothing exists yet", sub, func(t *testing.T, l Layout, _ string) string { return "" }},
		{"real files and folders", sub, func(t *testing.T, l Layout, _ string) string {
			mkfile(t, l.TranscriptPath(sub))
			mkfile(t, l.TranscriptPath(main))
			return ""
		}},
		{"root and projects folder are links", main, func(t *testing.T, l Layout, outside string) string {
			real := filepath.Join(outside, "realprojects")
			mkdir(t, filepath.Join(real, pk))
			mkdir(t, l.Root)
			link(t, real, l.ProjectsDir())
			return ""
		}},
		{"transcript is a link", main, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.ProjectDir(pk))
			link(t, filepath.Join(outside, "target"), l.TranscriptPath(main))
			return l.TranscriptPath(main)
		}},
		{"dangling transcript link", main, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.ProjectDir(pk))
			link(t, filepath.Join(outside, "nothing-here"), l.TranscriptPath(main))
			return l.TranscriptPath(main)
		}},
		{"project folder is a link", main, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.ProjectsDir())
			link(t, outside, l.ProjectDir(pk))
			return l.ProjectDir(pk)
		}},
		{"session folder is a link (main key)", main, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.ProjectDir(pk))
			link(t, outside, l.SessionDir(main))
			return l.SessionDir(main)
		}},
		{"session folder is a link (subpath key)", sub, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.ProjectDir(pk))
			link(t, outside, l.SessionDir(sub))
			return l.SessionDir(sub)
		}},
		{"subpath folder is a link", sub, func(t *testing.T, l Layout, outside string) string {
			mkdir(t, l.SessionDir(sub))
			link(t, outside, filepath.Join(l.SessionDir(sub), "subagents"))
			return filepath.Join(l.SessionDir(sub), "subagents")
		}},
		{"subpath folder is a file", sub, func(t *testing.T, l Layout, _ string) string {
			mkfile(t, filepath.Join(l.SessionDir(sub), "subagents"))
			return filepath.Join(l.SessionDir(sub), "subagents")
		}},
		{"transcript is a folder", main, func(t *testing.T, l Layout, _ string) string {
			mkdir(t, l.TranscriptPath(main))
			return l.TranscriptPath(main)
		}},
		{"transcript is a named pipe", main, func(t *testing.T, l Layout, _ string) string {
			mkdir(t, l.ProjectDir(pk))
			if err := syscall.Mkfifo(l.TranscriptPath(main), 0o600); err != nil {
				t.Skip(err)
			}
			return l.TranscriptPath(main)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			outside := t.TempDir()
			l := Layout{Root: filepath.Join(base, "root"), StateDir: filepath.Join(base, "state")}
			want := c.plant(t, l, outside)
			err := l.CheckOnDisk(c.key)
			switch {
			case want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case want == "":
			case err == nil:
				t.Fatalf("accepted, want a refusal naming %s", want)
			case !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), want+" is a"):
				t.Fatalf("got %v, want ErrUnsafePath naming %s", err, want)
			}
		})
	}
	if err := (Layout{Root: "/r", StateDir: "/s"}).CheckOnDisk(Key{ProjectKey: "..", SessionID: testSID}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("an invalid key: %v, want ErrInvalidArgument", err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func mkfile(t *testing.T, path string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, at string) {
	t.Helper()
	mkdir(t, filepath.Dir(at))
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
}
