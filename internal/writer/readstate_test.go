package writer

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/writer/session"
)

// The reads of sessiond's own state under a failing read (readstate.go):
// each fails its operation with the disk's error, caches nothing, and the
// retry once the fault is gone sees everything the state held.

// onPath selects the operations on exactly path.
func onPath(path string) func(string) bool { return func(p string) bool { return p == path } }

// retire compacts k and retires its writer, and waits until it is gone:
// the next request opens the session from disk.
func retire(t *testing.T, m *Manager, k layout.Key) {
	t.Helper()
	s := settled(t, m, k)
	if _, err := m.flush(bg, k, session.RetireIfDone, "test"); err != nil {
		t.Fatal(err)
	}
	waitExited(t, s)
}

// wantUnreadable fails the test unless err is the retryable failure of a
// read that hit cause: the edge answers RESOURCE_EXHAUSTED for EMFILE and
// UNAVAILABLE for EIO.
func wantUnreadable(t *testing.T, what string, err, cause error) {
	t.Helper()
	if !errors.Is(err, cause) {
		t.Fatalf("%s: %v, want an error holding %v", what, err, cause)
	}
	if !errors.Is(cause, syscall.EMFILE) && !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("%s: %v is not retryable (ErrUnavailable)", what, err)
	}
}

// A session opened under a descriptor shortage (EMFILE on its store
// sidecar's open) must fail retryably, not take the sidecar for absent: a
// writer opened without the batch ids it has to remember would store a
// client's resent batch (same batch_id) a second time, and the summary's
// version would go back to 0. The retry, with descriptors back, opens the
// session with both.
func TestStoreSidecarUnreadable(t *testing.T) {
	for _, c := range []struct {
		name string
		op   fstest.Op
		err  error
	}{
		{"open EMFILE", fstest.OpOpen, syscall.EMFILE},
		{"open EIO", fstest.OpOpen, syscall.EIO},
		{"read EIO", fstest.OpRead, syscall.EIO},
	} {
		t.Run(c.name, func(t *testing.T) {
			ff := fstest.NewFaultFS(fstest.NewCrashFS())
			m := newCrashManager(t, ff, nil)
			defer closeManager(t, m)
			k := fixedKey(1, "")
			first := `{"type":"queue-operation","operation":"enqueue"}` // no uuid: only the batch id tells a resend
			r, err := appendOpt(t, m, k, AppendOptions{BatchID: "b1", Summary: &SummaryUpdate{Data: []byte(`{"s":1}`)}}, first)
			if err != nil || r.SummaryVersion != 1 {
				t.Fatalf("first append: %+v %v", r, err)
			}
			// Compacted (the journal lets the batch go: its id lives in the
			// sidecar only) and retired: the next append opens the session.
			retire(t, m, k)
			ff.Inject(fstest.Fault{Op: c.op, Path: onPath(crashLayout.StorePath(k)), Err: c.err, Sticky: true})
			_, err = appendOpt(t, m, k, AppendOptions{BatchID: "b1"}, first)
			wantUnreadable(t, "resent batch with the sidecar unreadable", err, c.err)
			if !strings.Contains(err.Error(), "store sidecar") {
				t.Errorf("the error does not say what could not be read: %v", err)
			}
			if len(ff.Fired()) == 0 {
				t.Fatal("the fault never fired")
			}
			ff.Clear()
			r, err = appendOpt(t, m, k, AppendOptions{BatchID: "b1"}, first)
			if err != nil || !r.DuplicateBatch {
				t.Fatalf("resent batch once the sidecar reads again: %+v %v; want a duplicate", r, err)
			}
			r, err = appendOpt(t, m, k, AppendOptions{Summary: &SummaryUpdate{Data: []byte(`{"s":2}`), ExpectedVersion: 1}}, `{"type":"user","n":"2"}`)
			if err != nil || r.SummaryVersion != 2 {
				t.Fatalf("summary folded from version 1: %+v %v; want version 2", r, err)
			}
			if _, err := m.Flush(bg, k); err != nil {
				t.Fatal(err)
			}
			if got := transcriptLines(t, ff.Inner().(*fstest.CrashFS), k); len(got) != 2 {
				t.Fatalf("transcript holds %d lines, want 2 (the resent batch once): %q", len(got), got)
			}
		})
	}
}

