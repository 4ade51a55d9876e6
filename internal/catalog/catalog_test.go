package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/index"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/sidecar"
)

const project = "-w"

var bg = context.Background()

// fakeWriters stands for the writer.Manager: sessions on disk only, plus
// those the test says are live (entries a writer holds beyond the files).
type fakeWriters struct {
	L  layout.Layout
	ix *index.Index

	mu     sync.Mutex
	live   map[layout.Key]index.Entry // published by their writer
	views  map[layout.Key]int
	stores map[layout.Key]index.StoreSummary
}

func (w *fakeWriters) Exists(key layout.Key) (bool, error) {
	w.mu.Lock()
	_, ok := w.live[key]
	w.mu.Unlock()
	if ok {
		return true, nil
	}
	_, err := os.Lstat(w.L.TranscriptPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (w *fakeWriters) NotFound(key layout.Key) error {
	return fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
}

func (w *fakeWriters) IsActive(key layout.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.live[key]
	return ok
}

func (w *fakeWriters) WriterKeys() []layout.Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []layout.Key
	for k := range w.live {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return byName(keys[i], keys[j]) })
	return keys
}

func (w *fakeWriters) Publish(_ context.Context, key layout.Key) (bool, error) {
	w.mu.Lock()
	e, ok := w.live[key]
	w.mu.Unlock()
	if ok {
		e.Key, e.Owned = key, true
		w.ix.Put(e)
	}
	return ok, nil
}

func (w *fakeWriters) View(_ context.Context, key layout.Key, fn func(io.Reader, int) error) error {
	w.mu.Lock()
	w.views[key]++
	w.mu.Unlock()
	f, err := os.Open(w.L.TranscriptPath(key))
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f, 0)
}

func (w *fakeWriters) Stamp(key layout.Key) (index.Stamp, int64) {
	fi, err := os.Lstat(w.L.TranscriptPath(key))
	if err != nil {
		return index.Stamp{}, 0
	}
	return index.Stamp{CanonSize: fi.Size(), CanonMtime: fi.ModTime().UnixNano()}, fi.ModTime().UnixMilli()
}

func (w *fakeWriters) StoreSummaries(key layout.Key) (index.StoreSummaries, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.stores[key]; ok {
		return index.StoreSummaries{"": s}, nil
	}
	return nil, nil
}

func (w *fakeWriters) viewed() map[layout.Key]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.views
	w.views = map[layout.Key]int{}
	return v
}

func newCatalog(t *testing.T) (*Catalog, *fakeWriters) {
	dir := t.TempDir()
	L := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	ix := index.New()
	w := &fakeWriters{L: L, ix: ix, live: map[layout.Key]index.Entry{}, views: map[layout.Key]int{}, stores: map[layout.Key]index.StoreSummary{}}
	return New(Config{FS: fsys.OS, Layout: L, Index: ix, Progress: progress.New()}, w), w
}

