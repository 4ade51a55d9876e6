package writer

// The harness behind crash_test.go and fault_test.go: workloads that drive
// a Manager over an fstest filesystem while recording what was
// acknowledged, and the invariants checked on what a crash or a fault
// leaves behind.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

const crashProject = "-tmp-crash"

// crashLayout places everything inside the in-memory filesystem.
var crashLayout = layout.Layout{Root: "/home/u/.claude", StateDir: "/home/u/.local/state/sessiond"}

func fixedKey(n int, subpath string) layout.Key {
	return layout.Key{ProjectKey: crashProject, SessionID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", n), Subpath: subpath}
}

// sent is one batch given to Append (or written by a foreign program,
// caller foreignCaller), and whether it was acknowledged.
type sent struct {
	key    layout.Key
	lines  []string
	caller int // the goroutine that sent it; foreignCaller for another program's writes
	acked  bool
	ackN   int // global order of acknowledgement
}

const foreignCaller = -2

// call is one API call of a sequential workload and what it returned.
type call struct {
	what   string
	key    layout.Key // the session an append went to
	err    error
	faults []fstest.Event // faults that fired while it ran (any goroutine's)
}

// world is one run of a workload.
type world struct {
	t   testing.TB
	wl  *workload
	c   *fstest.CrashFS // the disk
	ff  *fstest.FaultFS // between the Manager and the disk in fault runs, else nil
	fs  fsys.FS         // what the Manager uses
	m   *Manager
	ctx context.Context

	mu      sync.Mutex
	batches []*sent
	ackN    int
	calls   []call
	nextID  int
	flags   map[string]bool // workload facts: "forked", "deleted", "restored", "repaired"...
	facts   map[string]int  // workload numbers: how many entries a fork must copy...
	// The store workload's sends: batch id -> batch, and summary version
	// -> the summary sent for it.
	storeBatches   map[string]*sent
	storeSummaries map[uint64]string
}

// workload is a representative sequence of operations.
type workload struct {
	name string
	cfg  func(*Config)
	// setup prepares the disk before anything is counted (files written
	// with CrashFS.WriteFile are durable at once).
	setup func(c *fstest.CrashFS)
	run   func(w *world)
	// probe lists the sessions that must work again after a crash or a
	// fault: each gets one more entry, flushed, that must be there.
	probe []layout.Key
	// locate returns the content of key's transcript after recovery and
	// whether it was found; nil means its canonical file.
	locate func(w *world, v *fstest.CrashFS, key layout.Key) ([]byte, bool, []string)
	// allowed says whether a line that is not one of the entries sent may
	// stand in key's transcript (setup content, repaired or forked lines).
	allowed func(w *world, key layout.Key, line string) bool
	// check adds the workload's own invariants on the recovered disk.
	check func(w *world, v *fstest.CrashFS) []string
	// appendsCompact: the size rule compacts right after appends, so a
	// failed journal write during an append call may be the compaction's
	// marker, after the append was rightly acknowledged.
	appendsCompact bool
	// heal retries, once a fault is gone, what the workload needs
	// finished; nil when a failed call needs no retry.
	heal func(w *world) []string
	// settle runs on the Manager that recovered a crashed disk, before
	// anything is checked: what the workload needs finished after a
	// crash (a repair); nil for nothing.
	settle func(w *world, m *Manager) []string
}

func newWorld(t testing.TB, wl *workload, c *fstest.CrashFS, ff *fstest.FaultFS) *world {
	w := &world{t: t, wl: wl, c: c, ff: ff, fs: c, ctx: context.Background(), flags: map[string]bool{}, facts: map[string]int{}}
	if ff != nil {
		w.fs = ff
	}
	w.m = newCrashManager(t, w.fs, wl)
	return w
}

func crashConfig(fs fsys.FS, wl *workload) Config {
	cfg := Config{Layout: crashLayout, FS: fs, Logger: zap.NewNop(), IdleCompact: time.Hour, IdleRetire: time.Hour}
	if wl != nil && wl.cfg != nil {
		wl.cfg(&cfg)
	}
	return cfg
}

func newCrashManager(t testing.TB, fs fsys.FS, wl *workload) *Manager {
	m, err := New(crashConfig(fs, wl))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// id returns a fresh uuid, the same sequence in every run of a workload.
func (w *world) id() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", w.nextID)
}

// line is an entry as agents send it (already compact, so stored as is).
// Without an id it is an entry with no uuid, unique by its tag.
func line(key layout.Key, id, tag string) string {
	if id == "" {
		return fmt.Sprintf(`{"type":"user","n":%q}`, tag)
	}
	return fmt.Sprintf(`{"type":"user","uuid":%q,"parentUuid":null,"sessionId":%q,"message":{"role":"user","content":%q}}`, id, key.SessionID, tag)
}

// do runs one API call of a sequential workload and records its result
// and the faults that fired meanwhile.
func (w *world) do(what string, fn func() error) error {
	return w.doKey(what, layout.Key{}, fn)
}

func (w *world) doKey(what string, key layout.Key, fn func() error) error {
	before := 0
	if w.ff != nil {
		before = len(w.ff.Fired())
	}
	err := fn()
	c := call{what: what, key: key, err: err}
	if w.ff != nil {
		c.faults = w.ff.Fired()[before:]
	}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	w.mu.Unlock()
	return err
}

// append sends lines as one batch for caller and records the outcome.
func (w *world) append(caller int, key layout.Key, lines ...string) error {
	_, _, err := w.appendOpt(caller, key, AppendOptions{}, lines...)
	return err
}

// appendOpt is append with SessionStore options; it also returns the
// recorded batch and the result.
func (w *world) appendOpt(caller int, key layout.Key, opt AppendOptions, lines ...string) (*sent, *AppendResult, error) {
	b := &sent{key: key, lines: lines, caller: caller}
	w.mu.Lock()
	w.batches = append(w.batches, b)
	w.mu.Unlock()
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	var res *AppendResult
	err := w.doKey("append "+key.String(), key, func() error {
		var err error
		res, err = w.m.AppendBatch(w.ctx, key, raw, opt)
		if err == nil {
			w.mu.Lock()
			w.ackN++
			b.acked, b.ackN = true, w.ackN
			w.mu.Unlock()
		}
		return err
	})
	return b, res, err
}

// flush compacts key.
func (w *world) flush(key layout.Key) error {
	return w.do("flush "+key.String(), func() error {
		_, err := w.m.Flush(w.ctx, key)
		return err
	})
}

// foreign appends lines to key's canonical file as another program does:
// O_APPEND, one write, fsync. They count as acknowledged once the fsync
// returned: sessiond must keep them.
func (w *world) foreign(key layout.Key, lines ...string) error {
	return w.foreignWrite("foreign append", key, os.O_WRONLY|os.O_APPEND, lines, func(fsys.File) ([]string, error) { return lines, nil })
}

// foreignSave replaces key's canonical file as a program that loaded it
// earlier saves its copy back: the first keep lines the file holds now,
// then its own lines, with open("w") (truncate, then write), fsync. Its
// own lines count as acknowledged once the fsync returned; the lines it
// kept are sessiond's.
func (w *world) foreignSave(key layout.Key, keep int, own ...string) error {
	w.awaitDeferred(key)
	return w.foreignWrite("foreign save", key, os.O_RDWR, own, func(f fsys.File) ([]string, error) {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		data := make([]byte, fi.Size())
		if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		var lines []string
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if len(lines) < keep && strings.HasSuffix(l, "\n") {
				lines = append(lines, strings.TrimSuffix(l, "\n"))
			}
		}
		return append(lines, own...), f.Truncate(0)
	})
}

