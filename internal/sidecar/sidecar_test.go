package sidecar

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

func TestCheckName(t *testing.T) {
	for _, n := range Names {
		if err := CheckName(n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	for _, n := range []string{"", "../archived.json", "x.json", "archived.json/", ".meta.json"} {
		if err := CheckName(n); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%q: %v, want invalid argument", n, err)
		}
	}
}

func TestWriteThenReadAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p", "s")
	if got, err := ReadAll(fsys.OS, dir); err != nil || len(got) != 0 {
		t.Fatalf("no folder: %v %v, want none", got, err)
	}
	if err := Write(fsys.OS, dir, TitleName, []byte(`{"customTitle":"T"}`)); err != nil {
		t.Fatal(err)
	}
	if err := Write(fsys.OS, dir, ArchiveName, ArchiveBody(true, time.UnixMilli(1000))); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll(fsys.OS, dir)
	if err != nil || len(got) != 2 || got[0].Name != ArchiveName || got[1].Name != TitleName || string(got[1].Body) != `{"customTitle":"T"}` {
		t.Fatalf("ReadAll: %+v %v", got, err)
	}
	if string(got[0].Body) != `{"archived":true,"at":"1970-01-01T00:00:01.000Z"}` {
		t.Fatalf("archive mark %s", got[0].Body)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if IsTemp(e.Name()) {
			t.Fatalf("a temp file stayed: %s", e.Name())
		}
	}
}

func TestReadAllRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, TitleName), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(fsys.OS, dir); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a folder named like a sidecar: %v, want invalid argument", err)
	}
	os.Remove(filepath.Join(dir, TitleName))
	if err := os.WriteFile(filepath.Join(dir, ArchiveName), make([]byte, MaxBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(fsys.OS, dir); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("an oversized sidecar: %v, want invalid argument", err)
	}
}

func TestTitleAndArchived(t *testing.T) {
	dir := t.TempDir()
	if title, err := Title(fsys.OS, dir); err != nil || title != "" {
		t.Fatalf("no title sidecar: %q %v", title, err)
	}
	if a, err := Archived(fsys.OS, dir, 0); err != nil || a {
		t.Fatalf("no mark: %v %v", a, err)
	}
	os.WriteFile(filepath.Join(dir, TitleName), []byte(`{"customTitle":"Named"}`), 0o600)
	if title, err := Title(fsys.OS, dir); err != nil || title != "Named" {
		t.Fatalf("title %q %v, want Named", title, err)
	}
	at := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)
	os.WriteFile(filepath.Join(dir, ArchiveName), ArchiveBody(true, at), 0o600)
	if a, err := Archived(fsys.OS, dir, at.Add(-time.Hour).UnixMilli()); err != nil || !a {
		t.Fatalf("prompted before the mark: archived %v %v, want true", a, err)
	}
	if a, err := Archived(fsys.OS, dir, at.Add(time.Hour).UnixMilli()); err != nil || a {
		t.Fatalf("prompted after the mark: archived %v %v, want false", a, err)
	}
	// A symbolic link is no sidecar: sessiond never follows one.
	other := filepath.Join(t.TempDir(), "elsewhere.json")
	os.WriteFile(other, []byte(`{"customTitle":"Followed"}`), 0o600)
	os.Remove(filepath.Join(dir, TitleName))
	if err := os.Symlink(other, filepath.Join(dir, TitleName)); err != nil {
		t.Fatal(err)
	}
	if title, err := Title(fsys.OS, dir); err != nil || title != "" {
		t.Fatalf("title through a symlink: %q %v, want none", title, err)
	}
}

// TestUnreadableIsRetryable: a sidecar there but unreadable fails the
// read, retryably, instead of reading as none.
func TestUnreadableIsRetryable(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, TitleName), []byte(`{"customTitle":"T"}`), 0o600)
	ff := fstest.NewFaultFS(fsys.OS)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Err: syscall.EMFILE, Sticky: true,
		Path: func(p string) bool { return strings.HasSuffix(p, TitleName) }})
	_, err := Title(ff, dir)
	if !errors.Is(err, syscall.EMFILE) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("title unreadable: %v, want EMFILE, retryable", err)
	}
}

// TestWritesSurviveCrashes: a crash at any point of a sidecar's write
// leaves the old content or the new, never a mix, and the new once the
// write returned.
func TestWritesSurviveCrashes(t *testing.T) {
	const canon = "/r/p/s/agent-1.jsonl"
	for _, tc := range []struct {
		name  string
		path  string
		write func(fsys.FS) error
	}{
		{"session sidecar", "/r/p/s/" + TitleName, func(c fsys.FS) error { return Write(c, "/r/p/s", TitleName, []byte("new")) }},
		{"agent meta", AgentMetaPath(canon), func(c fsys.FS) error { return WriteAgentMeta(c, canon, []byte("new")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := int64(1); ; i++ {
				c := fstest.NewCrashFS()
				if err := c.WriteFile(tc.path, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
				c.CrashAt(c.Ops() + i)
				done := tc.write(c) == nil
				if crashed, _ := c.Crashed(); !crashed {
					if !done {
						t.Fatal("the write failed without a crash")
					}
					return
				}
				for seed := int64(-1); seed < 4; seed++ {
					var rng *rand.Rand
					if seed >= 0 {
						rng = rand.New(rand.NewSource(seed))
					}
					b, _ := c.CrashClone(rng).ReadFile(tc.path)
					if got := string(b); got != "new" && (done || got != "old") {
						t.Fatalf("crash at op %d (seed %d): %q, done %v", i, seed, got, done)
					}
				}
			}
		})
	}
}