func sessionKey(i int) layout.Key {
	return layout.Key{ProjectKey: project, SessionID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
}

func prompt(text string) string {
	return fmt.Sprintf(`{"type":"user","uuid":"u-%s","timestamp":"2025-01-02T03:04:05.000Z","message":{"role":"user","content":%q}}`, text, text)
}

// write puts lines into key's transcript, modified at mtime.
func write(t *testing.T, c *Catalog, key layout.Key, mtime time.Time, lines ...string) {
	t.Helper()
	p := c.layout.TranscriptPath(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func keysOf(infos []Info) []layout.Key {
	var out []layout.Key
	for _, in := range infos {
		out = append(out, in.Key)
	}
	return out
}

// TestListNewestFirstAndPaged: a listing is sorted by mtime, newest
// first; Offset and Limit cut the page, the total counts them all;
// Continue keeps the newest; ExcludeArchived leaves marked ones out.
func TestListNewestFirstAndPaged(t *testing.T) {
	c, _ := newCatalog(t)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= 4; i++ {
		write(t, c, sessionKey(i), base.Add(time.Duration(i)*time.Hour), prompt(fmt.Sprint("p", i)))
	}
	all, total, err := c.List(bg, ListOptions{ProjectKey: project})
	if want := []layout.Key{sessionKey(4), sessionKey(3), sessionKey(2), sessionKey(1)}; err != nil || total != 4 || !slices.Equal(keysOf(all), want) {
		t.Fatalf("List: %v %d %v, want %v", keysOf(all), total, err, want)
	}
	if all[0].Entries != 1 || all[0].FirstPrompt != "p4" || all[0].Path != c.layout.TranscriptPath(sessionKey(4)) {
		t.Fatalf("newest: %+v", all[0])
	}
	page, total, err := c.List(bg, ListOptions{ProjectKey: project, Offset: 1, Limit: 2})
	if want := []layout.Key{sessionKey(3), sessionKey(2)}; err != nil || total != 4 || !slices.Equal(keysOf(page), want) {
		t.Fatalf("page: %v %d %v, want %v", keysOf(page), total, err, want)
	}
	cont, _, err := c.List(bg, ListOptions{Continue: true})
	if err != nil || len(cont) != 1 || cont[0].Key != sessionKey(4) {
		t.Fatalf("continue: %v %v", keysOf(cont), err)
	}
	if err := sidecar.Write(fsys.OS, c.layout.SessionDir(sessionKey(4)), sidecar.ArchiveName, sidecar.ArchiveBody(true, base.Add(48*time.Hour))); err != nil {
		t.Fatal(err)
	}
	left, total, err := c.List(bg, ListOptions{ProjectKey: project, ExcludeArchived: true})
	if err != nil || total != 3 || slices.Contains(keysOf(left), sessionKey(4)) {
		t.Fatalf("without archived: %v %d %v", keysOf(left), total, err)
	}
}

// TestIndexServesUnchangedFiles: once indexed, a listing views none of
// the transcripts; one changed behind sessiond's back is viewed again.
func TestIndexServesUnchangedFiles(t *testing.T) {
	c, w := newCatalog(t)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= 3; i++ {
		write(t, c, sessionKey(i), base, prompt("p"))
	}
	if err := c.WarmIndex(bg); err != nil {
		t.Fatal(err)
	}
	if v := w.viewed(); len(v) != 3 {
		t.Fatalf("the first listing viewed %v, want all 3", v)
	}
	if _, _, err := c.List(bg, ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := w.viewed(); len(v) != 0 {
		t.Fatalf("the second listing viewed %v, want none", v)
	}
	write(t, c, sessionKey(2), base.Add(time.Minute), prompt("p"), prompt("q"))
	infos, _, err := c.List(bg, ListOptions{})
	if v := w.viewed(); err != nil || len(v) != 1 || v[sessionKey(2)] != 1 {
		t.Fatalf("after a foreign change: viewed %v, %v; want only the changed one", v, err)
	}
	if infos[0].Key != sessionKey(2) || infos[0].Entries != 2 {
		t.Fatalf("the changed session: %+v", infos[0])
	}
}

// TestLiveWritersAreListedAsTheySeeThem: a session a writer holds (or the
// journal) is listed with the entry the writer publishes, without a view;
// one whose writer has nothing yet is not listed.
func TestLiveWritersAreListedAsTheySeeThem(t *testing.T) {
	c, w := newCatalog(t)
	write(t, c, sessionKey(1), time.Now(), prompt("on disk"))
	w.live[sessionKey(2)] = index.Entry{Entries: 5, Pending: 5, ModifiedMs: time.Now().Add(time.Hour).UnixMilli()}
	infos, total, err := c.List(bg, ListOptions{ProjectKey: project})
	if err != nil || total != 2 || infos[0].Key != sessionKey(2) || infos[0].Entries != 5 || infos[0].Pending != 5 || !infos[0].Active {
		t.Fatalf("List: %+v %d %v", infos, total, err)
	}
	if v := w.viewed(); v[sessionKey(2)] != 0 {
		t.Fatalf("the live session was viewed: %v", v)
	}
	w.live[sessionKey(3)] = index.Entry{}
	w.ix.Put(index.Entry{Key: sessionKey(3), Owned: true, Absent: true})
	if _, err := c.Info(bg, sessionKey(3)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Info of a session with nothing yet: %v, want not found", err)
	}
	if _, total, _ := c.List(bg, ListOptions{ProjectKey: project}); total != 2 {
		t.Fatalf("a session with nothing yet was listed: %d", total)
	}
	// A session gone from disk and writers leaves the index too.
	delete(w.live, sessionKey(2))
	delete(w.live, sessionKey(3))
	os.Remove(c.layout.TranscriptPath(sessionKey(1)))
	if infos, total, err := c.List(bg, ListOptions{}); err != nil || total != 0 || len(infos) != 0 {
		t.Fatalf("after everything went: %v %d %v", keysOf(infos), total, err)
	}
	if keys := c.ix.Keys(""); len(keys) != 0 {
		t.Fatalf("the index kept %v", keys)
	}
}

func TestListSummaries(t *testing.T) {
	c, w := newCatalog(t)
	now := time.Now()
	for i := 1; i <= 3; i++ {
		write(t, c, sessionKey(i), now, prompt("p"))
	}
	w.stores[sessionKey(1)] = index.StoreSummary{Data: []byte(`{"a":1}`), Version: 2, MtimeMs: 10, Entries: 1}
	w.stores[sessionKey(3)] = index.StoreSummary{Data: []byte(`{"a":3}`), Version: 1, MtimeMs: 20, Entries: 0}
	sums, err := c.ListSummaries(bg, project, "", "")
	if err != nil || len(sums) != 2 {
		t.Fatalf("ListSummaries: %+v %v", sums, err)
	}
	// Session 1's summary covers its every line: it takes the session's
	// mtime, newer than session 3's stale one.
	if sums[0].Key != sessionKey(1) || sums[0].ModifiedMs != now.UnixMilli() || sums[1].Key != sessionKey(3) || sums[1].ModifiedMs != 20 || sums[1].Covers != 0 || sums[1].Entries != 1 {
		t.Fatalf("ListSummaries: %+v", sums)
	}
	if one, err := c.ListSummaries(bg, project, sessionKey(3).SessionID, ""); err != nil || len(one) != 1 || one[0].Key != sessionKey(3) {
		t.Fatalf("one session's: %+v %v", one, err)
	}
	if _, err := c.ListSummaries(bg, "", "", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("no project: %v, want invalid argument", err)
	}
}

// TestKeysJoinDiskAndWriters: the walks list what the folders hold and
// what only the writers know of, once each.
func TestKeysJoinDiskAndWriters(t *testing.T) {
	c, w := newCatalog(t)
	main := sessionKey(1)
	sub := layout.Key{ProjectKey: project, SessionID: main.SessionID, Subpath: "subagents/agent-a"}
	liveSub := layout.Key{ProjectKey: project, SessionID: main.SessionID, Subpath: "subagents/agent-b"}
	write(t, c, main, time.Now(), prompt("p"))
	write(t, c, sub, time.Now(), prompt("p"))
	w.live[liveSub] = index.Entry{}
	w.live[sub] = index.Entry{}
	other := layout.Key{ProjectKey: "-other", SessionID: main.SessionID}
	write(t, c, other, time.Now(), prompt("p"))

	subs, err := c.Subkeys(sub)
	if want := []string{"subagents/agent-a", "subagents/agent-b"}; err != nil || !slices.Equal(subs, want) {
		t.Fatalf("Subkeys: %v %v, want %v", subs, err, want)
	}
	all, err := c.AllKeys(project, true)
	if want := []layout.Key{main, sub, liveSub}; err != nil || !slices.Equal(all, want) {
		t.Fatalf("AllKeys: %v %v, want %v", all, err, want)
	}
	mains, err := c.AllKeys("", false)
	if want := []layout.Key{other, main}; err != nil || !slices.Equal(mains, want) {
		t.Fatalf("AllKeys of mains: %v %v, want %v", mains, err, want)
	}
	found, err := c.Find(main.SessionID, "")
	if want := []layout.Key{other, main}; err != nil || !slices.Equal(found, want) {
		t.Fatalf("Find: %v %v, want %v", found, err, want)
	}
	if found, err := c.Find(main.SessionID, liveSub.Subpath); err != nil || !slices.Equal(found, []layout.Key{liveSub}) {
		t.Fatalf("Find of a live subagent: %v %v", found, err)
	}
}

// TestSessionKeyForms: an id in upper case names the session stored under
// lower case; one stored only under its upper-case id keeps that name.
func TestSessionKeyForms(t *testing.T) {
	c, _ := newCatalog(t)
	upper := layout.Key{ProjectKey: project, SessionID: "AAAAAAAA-0000-4000-8000-000000000001"}
	lower := layout.Key{ProjectKey: project, SessionID: "aaaaaaaa-0000-4000-8000-000000000001"}
	if got, err := c.SessionKey(upper); err != nil || got != lower {
		t.Fatalf("nothing stored: %v %v, want the lower-case %v", got, err, lower)
	}
	write(t, c, upper, time.Now(), prompt("p"))
	if got, err := c.SessionKey(upper); err != nil || got != upper {
		t.Fatalf("stored under upper case: %v %v, want %v", got, err, upper)
	}
	if found, err := c.Find(lower.SessionID, ""); err != nil || len(found) != 0 {
		t.Fatalf("Find in lower case: %v %v; only the exact form was stored", found, err)
	}
	if found, err := c.Find(upper.SessionID, ""); err != nil || !slices.Equal(found, []layout.Key{upper}) {
		t.Fatalf("Find in upper case: %v %v", found, err)
	}
	write(t, c, lower, time.Now(), prompt("p"))
	if got, err := c.SessionKey(upper); err != nil || got != lower {
		t.Fatalf("both stored: %v %v, want the lower-case %v", got, err, lower)
	}
}

// TestLookupsThatCannotTellAreErrors: a look into a project or a session
// folder that fails (EIO here; EMFILE or EACCES alike) is an error, never
// taken for "not there": Find would otherwise pick another project's copy
// as the only one, and SessionKey could start a second file for a UUID
// stored in another case.
func TestLookupsThatCannotTellAreErrors(t *testing.T) {
	c, _ := newCatalog(t)
	id := "bbbbbbbb-0000-4000-8000-000000000002"
	a := layout.Key{ProjectKey: "-a", SessionID: id}
	b := layout.Key{ProjectKey: "-b", SessionID: id}
	write(t, c, a, time.Now(), prompt("a"))
	write(t, c, b, time.Now(), prompt("b"))
	upper := layout.Key{ProjectKey: project, SessionID: "CCCCCCCC-0000-4000-8000-000000000003"}
	write(t, c, upper, time.Now(), prompt("u"))
	lowerDir := c.layout.SessionDir(layout.Key{ProjectKey: project, SessionID: "cccccccc-0000-4000-8000-000000000003"})
	c.fs = fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(call fstest.Call) error {
		if call.Name == "lstat" && (call.Path == c.layout.TranscriptPath(b) || call.Path == lowerDir) {
			return syscall.EIO
		}
		return nil
	}})
	if found, err := c.Find(id, ""); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Find with one project unreadable: %v %v, want the EIO", found, err)
	}
	if got, err := c.SessionKey(upper); !errors.Is(err, syscall.EIO) {
		t.Fatalf("SessionKey with the lower-case folder unreadable: %v %v, want the EIO", got, err)
	}
	c.fs = fsys.OS
	if found, err := c.Find(id, ""); err != nil || len(found) != 2 {
		t.Fatalf("Find: %v %v, want both", found, err)
	}
	if got, err := c.SessionKey(upper); err != nil || got != upper {
		t.Fatalf("SessionKey: %v %v, want %v", got, err, upper)
	}
}

func TestSidecars(t *testing.T) {
	c, _ := newCatalog(t)
	k := sessionKey(1)
	if got, err := c.Sidecars(k); err != nil || len(got) != 0 {
		t.Fatalf("none: %v %v", got, err)
	}
	if err := sidecar.Write(fsys.OS, c.layout.SessionDir(k), sidecar.TitleName, []byte(`{"customTitle":"T"}`)); err != nil {
		t.Fatal(err)
	}
	sub := k
	sub.Subpath = "subagents/agent-a"
	if got, err := c.Sidecars(sub); err != nil || len(got) != 1 || got[0].Name != sidecar.TitleName {
		t.Fatalf("a subagent's key reads its session's: %v %v", got, err)
	}
	write(t, c, k, time.Now(), prompt("p"))
	if in, err := c.Info(bg, k); err != nil || in.Title != "T" {
		t.Fatalf("Info takes the title sidecar: %+v %v", in, err)
	}
}