// awaitDeferred waits until key's compaction no longer waits for space.
// A compaction that failed for want of space is retried by the watcher in
// the background, at once when the failure released a reserve (package space):
// a workload's calls are otherwise sequential, and its truncating save
// must not land in the same instant as that compaction's rename, which
// sessiond does not cover (docs/reliability.md: the save's version of the
// replaced file is kept under <state>/foreign, not merged). So the save
// waits for it, as it follows the workload's own flushes. After a fault
// the retry succeeds (the fault is gone) or gives up; a deferral that
// outlives the wait fails the test.
func (w *world) awaitDeferred(key layout.Key) {
	deadline := time.Now().Add(30 * time.Second)
	for w.m.space.Waiting(key) {
		if time.Now().After(deadline) {
			w.t.Errorf("%s: the compaction deferred for want of space was not retried within 30 s", key)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// foreignWrite is another program's write of key's canonical file, opened
// with flag: the lines content returns, in one write, then fsync. own, the
// lines that are the program's, count as acknowledged once the fsync
// returned.
func (w *world) foreignWrite(what string, key layout.Key, flag int, own []string, content func(fsys.File) ([]string, error)) error {
	b := &sent{key: key, lines: own, caller: foreignCaller}
	w.mu.Lock()
	w.batches = append(w.batches, b)
	w.mu.Unlock()
	return w.do(what+" "+key.String(), func() error {
		f, err := w.fs.OpenFile(crashLayout.TranscriptPath(key), flag, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		lines, err := content(f)
		if err != nil {
			return err
		}
		if _, err := f.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		w.mu.Lock()
		w.ackN++
		b.acked, b.ackN = true, w.ackN
		w.mu.Unlock()
		return nil
	})
}

func (w *world) setFlag(name string) {
	w.mu.Lock()
	w.flags[name] = true
	w.mu.Unlock()
}

func (w *world) flag(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flags[name]
}

// stop ends the Manager as a killed process would: no shutdown compaction.
func (w *world) stop() {
	for _, s := range w.m.reg.live(nil) {
		s.Abort()
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	w.m.Close(expired)
}

// keys lists every session the workload sent entries to, and its probes.
func (w *world) keys() []layout.Key {
	set := map[layout.Key]bool{}
	for _, b := range w.batches {
		set[b.key] = true
	}
	for _, k := range w.wl.probe {
		set[k] = true
	}
	out := make([]layout.Key, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// verify is the whole check of a disk left by a crash: a new Manager
// recovers it, then every invariant is checked, then each probed session
// must take a new entry. It returns the problems found.
func (w *world) verify(v *fstest.CrashFS, probe bool) []string {
	m := newCrashManager(w.t, v, w.wl)
	defer closeQuietly(m)
	var probs []string
	rep, err := m.Recover(w.ctx)
	if err != nil {
		probs = append(probs, fmt.Sprintf("Recover: %v", err))
	}
	for _, f := range rep.Failed {
		probs = append(probs, fmt.Sprintf("Recover failed a session: %v", f))
	}
	if w.wl.settle != nil && len(probs) == 0 {
		probs = append(probs, w.wl.settle(w, m)...)
	}
	probs = append(probs, checkTemps(v)...)
	probs = append(probs, w.checkEntries(v, nil)...)
	if w.wl.check != nil {
		probs = append(probs, w.wl.check(w, v)...)
	}
	if len(probs) > 0 || !probe {
		return probs
	}
	return w.probeSessions(m, v)
}

// probeSessions appends one entry to each probed session, flushes it, and
// checks it is there once with everything acknowledged before.
func (w *world) probeSessions(m *Manager, v *fstest.CrashFS) []string {
	var probs []string
	extra := map[layout.Key]string{}
	for _, k := range w.wl.probe {
		l := line(k, fmt.Sprintf("99999999-0000-4000-8000-%012d", len(extra)), "probe")
		if _, err := m.Append(w.ctx, k, [][]byte{[]byte(l)}); err != nil {
			probs = append(probs, fmt.Sprintf("%s does not work again: append: %v", k, err))
			continue
		}
		if _, err := m.Flush(w.ctx, k); err != nil {
			probs = append(probs, fmt.Sprintf("%s does not work again: flush: %v", k, err))
			continue
		}
		extra[k] = l
	}
	if len(probs) > 0 {
		return probs
	}
	return w.checkEntries(v, extra)
}

func closeQuietly(m *Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Close(ctx)
}

// isTemp reports whether a file name is one of sessiond's temp files.
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") || strings.Contains(name, ".tmp-")
}

// checkTemps finds temp files and quarantined journals after recovery:
// readers of the project folders must never see a temp file, and a crash
// must never make a journal look corrupt.
func checkTemps(v *fstest.CrashFS) []string {
	var probs []string
	for _, root := range []string{crashLayout.ProjectsDir(), crashLayout.JournalDir()} {
		for _, p := range v.Walk(root) {
			base := path.Base(strings.TrimSuffix(p, "/"))
			if isTemp(base) {
				probs = append(probs, "temp file left after recovery: "+p)
			}
			if strings.Contains(base, ".corrupt-") {
				probs = append(probs, "a crash made a journal look corrupt: "+p)
			}
		}
	}
	for _, p := range v.Walk(path.Join(crashLayout.StateDir, "intents")) {
		if strings.HasSuffix(p, ".json") {
			probs = append(probs, "an interrupted delete or restore was not finished by recovery: "+p)
		}
	}
	return probs
}

// checkEntries checks every session's transcript against what was sent:
// whole lines only, each acknowledged entry exactly once, no entry twice,
// each batch all or nothing, each caller's batches in order. extra holds
// one more acknowledged line per session (the probes).
func (w *world) checkEntries(v *fstest.CrashFS, extra map[layout.Key]string) []string {
	var probs []string
	w.mu.Lock()
	batches := append([]*sent(nil), w.batches...)
	w.mu.Unlock()
	for _, key := range w.keys() {
		var data []byte
		var found bool
		if w.wl.locate != nil {
			var p []string
			data, found, p = w.wl.locate(w, v, key)
			probs = append(probs, p...)
		} else {
			var err error
			data, err = v.ReadFile(crashLayout.TranscriptPath(key))
			found = err == nil
		}
		var mine []*sent
		for _, b := range batches {
			if b.key == key {
				mine = append(mine, b)
			}
		}
		if x, ok := extra[key]; ok {
			mine = append(mine, &sent{key: key, lines: []string{x}, caller: -3, acked: true})
		}
		if !found {
			for _, b := range mine {
				if b.acked {
					probs = append(probs, fmt.Sprintf("%s: transcript missing, but %d acknowledged lines were sent to it", key, len(b.lines)))
					break
				}
			}
			continue
		}
		probs = append(probs, w.checkTranscript(key, data, mine)...)
	}
	return probs
}

func (w *world) checkTranscript(key layout.Key, data []byte, mine []*sent) []string {
	var probs []string
	// Lines sessiond never wrote may stand there: the workload's own (setup
	// content, repaired or forked lines) and what a crash left of another
	// program's unacknowledged write.
	var torn []string
	for _, b := range mine {
		if b.caller == foreignCaller && !b.acked {
			torn = append(torn, strings.Join(b.lines, "\n")+"\n")
		}
	}
	allowed := func(l string) bool {
		if w.wl.allowed != nil && w.wl.allowed(w, key, l) {
			return true
		}
		for _, p := range torn {
			if tornPiece(l, p) {
				return true
			}
		}
		return false
	}
	if i := bytes.LastIndexByte(data, '\n'); len(data) > 0 && i != len(data)-1 {
		// Only a line another program tore may end a transcript unfinished.
		if !allowed(string(data[i+1:])) {
			probs = append(probs, fmt.Sprintf("%s: transcript ends in a partial line %q", key, tail(data)))
		}
	}
	known := map[string]int{} // line -> how many batches hold it
	for _, b := range mine {
		for _, l := range b.lines {
			known[l]++
		}
	}
	pos := map[string][]int{}
	for i, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if len(data) == 0 {
			break
		}
		pos[l] = append(pos[l], i)
		if known[l] > 0 || allowed(l) {
			continue
		}
		probs = append(probs, fmt.Sprintf("%s: line %d is no line that was written (torn or mixed?): %.120q", key, i+1, l))
	}
	order := map[int][]*sent{}
	for _, b := range mine {
		own, present := 0, 0
		for _, l := range b.lines {
			n := len(pos[l])
			if n > 1 && !allowed(l) {
				probs = append(probs, fmt.Sprintf("%s: line present %d times: %.120q", key, n, l))
			}
			if b.acked && n == 0 {
				probs = append(probs, fmt.Sprintf("%s: acknowledged line lost: %.120q", key, l))
			}
			if known[l] == 1 {
				own++
				if n > 0 {
					present++
				}
			}
		}
		if present != 0 && present != own {
			probs = append(probs, fmt.Sprintf("%s: batch stored in part: %d of its %d lines (first %.80q)", key, present, own, b.lines[0]))
		}
		if b.acked && b.caller >= 0 {
			order[b.caller] = append(order[b.caller], b)
		}
	}
	for caller, bs := range order {
		sort.Slice(bs, func(i, j int) bool { return bs[i].ackN < bs[j].ackN })
		last := -1
		for _, b := range bs {
			if known[b.lines[0]] != 1 || len(pos[b.lines[0]]) == 0 {
				continue
			}
			if p := pos[b.lines[0]][0]; p < last {
				probs = append(probs, fmt.Sprintf("%s: caller %d's batches out of order at %.80q", key, caller, b.lines[0]))
			} else {
				last = p
			}
		}
	}
	return probs
}

// tornPiece reports whether l is what a power loss can leave of a write
// of p at the start of a line: each byte is p's or a hole's zero.
func tornPiece(l, p string) bool {
	if len(l) > len(p) {
		return false
	}
	for i := range len(l) {
		if l[i] != p[i] && l[i] != 0 {
			return false
		}
	}
	return true
}

func tail(b []byte) []byte {
	if len(b) > 80 {
		return b[len(b)-80:]
	}
	return b
}

// jsonLines reports whether every line of data is a JSON object.
func jsonLines(data []byte) bool {
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if !json.Valid(l) {
			return false
		}
	}
	return true
}

// seedRNG returns the random source of one random crash.
func seedRNG(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

// summary prints a line that shows in `go test -v` output and in the
// test log.
func summary(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	if testing.Verbose() {
		fmt.Printf("    %s: %s\n", t.Name(), msg)
	}
}

// errIs is errors.Is for any of kinds.
func errIs(err error, kinds ...error) bool {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
