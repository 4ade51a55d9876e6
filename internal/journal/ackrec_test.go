package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// fillLog appends n one-entry batches of 1 KiB to one stream, with
// segments of segSize, and returns the segments' paths in order.
func fillLog(t *testing.T, fsy fsys.FS, dir string, n int, segSize int64, close bool) []string {
	t.Helper()
	l, _ := openLog(t, fsy, dir, Options{SegmentSize: segSize})
	s := l.Stream(key("a"))
	if err := s.Begin(Fingerprint{}, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := s.Append(batchesOf([]string{fmt.Sprintf("%04d%s", i, strings.Repeat("x", 1020))}), nil); err != nil {
			t.Fatal(err)
		}
	}
	var segs []string
	for _, sg := range l.segs {
		segs = append(segs, sg.path)
	}
	if close {
		l.Close()
	}
	return segs
}

// TestLossIsFound: each way a segment can lose acknowledged records
// outside sessiond (cut short, deleted, a block zeroed, a byte flipped)
// is found at start: Open refuses, changing nothing, and names the lost
// entries; with AcceptLoss it starts, reports them in Recovery.Lost, and
// reads every intact record, those after the damage included.
func TestLossIsFound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, segs []string)
		lost   uint64 // entries lost, 0: at least one
		read   int    // entries left readable (-1: not checked)
	}{
		{"cut to half", func(t *testing.T, segs []string) {
			p := segs[len(segs)-1]
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, 0, -1},
		{"last segment deleted", func(t *testing.T, segs []string) {
			if err := os.Remove(segs[len(segs)-1]); err != nil {
				t.Fatal(err)
			}
		}, 0, -1},
		{"a block zeroed", func(t *testing.T, segs []string) {
			f, err := os.OpenFile(segs[0], os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(make([]byte, 4096), 8192)
			f.Close()
		}, 0, -1},
		{"a byte flipped", func(t *testing.T, segs []string) {
			b, _ := os.ReadFile(segs[0])
			b[10000] ^= 0x40
			os.WriteFile(segs[0], b, 0o600)
		}, 1, 59},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := fillLog(t, fsys.OS, dir, 60, 32<<10, true)
			if len(segs) < 2 {
				t.Fatalf("want several segments, got %d", len(segs))
			}
			tc.damage(t, segs)
			before := snapshot(t, dir)
			_, _, err := Open(Options{FS: fsys.OS, Dir: dir, SegmentSize: 32 << 10})
			if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "--accept-journal-loss") {
				t.Fatalf("Open: %v, want the loss refused", err)
			}
			if after := snapshot(t, dir); after != before {
				t.Fatalf("the refused start changed the journal:\nbefore %s\nafter  %s", before, after)
			}
			l, rec := openLog(t, fsys.OS, dir, Options{SegmentSize: 32 << 10, AcceptLoss: true})
			defer l.Close()
			var lost uint64
			for _, x := range rec.Lost {
				lost += x.Entries
			}
			if len(rec.Lost) == 0 || lost == 0 || tc.lost != 0 && lost != tc.lost {
				t.Fatalf("Recovery.Lost = %+v (%d entries), want %d lost", rec.Lost, lost, tc.lost)
			}
			got := contents(t, l, key("a"))
			if tc.read >= 0 && len(got) != tc.read {
				t.Fatalf("%d entries readable, want %d", len(got), tc.read)
			}
			if uint64(len(got))+lost != 60 {
				t.Fatalf("%d readable and %d lost, want the 60 acknowledged", len(got), lost)
			}
		})
	}
}

// snapshot names the journal folder's files and sizes (the record's slots
// aside, which Open only reads).
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		fi, _ := e.Info()
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out = append(out, fmt.Sprintf("%s:%d:%x", e.Name(), fi.Size(), crc(b)))
	}
	return strings.Join(out, " ")
}

func crc(b []byte) uint32 {
	var h uint32
	for _, c := range b {
		h = h*31 + uint32(c)
	}
	return h
}

// TestLossAfterKill: the record is written without a sync, so a kill -9
// (the page cache kept) still knows how far the journal was acknowledged: a
// segment cut after the kill is found; the same disk without the cut
// starts clean.
func TestLossAfterKill(t *testing.T) {
	c := fstest.NewCrashFS()
	segs := fillLog(t, c, "/log", 20, 1<<20, false) // no Close: killed
	clean := c.KillClone()
	if l, rec, err := Open(Options{FS: clean, Dir: "/log"}); err != nil || len(rec.Lost) != 0 {
		t.Fatalf("a kill alone: %v %+v", err, rec)
	} else {
		l.Close()
	}
	cut := c.KillClone()
	f, err := cut.OpenFile(segs[len(segs)-1], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Truncate(fi.Size() / 3)
	f.Close()
	if _, _, err := Open(Options{FS: cut, Dir: "/log"}); !errors.Is(err, ErrLost) {
		t.Fatalf("a cut after a kill: %v, want ErrLost", err)
	}
}

// TestNoRecordIsReported: when the acknowledgement record beside the
// segments is gone or unreadable, no loss can be checked, and Recovery
// says why (the writer reports it loudly) instead of the start passing
// for a clean one; the start goes on and reads every record. A log
// with no segment, or only format 1 segments (from before the record),
// reports nothing.
func TestNoRecordIsReported(t *testing.T) {
	for _, tc := range []struct {
		name                string
		segments, version1  bool
		damage              func(t *testing.T, rec string)
		unreadable, missing bool
	}{
		{"removed", true, false, func(t *testing.T, rec string) {
			if err := os.Remove(rec); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"both slots zeroed", true, false, func(t *testing.T, rec string) {
			fi, err := os.Stat(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(rec, make([]byte, fi.Size()), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"emptied", true, false, func(t *testing.T, rec string) {
			if err := os.Truncate(rec, 0); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"intact", true, false, func(*testing.T, string) {}, false, false},
		{"removed beside format 1 segments", true, true, func(t *testing.T, rec string) {
			if err := os.Remove(rec); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"emptied, no segment", false, false, func(t *testing.T, rec string) {
			if err := os.Truncate(rec, 0); err != nil {
				t.Fatal(err)
			}
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := fillLog(t, fsys.OS, dir, 20, 8<<10, true)
			if !tc.segments {
				for _, p := range segs {
					os.Remove(p)
				}
			}
			if tc.version1 {
				for _, p := range segs {
					toVersion1(t, p)
				}
			}
			tc.damage(t, filepath.Join(dir, AckFile))
			l, rec := openLog(t, fsys.OS, dir, Options{SegmentSize: 8 << 10})
			defer l.Close()
			if rec.AckUnreadable != tc.unreadable || rec.AckMissing != tc.missing {
				t.Fatalf("AckUnreadable %v, AckMissing %v; want %v, %v", rec.AckUnreadable, rec.AckMissing, tc.unreadable, tc.missing)
			}
			want := 0
			if tc.segments {
				want = 20
			}
			if got := contents(t, l, key("a")); len(got) != want {
				t.Fatalf("%d entries read, want %d", len(got), want)
			}
		})
	}
}
