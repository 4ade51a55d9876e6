package journal

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// noSyncFS is the real filesystem without fsync, so the fuzzer spends its
// time in the decoder rather than waiting on the disk. Durability is not
// what FuzzOpen checks.
type noSyncFS struct{ fsys.FS }

func (n noSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	f, err := n.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ fsys.File }

func (noSyncFile) Sync() error { return nil }

// FuzzOpen feeds arbitrary bytes to Open as a journal. It must not panic,
// and whatever it returns must hold together: a damaged file is kept aside
// unchanged; otherwise the file is cut to End, every span lies inside it
// and reads back, and a second Open agrees with the first.
func FuzzOpen(f *testing.F) {
	for _, name := range []string{"basic.wal", "torn.wal"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		for _, at := range []int{3, 40, 250, 400, len(data) - 20} {
			d := bytes.Clone(data)
			d[at] ^= 0x10
			f.Add(d)
		}
		f.Add(append(bytes.Clone(data), make([]byte, 64)...))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 100))

	opt := Options{MaxRecord: 1 << 16}
	fsy := noSyncFS{fsys.OS}
	// One folder for all inputs, emptied each time: a TempDir per input
	// would make the fuzzer wait on the filesystem.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f.wal")
		olds, _ := filepath.Glob(path + "*")
		for _, o := range olds {
			if err := os.Remove(o); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, path, data)
		j, rec, err := Open(fsy, path, opt)
		if err != nil {
			switch {
			case errors.Is(err, errdefs.ErrCorrupt):
				asides, _ := filepath.Glob(path + ".corrupt-*")
				if _, serr := os.Lstat(path); !errors.Is(serr, os.ErrNotExist) || len(asides) != 1 ||
					!bytes.Equal(readFile(t, asides[0]), data) {
					t.Fatalf("corrupt journal not kept aside intact (%v): %v", asides, err)
				}
			case errors.As(err, new(unsupportedVersionError)):
				if !bytes.Equal(readFile(t, path), data) {
					t.Fatal("Open changed a journal of a newer version")
				}
			default:
				t.Fatalf("Open: unexpected error %v", err)
			}
			return
		}

		if rec.Header.Generation == 0 {
			t.Fatal("accepted generation 0")
		}
		if rec.End < frame.HeaderSize || rec.End%frame.Align != 0 || rec.End > int64(len(data)) ||
			rec.TruncatedBytes != int64(len(data))-rec.End || j.Size() != rec.End {
			t.Fatalf("End %d TruncatedBytes %d Size %d for %d bytes", rec.End, rec.TruncatedBytes, j.Size(), len(data))
		}
		if !bytes.Equal(readFile(t, path), data[:rec.End]) {
			t.Fatal("file on disk is not the input cut at End")
		}
		for i, b := range rec.Batches {
			if b.Seq != uint64(i+1) {
				t.Fatalf("batch %d has seq %d", i, b.Seq)
			}
			for _, s := range b.Entries {
				if s.Off%frame.Align != 0 || s.Off < 2*frame.HeaderSize || s.Len < 0 || s.Off+int64(s.Len) > rec.End {
					t.Fatalf("span %+v outside the journal (End %d)", s, rec.End)
				}
				p, err := j.ReadEntry(s, nil)
				if err != nil || !bytes.Equal(p, data[s.Off:s.Off+int64(s.Len)]) {
					t.Fatalf("ReadEntry(%+v) = %v", s, err)
				}
			}
		}
		mustClose(t, j)

		j2, rec2, err := Open(fsy, path, opt)
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		defer j2.Close()
		rec.TruncatedBytes = 0
		if !reflect.DeepEqual(rec, rec2) {
			t.Fatalf("second Open disagrees:\n%+v\n%+v", rec, rec2)
		}
	})
}
