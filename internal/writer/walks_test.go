package writer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/journal"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/repair"
)

// TestInfoCountsPending: the listing entry says how many entries wait in
// the journal, and compaction brings that to zero.
func TestInfoCountsPending(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	if _, err := m.Append(ctx, k, [][]byte{entry(""), entry(uuid.NewString())}); err != nil {
		t.Fatal(err)
	}
	in, err := catalogOf(m).Info(ctx, k)
	if err != nil || in.Pending != 2 || in.Entries != 2 {
		t.Fatalf("before flush: %+v %v", in, err)
	}
	if _, err := m.Flush(ctx, k); err != nil {
		t.Fatal(err)
	}
	in, err = catalogOf(m).Info(ctx, k)
	if err != nil || in.Pending != 0 || in.Entries != 2 {
		t.Fatalf("after flush: %+v %v", in, err)
	}
}

// TestListingReadsNoTranscriptTwice: once indexed, listing sessions no
// writer holds opens none of their transcripts; a file changed behind
// sessiond's back is read again.
func TestListingReadsNoTranscriptTwice(t *testing.T) {
	e := newEnv(t)
	ff := fstest.NewFaultFS(fsys.OS)
	e.fs = ff
	m := e.manager()
	defer closeManager(t, m)
	ctx := context.Background()
	var keys []layout.Key
	for i := 0; i < 5; i++ {
		k := newKey()
		keys = append(keys, k)
		path := e.lay.TranscriptPath(k)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, append(entry(uuid.NewString(), "n", fmt.Sprint(i)), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	opened := map[string]int{}
	ff.Trace(func(ev fstest.Event) {
		if ev.Op == fstest.OpOpen && strings.HasSuffix(ev.Path, ".jsonl") {
			mu.Lock()
			opened[ev.Path]++
			mu.Unlock()
		}
	})
	list := func() {
		t.Helper()
		infos, total, err := catalogOf(m).List(ctx, catalog.ListOptions{ProjectKey: project})
		if err != nil || total != 5 || len(infos) != 5 {
			t.Fatalf("list: %d %d %v", total, len(infos), err)
		}
	}
	list()
	mu.Lock()
	first := len(opened)
	opened = map[string]int{}
	mu.Unlock()
	if first != 5 {
		t.Fatalf("first listing opened %d transcripts, want the 5 to index", first)
	}
	list()
	mu.Lock()
	if len(opened) != 0 {
		t.Fatalf("second listing opened %v; the index should have served it", opened)
	}
	mu.Unlock()
	// A foreign append changes the stamp: that one file is read again.
	f, _ := os.OpenFile(e.lay.TranscriptPath(keys[2]), os.O_APPEND|os.O_WRONLY, 0)
	f.Write(append(entry(""), '\n'))
	f.Close()
	list()
	mu.Lock()
	defer mu.Unlock()
	if len(opened) != 1 || opened[e.lay.TranscriptPath(keys[2])] == 0 {
		t.Fatalf("after a foreign append the listing opened %v, want only the changed file", opened)
	}
	if in, _ := catalogOf(m).Info(ctx, keys[2]); in.Entries != 2 {
		t.Fatalf("the rescanned entry counts %d entries, want 2", in.Entries)
	}
}

// TestListingRetiresWritersItOpens: the walks over every session (a
// listing, Info, FlushAll, CheckAll) meet journals left behind by writers
// whose last compaction failed. They opened a writer for each and left it
// to the idle retirement, so a daemon with a few hundred such sessions ran
// out of file descriptors on its next listing
// (TestHostileDescriptorExhaustion failed in CI). Each writer opened only
// for the walk now moves its journal into the file and retires; a writer
// someone was already using stays; the next listing opens none.
func TestListingRetiresWritersItOpens(t *testing.T) {
	for _, tc := range []struct {
		name string
		walk func(m *Manager, keys []layout.Key) error
	}{
		{"List", func(m *Manager, _ []layout.Key) error {
			_, _, err := catalogOf(m).List(bg, catalog.ListOptions{})
			return err
		}},
		{"Info", func(m *Manager, keys []layout.Key) error {
			for _, k := range keys {
				if _, err := catalogOf(m).Info(bg, k); err != nil {
					return err
				}
			}
			return nil
		}},
		{"FlushAll", func(m *Manager, _ []layout.Key) error { _, err := m.FlushAll(bg); return err }},
		{"CheckAll", func(m *Manager, _ []layout.Key) error {
			return checkAll(m, project, func(repair.CheckResult) error { return nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			keys := make([]layout.Key, 20)
			want := map[layout.Key][]string{}
			for i := range keys {
				keys[i] = newKey()
				if i%2 == 1 {
					// Half have a transcript already, the journal a tail.
					first := string(entry(uuid.NewString(), "i", fmt.Sprint(i), "n", "0"))
					mustAppendTo(t, m, keys[i], first)
					if _, err := m.Flush(bg, keys[i]); err != nil {
						t.Fatal(err)
					}
					want[keys[i]] = append(want[keys[i]], first)
				}
				l := string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
				mustAppendTo(t, m, keys[i], l)
				want[keys[i]] = append(want[keys[i]], l)
			}
			crash(t, m) // the journals stay, nothing compacted them
			m = e.manager()
			defer closeManager(t, m)
			live := newKey()
			mustAppendTo(t, m, live, string(entry(uuid.NewString())))

			if err := tc.walk(m, keys); err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.ActiveSessions != 1 || !m.IsActive(live) {
				t.Fatalf("after the walk %d writers are open (want only the one in use before it, still open: %v)", st.ActiveSessions, m.IsActive(live))
			}
			for _, k := range keys {
				if got := e.canonicalLines(k); strings.Join(got, "\n") != strings.Join(want[k], "\n") {
					t.Fatalf("%s on disk: %q, want %q", k, got, want[k])
				}
			}
			infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{})
			if err != nil || len(infos) != len(keys)+1 {
				t.Fatalf("listing after the walk: %d sessions, %v", len(infos), err)
			}
			for _, in := range infos {
				if in.Key != live && (in.Entries != uint64(len(want[in.Key])) || in.Pending != 0) {
					t.Fatalf("%s listed with %d entries, %d pending; want %d, 0", in.Key, in.Entries, in.Pending, len(want[in.Key]))
				}
			}
			if n := m.Stats().ActiveSessions; n != 1 {
				t.Fatalf("the listing after the walk left %d writers open, want 1", n)
			}
		})
	}
}

// TestListingRetiresWhenCompactionFails: out of descriptors (the case
// the walks' retirement is for), the compaction of a left-behind journal
// fails. The writer retires all the same, the journal keeps the entries,
// the listing counts them as pending, and the next listing opens no
// writer; once descriptors are back, FlushAll moves them.
func TestListingRetiresWhenCompactionFails(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	keys := make([]layout.Key, 10)
	want := map[layout.Key]string{}
	for i := range keys {
		keys[i] = newKey()
		want[keys[i]] = string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
		mustAppendTo(t, m, keys[i], want[keys[i]])
	}
	crash(t, m)
	ff := fstest.NewFaultFS(fsys.OS)
	e.fs = ff
	m = e.manager()
	defer closeManager(t, m)
	ff.Inject(fstest.Fault{Op: fstest.OpOpen, Sticky: true, Err: syscall.EMFILE,
		Path: func(p string) bool { return strings.Contains(p, ".compact-") }})
	for round := range 2 {
		infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{})
		if err != nil || len(infos) != len(keys) {
			t.Fatalf("round %d: listing %d sessions, %v", round, len(infos), err)
		}
		for _, in := range infos {
			if in.Entries != 1 || in.Pending != 1 {
				t.Fatalf("round %d: %s listed with %d entries, %d pending; want 1, 1", round, in.Key, in.Entries, in.Pending)
			}
		}
		if n := m.Stats().ActiveSessions; n != 0 {
			t.Fatalf("round %d: %d writers left open when compaction failed", round, n)
		}
	}
	for _, k := range keys {
		if _, err := os.Stat(e.lay.TranscriptPath(k)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: a transcript appeared though every compaction failed: %v", k, err)
		}
	}
	ff.Clear()
	if _, err := m.FlushAll(bg); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got := e.canonicalLines(k); len(got) != 1 || got[0] != want[k] {
			t.Fatalf("%s after FlushAll: %q, want its one entry", k, got)
		}
	}
	if n := m.Stats().ActiveSessions; n != 0 {
		t.Fatalf("FlushAll left %d writers open", n)
	}
}

// TestListingDropsEmptyLeftBehindJournals: a journal with no entry and no
// transcript (a refused first append whose journal could not be removed)
// is not a session: a walk skips it, and the writer it opened retires and
// removes the journal instead of holding it open.
func TestListingDropsEmptyLeftBehindJournals(t *testing.T) {
	for _, walk := range []string{"List", "Info", "FlushAll", "CheckAll"} {
		t.Run(walk, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			defer closeManager(t, m)
			keys := make([]layout.Key, 5)
			for i := range keys {
				keys[i] = newKey()
				// A stream begun and never written: what a writer whose
				// first append was refused leaves in the journal.
				if err := m.logs.Log().Stream(keys[i]).Begin(journal.Fingerprint{}, false); err != nil {
					t.Fatal(err)
				}
			}
			switch walk {
			case "List":
				if infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{}); err != nil || len(infos) != 0 {
					t.Fatalf("listing: %d sessions, %v; want none", len(infos), err)
				}
			case "Info":
				for _, k := range keys {
					if _, err := catalogOf(m).Info(bg, k); !errors.Is(err, errdefs.ErrNotFound) {
						t.Fatalf("info of %s: %v, want not found", k, err)
					}
				}
			case "FlushAll":
				if res, err := m.FlushAll(bg); err != nil || len(res) != 0 {
					t.Fatalf("FlushAll: %v, %v; want nothing flushed", res, err)
				}
			case "CheckAll":
				var res []repair.CheckResult
				err := checkAll(m, project, func(r repair.CheckResult) error { res = append(res, r); return nil })
				if err != nil || len(res) != 0 {
					t.Fatalf("CheckAll: %v, %v; want nothing checked", res, err)
				}
			}
			if n := m.Stats().ActiveSessions; n != 0 {
				t.Fatalf("%d writers left open for empty journals", n)
			}
		})
	}
}

