package fsys_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// TestCopyRange copies a range of one file after what another already
// holds, on the real filesystem (copy_file_range) and on a test one (read
// and write): the same bytes must land, at the destination's offset.
func TestCopyRange(t *testing.T) {
	src := make([]byte, 3<<20+17)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for name, fs := range map[string]fsys.FS{"os": fsys.OS, "fault": fstest.NewFaultFS(fsys.OS)} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "src"), src, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := fs.OpenFile(filepath.Join(dir, "src"), os.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d, err := fs.OpenFile(filepath.Join(dir, "dst"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.Write([]byte("head\n")); err != nil {
				t.Fatal(err)
			}
			const off = 12345
			n, err := fsys.CopyRange(d, s, off, int64(len(src)-off-100))
			if err != nil || n != int64(len(src)-off-100) {
				t.Fatalf("CopyRange: %d, %v", n, err)
			}
			if _, err := d.Write([]byte("tail")); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, "dst"))
			want := append(append([]byte("head\n"), src[off:len(src)-100]...), "tail"...)
			if !bytes.Equal(got, want) {
				t.Fatalf("destination holds %d bytes, not the %d expected", len(got), len(want))
			}
			// The source's own offset is untouched.
			if pos, _ := s.Seek(0, 1); pos != 0 {
				t.Fatalf("source offset moved to %d", pos)
			}
		})
	}
}
