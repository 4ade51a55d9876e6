package ledger

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

var testKey = layout.Key{ProjectKey: "p", SessionID: "11111111-1111-4111-8111-111111111111"}

func newStore(t *testing.T) *Store {
	t.Helper()
	dir := t.TempDir()
	return NewStore(Config{FS: fsys.OS, Layout: layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")},
		Clock: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), Logger: zap.NewNop()})
}

// keepAside is a KeepFunc that keeps the copy in memory.
type keepAside struct{ kept [][]byte }

func (k *keepAside) keep(path string, r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	k.kept = append(k.kept, b)
	return path + ".kept", err
}

func strs(ids []ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// TestRecordRoundTrip: each kind of identity (a canonical uuid, a uuid
// string in another form, a content digest) reads back as written, an
// entry recorded again at the same position counts once, and the last
// record's fingerprint and missing count are the ledger's.
func TestRecordRoundTrip(t *testing.T) {
	s := newStore(t)
	b := s.Book(testKey, zap.NewNop(), nil)
	a := IDOf(Pos{Seg: 1, Off: 64}, "0e8a4c5e-5f1a-4d2c-9a53-6e9c4f1d2b7a", nil)
	odd := IDOf(Pos{Seg: 1, Off: 200}, "not-a-uuid", nil)
	c := IDOf(Pos{Seg: 2, Off: 64}, "", []byte(`{"type":"tag", "tag":"x"}`))
	if err := b.Append(Fingerprint{Size: 10, Tail: 7}, 0, []ID{a, odd}); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(Fingerprint{Size: 20, Tail: 9}, 3, []ID{odd, c}); err != nil {
		t.Fatal(err)
	}
	led, err := s.Read(testKey)
	if err != nil || led == nil {
		t.Fatalf("Read = %v, %v", led, err)
	}
	if got := strs(led.IDs); !slices.Equal(got, []string{a.String(), odd.String(), c.String()}) || led.Records != 2 || !led.content {
		t.Fatalf("ids %q in %d records (content %v)", got, led.Records, led.content)
	}
	if led.Last != (Fingerprint{Size: 20, Tail: 9}) || led.Missing != 3 || led.Damaged != nil {
		t.Fatalf("last %+v, missing %d, damaged %v", led.Last, led.Missing, led.Damaged)
	}
	// The canonical form of a line without uuid: another encoder's
	// spacing and key order are the same entry.
	if IDOf(Pos{}, "", []byte(`{"tag":"x","type":"tag"}`)).String() != c.String() {
		t.Fatal("a line without uuid saved again by another JSON encoder is another entry")
	}
}

// TestSharedOpsRoundTrip: the shared file's operations ride in the next
// record, in order, with ids or without, and only the last bound of notes
// in a row are kept; a take-only record names the last record's file, and
// none is written before a record named one.
func TestSharedOpsRoundTrip(t *testing.T) {
	s := newStore(t)
	b := s.Book(testKey, zap.NewNop(), nil)
	d := func(n byte) [16]byte { return [16]byte{n} }
	b.TakeShared(d(9))
	if err := b.RecordShared(); err != nil {
		t.Fatal(err)
	}
	if led, err := s.Read(testKey); err != nil || led != nil {
		t.Fatalf("a take recorded before any record named a file: %+v %v", led, err)
	}
	b.NoteShared([][16]byte{d(1), d(2), d(3)}, 2)
	a := IDOf(Pos{Seg: 1, Off: 64}, "0e8a4c5e-5f1a-4d2c-9a53-6e9c4f1d2b7a", nil)
	if err := b.Append(Fingerprint{Size: 10, Tail: 7}, 0, []ID{a}); err != nil {
		t.Fatal(err)
	}
	b.TakeShared(d(3))
	b.NoteShared([][16]byte{d(4)}, 2)
	if err := b.RecordShared(); err != nil {
		t.Fatal(err)
	}
	led, err := s.Read(testKey)
	if err != nil || led == nil {
		t.Fatalf("Read = %v, %v", led, err)
	}
	want := []SharedOp{{Take: true, Digest: d(9)}, {Digest: d(2)}, {Digest: d(3)}, {Take: true, Digest: d(3)}, {Digest: d(4)}}
	if !slices.Equal(led.Shared, want) || led.Records != 2 || led.Last != (Fingerprint{Size: 10, Tail: 7}) || len(led.IDs) != 1 || led.Damaged != nil {
		t.Fatalf("ops %+v in %d records, last %+v, ids %d, damaged %v; want %+v", led.Shared, led.Records, led.Last, len(led.IDs), led.Damaged, want)
	}
}

// TestSharedOpsOnceAfterFailedAppend: a record whose append failed is not
// trusted, even when its write went whole (the folder sync of a new ledger
// failed): it is cut, by the same Book or the next writer's, and the
// Book's next record carries its operations, each once (a take recorded
// twice would take a line no mirrored copy matched; a note trusted from a
// record that never reached the disk is lost at the next power loss).
func TestSharedOpsOnceAfterFailedAppend(t *testing.T) {
	for _, op := range []fstest.Op{fstest.OpSyncDir, fstest.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			ff := fstest.NewFaultFS(fsys.OS)
			L := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
			s := NewStore(Config{FS: ff, Layout: L, Clock: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), Logger: zap.NewNop()})
			if err := os.MkdirAll(filepath.Dir(L.AckedPath(testKey)), 0o700); err != nil {
				t.Fatal(err)
			}
			b := s.Book(testKey, zap.NewNop(), nil)
			fp := Fingerprint{Size: 10, Tail: 7}
			b.NoteShared([][16]byte{{1}}, 8)
			ff.Inject(fstest.Fault{Op: op, Path: func(p string) bool { return strings.HasPrefix(p, filepath.Dir(L.AckedPath(testKey))) }})
			if err := b.Append(fp, 0, nil); err == nil {
				t.Fatal("the fault did not fire")
			}
			ff.Clear()
			if led, err := s.Book(testKey, zap.NewNop(), nil).read(); err != nil || led != nil && led.End != 0 {
				t.Fatalf("the next writer reads the ledger as %+v, %v; want the failed record cut", led, err)
			}
			b.TakeShared([16]byte{1})
			if err := b.Append(fp, 0, nil); err != nil {
				t.Fatal(err)
			}
			led, err := s.Read(testKey)
			if err != nil || led == nil {
				t.Fatalf("Read = %v, %v", led, err)
			}
			want := []SharedOp{{Digest: [16]byte{1}}, {Take: true, Digest: [16]byte{1}}}
			if !slices.Equal(led.Shared, want) {
				t.Fatalf("ops %+v; want each once: %+v", led.Shared, want)
			}
		})
	}
}

