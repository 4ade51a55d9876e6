package e2e

import (
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestOlderStateFolderRefused starts this sessiond on a state folder a
// development build wrote with one journal per transcript (testdata/legacy:
// made by that build and killed with entries still in its journals). The
// start is refused with what the folder holds and what to do, and nothing
// in the state folder or the root is changed: the entries are still there
// for the build that can read them.
func TestOlderStateFolderRefused(t *testing.T) {
	d := newDaemon(t)
	if err := os.CopyFS(d.dir, os.DirFS("testdata/legacy")); err != nil {
		t.Fatal(err)
	}
	// testdata/legacy holds root/ and state/; the daemon's folders are
	// claude/ and state/.
	if err := os.Rename(filepath.Join(d.dir, "root"), d.root); err != nil {
		t.Fatal(err)
	}
	before := treeSums(t, d.state, d.root)
	d.startRefused("per-transcript journals of a development build", "sessionctl flush --all", "move "+d.state+" aside")
	after := treeSums(t, d.state, d.root)
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("%s changed by the refused start", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && filepath.Base(p) != "format" && filepath.Base(p) != "owner" {
			t.Errorf("the refused start made %s", p)
		}
	}
}

// treeSums maps every regular file under the folders to its checksum.
func treeSums(t *testing.T, dirs ...string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			out[p] = sha256.Sum256(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
