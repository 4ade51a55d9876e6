package journal

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
)

// faultFS is the real filesystem with a log of what was done to it and,
// once armed, one failing Write or Sync. A failed Write still writes the
// first half of its bytes (a short write); a failed Sync throws away what
// was written since the last good Sync, as the kernel may drop dirty pages
// whose writeback failed.
type faultFS struct {
	fsys.FS
	mu      sync.Mutex
	failOp  string // "write" or "sync"; "" when disarmed
	failErr error
	log     []string
}

func (ffs *faultFS) arm(op string, err error) {
	ffs.mu.Lock()
	defer ffs.mu.Unlock()
	ffs.failOp, ffs.failErr = op, err
}

// record logs op on the file name (its base name; "" for none) and says
// whether it must fail.
func (ffs *faultFS) record(op, name string) error {
	ffs.mu.Lock()
	defer ffs.mu.Unlock()
	entry := op
	if name != "" {
		entry += " " + filepath.Base(name)
	}
	ffs.log = append(ffs.log, entry)
	if ffs.failOp == op {
		err := ffs.failErr
		ffs.failOp, ffs.failErr = "", nil
		return err
	}
	return nil
}

func (ffs *faultFS) ops() []string {
	ffs.mu.Lock()
	defer ffs.mu.Unlock()
	return slices.Clone(ffs.log)
}

func (ffs *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	ffs.record("open", name)
	f, err := ffs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &faultFile{File: f, fs: ffs, synced: st.Size()}, nil
}

func (ffs *faultFS) Rename(o, n string) error {
	ffs.record("rename", o)
	return ffs.FS.Rename(o, n)
}

func (ffs *faultFS) SyncDir(name string) error {
	if err := ffs.record("syncdir", ""); err != nil {
		return err
	}
	return ffs.FS.SyncDir(name)
}

type faultFile struct {
	fsys.File
	fs     *faultFS
	synced int64
}

func (f *faultFile) Write(b []byte) (int, error) {
	if err := f.fs.record("write", f.Name()); err != nil {
		n, _ := f.File.Write(b[:len(b)/2])
		return n, err
	}
	return f.File.Write(b)
}

func (f *faultFile) Sync() error {
	if err := f.fs.record("sync", f.Name()); err != nil {
		if terr := f.File.Truncate(f.synced); terr != nil {
			panic(terr)
		}
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	st, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.synced = st.Size()
	return nil
}

func (f *faultFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.record("read", f.Name())
	return f.File.ReadAt(b, off)
}

func (f *faultFile) Truncate(size int64) error {
	f.fs.record("truncate", f.Name())
	return f.File.Truncate(size)
}

func (f *faultFile) Seek(off int64, whence int) (int64, error) {
	f.fs.record("seek", f.Name())
	return f.File.Seek(off, whence)
}

func TestFailedWriteOrSyncIsSticky(t *testing.T) {
	cases := []struct {
		name  string
		op    string
		errno syscall.Errno
		kind  error
		call  func(j *Journal) error
	}{
		{"append: short write, disk full", "write", syscall.ENOSPC, errdefs.ErrNoSpace, appendLost},
		{"append: write EIO", "write", syscall.EIO, errdefs.ErrIO, appendLost},
		{"append: sync EIO", "sync", syscall.EIO, errdefs.ErrIO, appendLost},
		{"append: sync quota", "sync", syscall.EDQUOT, errdefs.ErrNoSpace, appendLost},
		{"marker: write EIO", "write", syscall.EIO, errdefs.ErrIO, markLost},
		{"marker: sync EIO", "sync", syscall.EIO, errdefs.ErrIO, markLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.wal")
			ffs := &faultFS{FS: fsys.OS}
			j := mustCreate(t, ffs, path, testHeader(0))
			acked := [][]string{{"acked 1", "acked 2"}, {"acked 3"}}
			spans := mustAppend(t, j, acked[0])
			mustAppend(t, j, acked[1])
			size := j.Size()

			ffs.arm(tc.op, tc.errno)
			err := tc.call(j)
			if !errors.Is(err, tc.kind) || !errors.Is(err, tc.errno) {
				t.Fatalf("failed %s: %v, want %v wrapping %v", tc.op, err, tc.kind, tc.errno)
			}
			touched := len(ffs.ops())
			// Every later call fails without touching the file: after a
			// failed sync nothing read or written through it can be trusted.
			for name, call := range map[string]func() error{
				"Append":        func() error { return appendLost(j) },
				"MarkCompacted": func() error { return markLost(j) },
				"ReadEntry":     func() error { _, err := j.ReadEntry(spans[0][0], nil); return err },
			} {
				if err := call(); !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), "reopen") {
					t.Errorf("%s after the failure: %v, want a %v error saying to reopen", name, err, tc.kind)
				}
			}
			if ops := ffs.ops(); len(ops) != touched {
				t.Errorf("calls after the failure touched the file: %q", ops[touched:])
			}
			if j.Size() != size {
				t.Errorf("Size moved from %d to %d", size, j.Size())
			}
			mustClose(t, j)

			// Reopening from disk gives back exactly what was acknowledged.
			j, rec := openExpect(t, path, acked)
			if rec.End != size || rec.Compacted != nil {
				t.Fatalf("recovered End %d marker %v; want %d and no marker", rec.End, rec.Compacted, size)
			}
			mustAppend(t, j, []string{"after reopen"})
			mustClose(t, j)
			j, _ = openExpect(t, path, append(acked, []string{"after reopen"}))
			mustClose(t, j)
		})
	}
}

