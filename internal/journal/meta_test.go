package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/frame"
	"github.com/sessiond/sessiond/internal/fsys"
)

// TestMetaRoundTrip: a batch's Meta record comes back with the batch, a
// batch without one has none, and metas survive a reopen and later appends.
func TestMetaRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	metas := [][]byte{[]byte(`{"batch_id":"b1"}`), nil, bytes.Repeat([]byte("m"), MaxMeta)}
	if _, err := j.AppendMeta(batchesOf([]string{`{"a":1}`, `{"b":2}`}, []string{`{"c":3}`}, []string{`{"d":4}`}), metas); err != nil {
		t.Fatal(err)
	}
	// Plain Append after AppendMeta: no meta.
	mustAppend(t, j, []string{`{"e":5}`})
	mustClose(t, j)

	j, rec := openExpect(t, path, [][]string{{`{"a":1}`, `{"b":2}`}, {`{"c":3}`}, {`{"d":4}`}, {`{"e":5}`}})
	want := append(metas, nil)
	for i, b := range rec.Batches {
		if !bytes.Equal(b.Meta, want[i]) || (b.Meta == nil) != (want[i] == nil) {
			t.Errorf("batch %d meta = %.40q, want %.40q", i+1, b.Meta, want[i])
		}
	}
	// Appending after the reopen carries on.
	if _, err := j.AppendMeta(batchesOf([]string{`{"f":6}`}), [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	j, rec = openExpect(t, path, [][]string{{`{"a":1}`, `{"b":2}`}, {`{"c":3}`}, {`{"d":4}`}, {`{"e":5}`}, {`{"f":6}`}})
	if got := string(rec.Batches[4].Meta); got != "x" {
		t.Errorf("meta after reopen = %q", got)
	}
	mustClose(t, j)
}

// TestMetaRefused: a meta record without entries, or over MaxMeta, is
// refused before anything is written.
func TestMetaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	defer mustClose(t, j)
	size := j.Size()
	for name, c := range map[string]struct {
		batches [][][]byte
		metas   [][]byte
	}{
		"no entries": {batchesOf([]string{}), [][]byte{[]byte("m")}},
		"too large":  {batchesOf([]string{"e"}), [][]byte{make([]byte, MaxMeta+1)}},
	} {
		if _, err := j.AppendMeta(c.batches, c.metas); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err %v, want invalid argument", name, err)
		}
	}
	if j.Size() != size || j.Err() != nil {
		t.Errorf("a refused AppendMeta wrote (size %d -> %d) or failed the journal (%v)", size, j.Size(), j.Err())
	}
}

// TestMetaTornWithItsBatch: a write cut inside its meta record loses the
// whole batch (it was never acknowledged), and the batches before keep
// their metas.
func TestMetaTornWithItsBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.wal")
	j := mustCreate(t, fsys.OS, path, testHeader(0))
	if _, err := j.AppendMeta(batchesOf([]string{"one"}), [][]byte{[]byte("first")}); err != nil {
		t.Fatal(err)
	}
	before := j.Size()
	spans, err := j.AppendMeta(batchesOf([]string{"two"}), [][]byte{bytes.Repeat([]byte("z"), 1000)})
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	// Cut in the middle of the second write's meta payload.
	cut := spans[0][0].Off + frame.Size(len("two")) + 500
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}
	j, rec := openExpect(t, path, [][]string{{"one"}})
	defer mustClose(t, j)
	if string(rec.Batches[0].Meta) != "first" {
		t.Errorf("first batch's meta = %q", rec.Batches[0].Meta)
	}
	if rec.End != before || rec.TruncatedBytes != cut-before {
		t.Errorf("End %d TruncatedBytes %d, want %d and %d", rec.End, rec.TruncatedBytes, before, cut-before)
	}
}

// TestMetaOutOfPlace: frames a correct writer never produces (a meta with
// no entries before it, two metas, an entry after the meta) end the valid
// part of the journal like any other contradiction.
func TestMetaOutOfPlace(t *testing.T) {
	for name, frames := range map[string][]frame.Type{
		"meta first":        {typeMeta, typeCommit},
		"two metas":         {typeEntry, typeMeta, typeMeta, typeCommit},
		"entry after meta":  {typeEntry, typeMeta, typeEntry, typeCommit},
		"meta, then commit": {typeEntry, typeMeta, typeCommit}, // the valid shape, as a control
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.wal")
			j := mustCreate(t, fsys.OS, path, testHeader(0))
			gen, start := j.Header().Generation, j.Size()
			mustClose(t, j)
			var buf []byte
			entries := 0
			for _, typ := range frames {
				var payload []byte
				switch typ {
				case typeEntry:
					payload = []byte("e")
					entries++
				case typeMeta:
					payload = []byte("m")
				case typeCommit:
					c := encodeCommit(1, entries)
					payload = c[:]
				}
				buf = frame.Append(buf, typ, payload, gen, int64(len(buf)))
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(buf)
			f.Close()
			j, rec, err := Open(fsys.OS, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mustClose(t, j)
			valid := name == "meta, then commit"
			if got := len(rec.Batches) == 1; got != valid {
				t.Fatalf("recovered %d batches (truncated %d bytes); want the write kept: %v", len(rec.Batches), rec.TruncatedBytes, valid)
			}
			if !valid && rec.End != start {
				t.Errorf("End %d, want %d (the bad write cut)", rec.End, start)
			}
		})
	}
}