// TestTornTailAndDamage: a torn last record is ignored and written over
// without a copy; damage followed by a whole record is reported, copied
// aside before the next append cuts it, and the ledger reads whole again.
func TestTornTailAndDamage(t *testing.T) {
	s := newStore(t)
	keep := &keepAside{}
	b := s.Book(testKey, zap.NewNop(), keep.keep)
	id := func(i int) ID { return IDOf(Pos{Seg: uint64(i), Off: 64}, "", []byte{byte('a' + i)}) }
	for i := 0; i < 3; i++ {
		if err := b.Append(Fingerprint{Size: int64(i)}, 0, []ID{id(i)}); err != nil {
			t.Fatal(err)
		}
	}
	path := s.layout.AckedPath(testKey)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	led, _ := s.Read(testKey)
	if led.End != int64(len(whole)) || led.Records != 3 {
		t.Fatalf("end %d of %d bytes, %d records", led.End, len(whole), led.Records)
	}
	third := len(whole) / 3

	// Torn: the last record cut short.
	if err := os.WriteFile(path, whole[:len(whole)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	if led, err := s.Read(testKey); err != nil || led.Records != 2 || led.Damaged != nil {
		t.Fatalf("torn tail read as %+v, %v; want 2 records, not damaged", led, err)
	}
	b = s.Book(testKey, zap.NewNop(), keep.keep)
	if err := b.Append(Fingerprint{Size: 9}, 0, []ID{id(9)}); err != nil {
		t.Fatal(err)
	}
	if led, _ := s.Read(testKey); led.Records != 3 || len(keep.kept) != 0 {
		t.Fatalf("after writing over a torn tail: %d records, %d copies kept; want 3 and none", led.Records, len(keep.kept))
	}

	// Damage: the middle record flipped, a whole one after it.
	damaged := append([]byte(nil), whole...)
	damaged[third+third/2] ^= 0xff
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if led, err := s.Read(testKey); err != nil || led.Records != 1 || led.Damaged == nil {
		t.Fatalf("damaged ledger read as %+v, %v; want 1 record and damaged", led, err)
	}
	b = s.Book(testKey, zap.NewNop(), keep.keep)
	if err := b.Append(Fingerprint{Size: 9}, 0, []ID{id(9)}); err != nil {
		t.Fatal(err)
	}
	if len(keep.kept) != 1 || !bytes.Equal(keep.kept[0], damaged) {
		t.Fatalf("%d copies kept before the cut, want the damaged ledger", len(keep.kept))
	}
	if led, _ := s.Read(testKey); led.Records != 2 || led.Damaged != nil {
		t.Fatalf("after the cut: %+v", led)
	}
}

// fakeHoldings is a transcript's file and pending lines.
type fakeHoldings struct {
	path    string
	pending []string
}

func (h fakeHoldings) Exists() bool {
	_, err := os.Stat(h.path)
	return err == nil
}
func (h fakeHoldings) HasPrefix(Fingerprint) (bool, error) { return false, nil }
func (h fakeHoldings) HasUUID(id string) bool {
	b, _ := os.ReadFile(h.path)
	return strings.Contains(string(b)+strings.Join(h.pending, "\n"), `"uuid":"`+id+`"`)
}
func (h fakeHoldings) Open() (fsys.File, error) { return fsys.OS.OpenFile(h.path, os.O_RDONLY, 0) }
func (h fakeHoldings) Pending(fn func([]byte)) error {
	for _, l := range h.pending {
		fn([]byte(l))
	}
	return nil
}

// fakeJournal holds the entries logged at some positions.
type fakeJournal map[Pos]string

func (j fakeJournal) Retained(at []Pos, fn func(int, []byte) error) (time.Time, error) {
	for i, p := range at {
		if e, ok := j[p]; ok {
			if err := fn(i, []byte(e)); err != nil {
				return time.Time{}, err
			}
		}
	}
	return time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), nil
}

// TestCompareAndPutBack: a rewrite that dropped acknowledged entries is
// found (Status, note), repair's plan puts back those the journal holds
// right after the entry acknowledged before each, keeping the other
// program's line, and what the journal lost stays missing.
func TestCompareAndPutBack(t *testing.T) {
	s := newStore(t)
	b := s.Book(testKey, zap.NewNop(), nil)
	line := func(u string) string { return `{"uuid":"` + u + `","type":"user"}` }
	uu := []string{"a0000000-0000-4000-8000-000000000000", "b0000000-0000-4000-8000-000000000000", "c0000000-0000-4000-8000-000000000000", "d0000000-0000-4000-8000-000000000000"}
	var ids []ID
	j := fakeJournal{}
	for i, u := range uu {
		p := Pos{Seg: 1, Off: int64(64 * (i + 1))}
		ids = append(ids, IDOf(p, u, nil))
		if i != 3 {
			j[p] = line(u)
		}
	}
	if err := b.Append(Fingerprint{Size: 1}, 0, ids); err != nil {
		t.Fatal(err)
	}
	path := s.layout.TranscriptPath(testKey)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	rewritten := line(uu[0]) + "\n" + `{"type":"foreign"}` + "\n" + line(uu[2]) + "\n"
	if err := os.WriteFile(path, []byte(rewritten), 0o600); err != nil {
		t.Fatal(err)
	}
	h := fakeHoldings{path: path}
	if err := b.Compare(h, true, "test"); err != nil {
		t.Fatal(err)
	}
	ms := s.Missing()
	if len(ms) != 1 || ms[0].Count != 2 || !slices.Equal(ms[0].IDs, []string{uu[1], uu[3]}) {
		t.Fatalf("Missing = %+v, want %s and %s", ms, uu[1], uu[3])
	}
	if _, err := os.Stat(s.layout.MissingPath(testKey)); err != nil {
		t.Fatalf("no note of the finding: %v", err)
	}
	// A process started later lists the finding from its note.
	s2 := NewStore(Config{FS: fsys.OS, Layout: s.layout, Clock: s.clock, Logger: zap.NewNop()})
	if errs := s2.LoadMissing(); len(errs) != 0 || len(s2.Missing()) != 1 {
		t.Fatalf("LoadMissing: %v, %+v", errs, s2.Missing())
	}

	plan, err := b.PlanPutback(h, j)
	if err != nil || plan == nil || plan.Restored() != 1 {
		t.Fatalf("plan %+v, %v; want 1 entry put back", plan, err)
	}
	var out bytes.Buffer
	if err := plan.Write(&out, strings.NewReader(rewritten), int64(len(rewritten))); err != nil {
		t.Fatal(err)
	}
	want := line(uu[0]) + "\n" + line(uu[1]) + "\n" + `{"type":"foreign"}` + "\n" + line(uu[2]) + "\n"
	if out.String() != want {
		t.Fatalf("put back:\n%s\nwant:\n%s", out.String(), want)
	}
	if rest := strs(plan.Remaining()); !slices.Equal(rest, []string{uu[3]}) {
		t.Fatalf("remaining %q, want %s", rest, uu[3])
	}
	res := &damage.RepairResult{Before: &damage.Report{}, After: &damage.Report{}}
	plan.Fold(res, nil)
	if !res.Changed || len(res.Actions) != 1 || len(res.Before.Problems) != 1 || len(res.After.Problems) != 1 {
		t.Fatalf("folded result %+v", res)
	}

	// The file holds every entry again: the finding and its note go.
	if err := os.WriteFile(path, []byte(want+line(uu[3])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Compare(h, false, "test"); err != nil {
		t.Fatal(err)
	}
	if ms := s.Missing(); len(ms) != 0 {
		t.Fatalf("Missing after the entries are back = %+v", ms)
	}
	if _, err := os.Stat(s.layout.MissingPath(testKey)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the note stays: %v", err)
	}
}

// TestCheckTee: a check that reads the transcript through Tee reports the
// entries missing from it, first among its problems.
func TestCheckTee(t *testing.T) {
	s := newStore(t)
	b := s.Book(testKey, zap.NewNop(), nil)
	kept := IDOf(Pos{Seg: 1, Off: 64}, "", []byte(`{"type":"tag","tag":"kept"}`))
	lost := IDOf(Pos{Seg: 1, Off: 128}, "", []byte(`{"type":"tag","tag":"lost"}`))
	if err := b.Append(Fingerprint{}, 0, []ID{kept, lost}); err != nil {
		t.Fatal(err)
	}
	ck, err := s.NewCheck(testKey)
	if err != nil || ck == nil {
		t.Fatalf("NewCheck = %v, %v", ck, err)
	}
	if _, err := io.Copy(io.Discard, ck.Tee(strings.NewReader(`{"tag": "kept", "type": "tag"}`))); err != nil {
		t.Fatal(err)
	}
	rep := &damage.Report{}
	if err := ck.Report(rep, fakeJournal{}); err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || !slices.Equal(rep.Problems[0].IDs, []string{lost.String()}) {
		t.Fatalf("problems %+v, want %s missing", rep.Problems, lost)
	}
	var none *Check
	if r := strings.NewReader("x"); none.Tee(r) != io.Reader(r) || none.Report(rep, nil) != nil {
		t.Fatal("a nil Check does not pass the reader through")
	}
}

// TestLedgerNamedByTheNextWriter: a ledger created by a process killed
// before it synced the ledger's folder has its name in the page cache
// only. The next writer's first record syncs the folder too, so a power
// loss after it takes neither the ledger nor its records (a Book trusted
// the name it found, and a power loss then took the whole ledger).
func TestLedgerNamedByTheNextWriter(t *testing.T) {
	L := layout.Layout{Root: "/root", StateDir: "/state"}
	cfg := func(f fsys.FS) Config {
		return Config{FS: f, Layout: L, Clock: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), Logger: zap.NewNop()}
	}
	a := IDOf(Pos{Seg: 1, Off: 64}, "0e8a4c5e-5f1a-4d2c-9a53-6e9c4f1d2b7a", nil)
	b := IDOf(Pos{Seg: 1, Off: 200}, "1e8a4c5e-5f1a-4d2c-9a53-6e9c4f1d2b7a", nil)
	c := fstest.NewCrashFS()
	hooked := fstest.NewHookFS(c, fstest.Hooks{Before: func(call fstest.Call) error {
		if call.Name == "syncdir" && call.Path == filepath.Dir(L.AckedPath(testKey)) {
			c.Crash() // killed right before the folder's sync
			return fstest.ErrCrashed
		}
		return nil
	}})
	if err := NewStore(cfg(hooked)).Book(testKey, zap.NewNop(), nil).Append(Fingerprint{Size: 10, Tail: 1}, 0, []ID{a}); err == nil {
		t.Fatal("the first record's append went on past the crash")
	}
	next := c.KillClone()
	s := NewStore(cfg(next))
	if err := s.Book(testKey, zap.NewNop(), nil).Append(Fingerprint{Size: 20, Tail: 2}, 0, []ID{b}); err != nil {
		t.Fatal(err)
	}
	after := next.CrashClone(nil)
	led, err := Read(after, L, testKey)
	if err != nil || led == nil {
		t.Fatalf("after a power loss: ledger %v, %v; want both records", led, err)
	}
	if got := strs(led.IDs); !slices.Equal(got, []string{a.String(), b.String()}) {
		t.Fatalf("after a power loss: ids %q, want both", got)
	}
}

// TestMissingNoteRemovalIsDurable: once a comparison finds nothing
// missing, the note of missing entries is gone for good: a power loss
// right after does not bring it back (status then reported entries
// missing that the transcript holds, until the session was compared
// again).
func TestMissingNoteRemovalIsDurable(t *testing.T) {
	L := layout.Layout{Root: "/root", StateDir: "/state"}
	c := fstest.NewCrashFS()
	cfg := func(f fsys.FS) Config {
		return Config{FS: f, Layout: L, Clock: clock.NewFake(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), Logger: zap.NewNop()}
	}
	b := NewStore(cfg(c)).Book(testKey, zap.NewNop(), nil)
	b.SetMissing([]ID{IDOf(Pos{Seg: 1, Off: 64}, "0e8a4c5e-5f1a-4d2c-9a53-6e9c4f1d2b7a", nil)}, "test")
	// (The registry itself: Missing lists only transcripts that exist.)
	if s := NewStore(cfg(c.CrashClone(nil))); len(s.LoadMissing()) != 0 || len(s.missing.all()) != 1 {
		t.Fatalf("the note after a power loss: %v", s.missing.all())
	}
	b.SetMissing(nil, "test")
	s := NewStore(cfg(c.CrashClone(nil)))
	if errs := s.LoadMissing(); len(errs) != 0 || len(s.missing.all()) != 0 {
		t.Fatalf("after the note's removal and a power loss: %v %v; want none", s.missing.all(), errs)
	}
}