// A store sidecar that does not decode is copied aside, whole, before the
// writer starts the session's summary and batch ids afresh: the session
// takes appends, and what the file held is still there for a human.
func TestStoreSidecarDamagedKept(t *testing.T) {
	c := fstest.NewCrashFS()
	m := newCrashManager(t, c, nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	if _, err := appendOpt(t, m, k, AppendOptions{BatchID: "b1", Summary: &SummaryUpdate{Data: []byte(`{"s":1}`)}}, `{"type":"user","n":"1"}`); err != nil {
		t.Fatal(err)
	}
	retire(t, m, k)
	damaged := []byte(`{"summary_version":1,"batches":{"b1":`)
	if err := c.WriteFile(crashLayout.StorePath(k), damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := appendOpt(t, m, k, AppendOptions{}, `{"type":"user","n":"2"}`)
	if err != nil || r.SummaryVersion != 0 {
		t.Fatalf("append over a damaged sidecar: %+v %v; want it stored, the summary starting afresh", r, err)
	}
	dir := filepath.Join(crashLayout.StateDir, session.DamagedDir, k.ProjectKey, k.SessionID)
	ents, err := c.ReadDir(dir)
	if err != nil || len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), "-sessiond-store.json") {
		t.Fatalf("copies kept in %s: %v %v; want the damaged sidecar's", dir, ents, err)
	}
	if b, _ := c.ReadFile(filepath.Join(dir, ents[0].Name())); !bytes.Equal(b, damaged) {
		t.Fatalf("the copy holds %q, want %q", b, damaged)
	}
	if _, err := c.ReadFile(crashLayout.StorePath(k)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the damaged sidecar is still in place (%v): the next open would copy it again", err)
	}
}

// A listing reads the store sidecar of a session no writer has open: it
// fails while the sidecar cannot be read, instead of listing the session
// without its summary, and lists it once the fault is gone.
func TestStoreSidecarUnreadableInListing(t *testing.T) {
	ff := fstest.NewFaultFS(fstest.NewCrashFS())
	m := newCrashManager(t, ff, nil)
	k := fixedKey(1, "")
	if _, err := appendOpt(t, m, k, AppendOptions{Summary: &SummaryUpdate{Data: []byte(`{"s":1}`)}}, `{"type":"user","n":"1"}`); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	m = newCrashManager(t, ff, nil) // a fresh index: the listing reads the files
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(crashLayout.StorePath(k)), Err: syscall.EMFILE, Sticky: true})
	_, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", "")
	wantUnreadable(t, "summaries with the sidecar unreadable", err, syscall.EMFILE)
	ff.Clear()
	sums, err := catalogOf(m).ListSummaries(bg, k.ProjectKey, "", "")
	if err != nil || len(sums) != 1 || sums[0].Version != 1 {
		t.Fatalf("summaries once the sidecar reads again: %+v %v", sums, err)
	}
}