func appendLost(j *Journal) error {
	_, err := j.Append(batchesOf([]string{"lost 1", strings.Repeat("lost ", 100)}, []string{"lost 3"}))
	return err
}

func markLost(j *Journal) error { return j.MarkCompacted(Marker{Size: 1, Tail: 2}) }

// Group commit is one write and one sync, however many batches.
func TestAppendIsOneWriteOneSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	ffs := &faultFS{FS: fsys.OS}
	j := mustCreate(t, ffs, path, testHeader(0))
	defer j.Close()
	before := len(ffs.ops())
	mustAppend(t, j, []string{"a", "b"}, []string{"c"}, []string{}, []string{"d"})
	if got := ffs.ops()[before:]; !slices.Equal(got, []string{"write s.wal", "sync s.wal"}) {
		t.Fatalf("Append did %q, want one write then one sync", got)
	}
}

func TestCreateFailureKeepsOldGeneration(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.wal")
	old := mustCreate(t, fsys.OS, path, testHeader(0))
	mustAppend(t, old, []string{"kept"})
	mustClose(t, old)

	for _, op := range []string{"write", "sync"} {
		ffs := &faultFS{FS: fsys.OS}
		ffs.arm(op, syscall.EIO)
		if j, err := Create(ffs, path, testHeader(0), Options{}); !errors.Is(err, errdefs.ErrIO) {
			if j != nil {
				j.Close()
			}
			t.Fatalf("Create with a failing %s: %v, want ErrIO", op, err)
		}
		j, rec := openExpect(t, path, [][]string{{"kept"}})
		if rec.Header.Generation != old.Header().Generation {
			t.Fatal("old generation replaced by a failed Create")
		}
		mustClose(t, j)
		if ents, _ := filepath.Glob(filepath.Join(dir, "*")); len(ents) != 1 {
			t.Fatalf("folder holds %q after a failed Create, want only the journal", ents)
		}
	}
}

// Open must make what it reports durable before returning: the cut of a
// torn tail, the data a crashed process wrote but never synced, and the
// folder entry of a journal whose Create died before its folder sync.
func TestOpenSyncsBeforeReturning(t *testing.T) {
	tw := makeThreeWrites(t)
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"torn", tw.data[:len(tw.data)-3], []string{"truncate s.wal", "sync s.wal", "syncdir"}},
		{"intact", tw.data, []string{"sync s.wal", "syncdir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.wal")
			writeFile(t, path, tc.data)
			ffs := &faultFS{FS: fsys.OS}
			j, _, err := Open(ffs, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			var got []string
			for _, op := range ffs.ops() {
				if op == "syncdir" || strings.HasPrefix(op, "truncate ") || strings.HasPrefix(op, "sync ") {
					got = append(got, op)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Open did %q, want %q in that order", got, tc.want)
			}
		})
	}

	t.Run("corrupt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.wal")
		data := bytes.Clone(tw.data)
		data[tw.spans[0][0].Off] ^= 1
		writeFile(t, path, data)
		ffs := &faultFS{FS: fsys.OS}
		if _, _, err := Open(ffs, path, Options{}); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Fatalf("Open: %v", err)
		}
		ops := ffs.ops()
		if i := slices.Index(ops, "rename s.wal"); i < 0 || i+1 >= len(ops) || ops[i+1] != "syncdir" {
			t.Fatalf("Open did %q, want the rename aside followed by a folder sync", ops)
		}
	})

	t.Run("sync fails", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.wal")
		writeFile(t, path, tw.data)
		ffs := &faultFS{FS: fsys.OS}
		ffs.arm("sync", syscall.EIO)
		if j, _, err := Open(ffs, path, Options{}); !errors.Is(err, errdefs.ErrIO) {
			if j != nil {
				j.Close()
			}
			t.Fatalf("Open with a failing sync: %v, want ErrIO", err)
		}
	})
}
