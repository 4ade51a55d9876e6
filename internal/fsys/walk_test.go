package fsys_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
)

func TestWalkVisitsEverythingOnce(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"a/b/c.jsonl", "a/d.jsonl", "e.jsonl"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o700)
		os.WriteFile(filepath.Join(root, p), nil, 0o600)
	}
	// A link to a folder is visited, not followed.
	os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link"))
	var got []string
	err := fsys.Walk(fsys.OS, root, func(p string, d fs.DirEntry) error {
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel)
		return nil
	})
	want := []string{"a", "a/b", "a/b/c.jsonl", "a/d.jsonl", "e.jsonl", "link"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Walk: %v %v, want %v", got, err, want)
	}
	if err := fsys.Walk(fsys.OS, filepath.Join(root, "none"), func(string, fs.DirEntry) error { return nil }); !os.IsNotExist(err) {
		t.Fatalf("Walk of a missing folder: %v, want not exist", err)
	}
}