// The title sidecar (custom-title.json) is read by a listing and by a
// writer as it opens and publishes the session's entry: neither may take
// an unreadable one for none, which would list the session untitled until
// its files change.
func TestTitleSidecarUnreadable(t *testing.T) {
	for _, path := range []string{"listing", "writer"} {
		t.Run(path, func(t *testing.T) {
			ff := fstest.NewFaultFS(fstest.NewCrashFS())
			m := newCrashManager(t, ff, nil)
			k := fixedKey(1, "")
			mustAppendTo(t, m, k, line(k, "00000000-0000-4000-8000-000000000001", "hello"))
			if err := m.WriteSidecar(bg, k, "custom-title.json", []byte(`{"customTitle":"Kept title"}`)); err != nil {
				t.Fatal(err)
			}
			closeManager(t, m)
			m = newCrashManager(t, ff, nil)
			defer closeManager(t, m)
			title := filepath.Join(crashLayout.SessionDir(k), "custom-title.json")
			ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(title), Err: syscall.EMFILE, Sticky: true})
			var err error
			if path == "listing" {
				_, err = catalogOf(m).Info(bg, k)
			} else {
				_, err = m.Append(bg, k, [][]byte{[]byte(line(k, "00000000-0000-4000-8000-000000000002", "again"))})
			}
			wantUnreadable(t, path+" with the title unreadable", err, syscall.EMFILE)
			ff.Clear()
			if in, err := catalogOf(m).Info(bg, k); err != nil || in.Title != "Kept title" {
				t.Fatalf("info once the title reads again: %q %v", in.Title, err)
			}
		})
	}
}

// A listing that leaves archived sessions out reads each one's archive
// mark: one it cannot read fails the listing, instead of listing an
// archived session as active.
func TestArchiveMarkUnreadable(t *testing.T) {
	ff := fstest.NewFaultFS(fstest.NewCrashFS())
	m := newCrashManager(t, ff, nil)
	k := fixedKey(1, "")
	mustAppendTo(t, m, k, `{"type":"summary","n":"1"}`)
	if err := m.SetArchived(bg, k, true); err != nil {
		t.Fatal(err)
	}
	closeManager(t, m)
	m = newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpRead, Path: onPath(filepath.Join(crashLayout.SessionDir(k), sidecar.ArchiveName)), Err: syscall.EIO, Sticky: true})
	_, _, err := catalogOf(m).List(bg, catalog.ListOptions{ProjectKey: k.ProjectKey, ExcludeArchived: true})
	wantUnreadable(t, "listing with the archive mark unreadable", err, syscall.EIO)
	ff.Clear()
	if got, _, err := catalogOf(m).List(bg, catalog.ListOptions{ProjectKey: k.ProjectKey, ExcludeArchived: true}); err != nil || len(got) != 0 {
		t.Fatalf("listing of unarchived sessions once the mark reads again: %+v %v; want none", got, err)
	}
}

// A compaction that finds the transcript changed by another program scans
// it again; cut short (here by the title sidecar's read), the scan left
// the writer's uuids partial, and a writer that went on from there took
// a resent entry for a new one. The writer now fails and reopens.
func TestRescanCutShortReopens(t *testing.T) {
	ff := fstest.NewFaultFS(fstest.NewCrashFS())
	c := ff.Inner().(*fstest.CrashFS)
	m := newCrashManager(t, ff, nil)
	defer closeManager(t, m)
	k := fixedKey(1, "")
	first := line(k, "00000000-0000-4000-8000-000000000001", "first")
	mustAppendTo(t, m, k, first)
	if _, err := m.Flush(bg, k); err != nil {
		t.Fatal(err)
	}
	f, err := c.OpenFile(crashLayout.TranscriptPath(k), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(line(k, "00000000-0000-4000-8000-000000000009", "another program's") + "\n"))
	f.Close()
	mustAppendTo(t, m, k, line(k, "00000000-0000-4000-8000-000000000002", "second"))
	title := filepath.Join(crashLayout.SessionDir(k), "custom-title.json")
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Path: onPath(title), Err: syscall.EMFILE})
	_, err = m.Flush(bg, k)
	wantUnreadable(t, "compaction with the title unreadable", err, syscall.EMFILE)
	r, err := appendOpt(t, m, k, AppendOptions{}, first)
	if err != nil || r.Results[0].Outcome != Duplicate {
		t.Fatalf("the first entry resent: %+v %v; want a duplicate", r, err)
	}
}