// TestWalksRaceAppends: listings and FlushAll, which open and retire
// writers of left-behind journals, run in loops while appends, Info and
// their own writers' retirements race them: every acknowledged entry is
// in its transcript exactly once.
func TestWalksRaceAppends(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	keys := make([]layout.Key, 8)
	want := map[layout.Key][]string{}
	for i := range keys {
		keys[i] = newKey()
		l := string(entry(uuid.NewString(), "i", fmt.Sprint(i)))
		mustAppendTo(t, m, keys[i], l)
		want[keys[i]] = append(want[keys[i]], l)
	}
	crash(t, m)
	m = e.manager()
	stop := make(chan struct{})
	var walkers, writers sync.WaitGroup
	for w := range 2 {
		walkers.Add(1)
		go func() {
			defer walkers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if w == 0 {
					_, _, err = catalogOf(m).List(bg, catalog.ListOptions{})
				} else {
					_, err = m.FlushAll(bg)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	for i, k := range keys {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for n := range 40 {
				l := string(entry(uuid.NewString(), "i", fmt.Sprint(i), "n", fmt.Sprint(n)))
				if _, err := m.Append(bg, k, [][]byte{[]byte(l)}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[k] = append(want[k], l)
				mu.Unlock()
				if n%7 == 0 {
					if _, err := catalogOf(m).Info(bg, k); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	walkers.Wait()
	closeManager(t, m)
	for _, k := range keys {
		got := e.canonicalLines(k)
		slices.Sort(got)
		w := slices.Clone(want[k])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("%s holds %d lines, want its %d acknowledged entries once each", k, len(got), len(w))
		}
	}
}

// catalogOf is the catalog over m's folders and index, as the daemon
// wires it.
func catalogOf(m *Manager) *catalog.Catalog {
	c := m.Config()
	return catalog.New(catalog.Config{FS: c.FS, Layout: c.Layout, Index: c.Index, Logger: c.Logger, Progress: c.Progress}, m)
}

// checkAll is CheckAll over every transcript of project, as the server
// runs it.
func checkAll(m *Manager, project string, fn func(repair.CheckResult) error) error {
	keys, err := catalogOf(m).AllKeys(project, true)
	if err != nil {
		return err
	}
	return m.Repairs().CheckAll(bg, keys, fn)
}
