//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// mountTmpfs mounts a tmpfs of the given size (a mount option such as
// "8m") on a new folder and unmounts it when the test ends (after the
// daemon started later is gone: cleanups run last-in first-out). Without
// the right to mount (not root, no CAP_SYS_ADMIN) the test is skipped,
// except under CI, which runs as root: there it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		why := fmt.Sprintf("cannot mount a %s tmpfs on %s (a full-disk test needs root or CAP_SYS_ADMIN): %v", size, dir, err)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; CI is set and CI runs as root, so this must work", why)
		}
		t.Skip(why)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			// Something still holds a file open there: detach it so the
			// temp folder can go anyway.
			if err2 := unix.Unmount(dir, unix.MNT_DETACH); err2 != nil {
				t.Errorf("unmount %s: %v, then %v", dir, err, err2)
			}
		}
	})
	return dir
}

// freeBytes is what an unprivileged writer may still put on dir's
// filesystem.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * int64(s.Bsize)
}

// writeFiller creates path with up to size bytes (stopping quietly when
// the disk is full) and returns how many it holds.
func writeFiller(t *testing.T, path string, size int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for n < size {
		b := chunk
		if size-n < int64(len(b)) {
			b = b[:size-n]
		}
		w, err := f.Write(b)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// diskEntry is one entry carrying key in "k", about pad bytes long.
func diskEntry(key string, withUUID bool, pad int) []byte {
	id := ""
	if withUUID {
		id = `"uuid":"` + uuid.NewString() + `",`
	}
	return []byte(`{"type":"user",` + id + `"k":"` + key + `","message":{"role":"user","content":"` + strings.Repeat("z", pad) + `"}}`)
}

// diskLedger is the test's own record of what the daemon acknowledged and
// what it refused.
type diskLedger struct {
	mu      sync.Mutex
	sent    map[string]bool
	acked   map[string]string // key -> session id
	refused map[string]error  // key -> the error its append got
	errs    []error           // every refusal, in order
	slowest time.Duration     // the longest append
}

func newDiskLedger() *diskLedger {
	return &diskLedger{sent: map[string]bool{}, acked: map[string]string{}, refused: map[string]error{}}
}

// append sends one batch and records its fate.
func (l *diskLedger) append(c *client.Client, s client.Session, keys []string, entries [][]byte) error {
	l.mu.Lock()
	for _, k := range keys {
		l.sent[k] = true
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := c.Append(ctx, s, entries...)
	took := time.Since(t0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slowest = max(l.slowest, took)
	if err != nil {
		l.errs = append(l.errs, err)
		for _, k := range keys {
			l.refused[k] = err
		}
		return err
	}
	for _, k := range keys {
		l.acked[k] = s.ID
	}
	return nil
}

// counts parses JSONL content: every line must be a whole JSON object
// carrying a key that was sent; it returns how often each key appears.
func (l *diskLedger) counts(t *testing.T, what string, data []byte) map[string]int {
	t.Helper()
	seen := map[string]int{}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s: the last line is torn (no newline): %q", what, data[max(0, len(data)-80):])
	}
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(line) == 0 && len(data) == 0 {
			break
		}
		var v struct {
			K string `json:"k"`
		}
		if err := json.Unmarshal(line, &v); err != nil || v.K == "" {
			t.Errorf("%s line %d is not a whole entry (%v): %.120q", what, i+1, err, line)
			continue
		}
		l.mu.Lock()
		sent := l.sent[v.K]
		l.mu.Unlock()
		if !sent {
			t.Errorf("%s line %d holds %s, which was never sent", what, i+1, v.K)
		}
		seen[v.K]++
	}
	return seen
}

// checkExactlyOnce requires every key acknowledged for sid exactly once in
// seen and no key twice. It returns the keys that were refused and are
// there all the same.
func (l *diskLedger) checkExactlyOnce(t *testing.T, what, sid string, seen map[string]int) (phantoms []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, dup := 0, 0
	for k, s := range l.acked {
		if s != sid {
			continue
		}
		if seen[k] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("%s: acknowledged entry %s is missing", what, k)
			}
		}
	}
	for k, n := range seen {
		if n > 1 {
			dup++
			if dup <= 5 {
				t.Errorf("%s: entry %s is there %d times", what, k, n)
			}
		}
		if _, ok := l.refused[k]; ok {
			if _, acked := l.acked[k]; !acked {
				phantoms = append(phantoms, k)
			}
		}
	}
	if lost > 0 || dup > 0 {
		t.Errorf("%s: %d acknowledged entries lost, %d duplicated", what, lost, dup)
	}
	sort.Strings(phantoms)
	return phantoms
}

// freeAndFlush removes filler and flushes s: the flush must succeed
// without a restart (the daemon is still pid), and the canonical file
// must then hold every acknowledged entry exactly once.
func (l *diskLedger) freeAndFlush(ctx context.Context, t *testing.T, d *daemon, c *client.Client, s client.Session, pid int, filler, canon string) {
	t.Helper()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Flush(ctx, s); err != nil {
		t.Fatalf("flush after space was freed: %v", err)
	}
	d.requireSameProcess(t, pid)
	data, err := os.ReadFile(canon)
	if err != nil {
		t.Fatal(err)
	}
	seen := l.counts(t, "canonical file after the flush", data)
	l.checkExactlyOnce(t, "canonical file after the flush", s.ID, seen)
	if want := len(l.acked); len(seen) != want {
		t.Errorf("the canonical file holds %d entries, want %d", len(seen), want)
	}
}

// readViaDaemon reads a session's whole content through sessiond (the
// canonical file plus the journaled entries).
func readViaDaemon(t *testing.T, c *client.Client, s client.Session) []byte {
	t.Helper()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Read(ctx, s, client.ReadOptions{}, func(e *sessiondv1.Entry) error {
		buf.Write(e.GetData())
		buf.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatalf("read %s through sessiond: %v", s.ID, err)
	}
	return buf.Bytes()
}

// diskFullMessage reports whether a refusal says, in words, that the disk
// is full.
func diskFullMessage(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "no space left on device") || strings.Contains(m, "disk is full") || strings.Contains(m, "disk full")
}

// checkDiskFullError requires err to be ResourceExhausted with a message
// that says the disk is full.
func checkDiskFullError(t *testing.T, what string, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted {
		t.Errorf("%s: got %v, want ResourceExhausted: %s", what, st.Code(), st.Message())
		return
	}
	if !diskFullMessage(st.Message()) {
		t.Errorf("%s: the ResourceExhausted message does not say the disk is full: %q", what, st.Message())
	}
}

func (d *daemon) requireSameProcess(t *testing.T, pid int) {
	t.Helper()
	select {
	case <-d.Exited():
		t.Fatalf("sessiond exited (%v); it must ride out a full disk:\n%s", d.Err(), d.LogTail(logTail))
	default:
	}
	if d.Pid() != pid {
		t.Fatalf("sessiond was restarted (pid %d, was %d)", d.Pid(), pid)
	}
}

// diskDaemon starts sessiond with its transcripts root and state folder on
// disk (the socket stays elsewhere).
//
// The sizes that follow the disk are given as their large-disk values
// (a test's own args, after them, win): these tests were calibrated with
// no ballast on a few-MiB disk and 64 MiB segments, and what they prove
// does not depend on the sizes. TestSmallDiskOnDefaults covers the sizes
// a small disk gets by default.
func diskDaemon(t *testing.T, disk string, args ...string) *daemon {
	t.Helper()
	fixed := []string{"--ballast-size", "67108864", "--journal-segment-size", "67108864",
		"--journal-max-size", "536870912", "--journal-retention-size", "1073741824"}
	d := newDaemon(t, append(fixed, args...)...)
	d.root = filepath.Join(disk, "claude")
	d.state = filepath.Join(disk, "state")
	d.start()
	return d
}

// TestFullDiskAppend fills a real 8 MiB tmpfs holding both the transcripts
// root and the state folder while concurrent clients append: appends must
// then fail with ResourceExhausted and a message saying the disk is full;
// nothing acknowledged may be lost (read back through sessiond while the
// disk is full, and from the canonical files after space is freed); once a
// filler file on the same disk is deleted, appends succeed again without
// restarting sessiond, and after a flush every acknowledged entry is in
// its canonical file exactly once. An entry whose append was refused must
// not be stored either: a client retrying it after freeing space (entries
// without uuid are not deduplicated) would store it twice.
func TestFullDiskAppend(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "8m")
	d := diskDaemon(t, disk)
	pid := d.Pid()
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, 4<<20)

	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	sessions := []client.Session{{Cwd: cwd, ID: uuid.NewString()}, {Cwd: cwd, ID: uuid.NewString()}}
	l := newDiskLedger()

	// Four appenders, two per session, until each has been refused 5
	// times: the disk fills under concurrent group commits and
	// compactions.
	var wg sync.WaitGroup
	for a := 0; a < 4; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(a), 42))
			s := sessions[a%2]
			refusals := 0
			for i := 0; i < 3000 && refusals < 5; i++ {
				var keys []string
				var entries [][]byte
				for j := 0; j < 1+rng.IntN(3); j++ {
					k := fmt.Sprintf("a%d-%d-%d", a, i, j)
					keys = append(keys, k)
					entries = append(entries, diskEntry(k, rng.IntN(4) > 0, 4<<10+rng.IntN(36<<10)))
				}
				if err := l.append(c, s, keys, entries); err != nil {
					refusals++
				}
			}
		}()
	}
	wg.Wait()
	if len(l.errs) == 0 {
		t.Fatal("the disk never filled: no append was refused")
	}
	t.Logf("acknowledged %d entries, %d appends refused, slowest append %v; free on the tmpfs: %d bytes", len(l.acked), len(l.errs), l.slowest, freeBytes(t, disk))
	byCode := map[codes.Code]int{}
	for _, err := range l.errs {
		byCode[status.Code(err)]++
	}
	t.Logf("refusals by code: %v; first: %v", byCode, l.errs[0])
	for i, err := range l.errs {
		if i >= 8 {
			break
		}
		checkDiskFullError(t, fmt.Sprintf("refused append %d", i+1), err)
	}
	for _, err := range l.errs[min(8, len(l.errs)):] {
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("a refused append got %v, want ResourceExhausted: %v", status.Code(err), err)
			break
		}
	}
	d.requireSameProcess(t, pid)

	// While the disk is full, everything acknowledged reads back through
	// sessiond exactly once.
	for _, s := range sessions {
		seen := l.counts(t, "read through sessiond while the disk is full", readViaDaemon(t, c, s))
		l.checkExactlyOnce(t, "read through sessiond while the disk is full, session "+s.ID, s.ID, seen)
	}

	// Free space: appends work again, same process.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i, s := range sessions {
		k := fmt.Sprintf("after-free-%d", i)
		err := l.append(c, s, []string{k}, [][]byte{diskEntry(k, i == 0, 100)})
		if err != nil {
			t.Errorf("the first append to session %s after space was freed failed: %v", s.ID, err)
			recovered := false
			for try := 0; try < 20 && !recovered; try++ {
				time.Sleep(100 * time.Millisecond)
				k := fmt.Sprintf("after-free-%d-retry-%d", i, try)
				recovered = l.append(c, s, []string{k}, [][]byte{diskEntry(k, true, 100)}) == nil
			}
			t.Errorf("appends to session %s recovered after more attempts: %v", s.ID, recovered)
		}
	}
	d.requireSameProcess(t, pid)

	// Flush: every acknowledged entry in its canonical file exactly once,
	// and nothing that was refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var phantoms []string
	for _, s := range sessions {
		if _, err := c.Flush(ctx, s); err != nil {
			t.Errorf("flush %s after space was freed: %v", s.ID, err)
			continue
		}
		data, err := os.ReadFile(d.transcript(pk, s.ID))
		if err != nil {
			t.Fatal(err)
		}
		seen := l.counts(t, "canonical file "+s.ID, data)
		phantoms = append(phantoms, l.checkExactlyOnce(t, "canonical file "+s.ID, s.ID, seen)...)
	}
	if len(phantoms) > 0 {
		l.mu.Lock()
		t.Errorf("%d entries whose append was refused are stored all the same (a client retrying them would store them twice), e.g. %s, refused with: %v",
			len(phantoms), phantoms[0], l.refused[phantoms[0]])
		l.mu.Unlock()
	}
	d.requireSameProcess(t, pid)
}

// TestFullDiskDuringCompaction: the journal fits on the disk but the
// compaction's temp copy (canonical file plus journaled entries) does not.
// The flush must fail with ResourceExhausted, leave the canonical file and
// the journaled entries as they were (show still serves every entry,
// appends still work), and succeed once space is freed.
func TestFullDiskDuringCompaction(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "8m")
	// No idle compaction or retirement: only the flushes below compact.
	d := diskDaemon(t, disk, "--idle-compact", "1h", "--idle-retire", "1h")
	pid := d.Pid()
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	canon := d.transcript(pk, s.ID)
	l := newDiskLedger()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	add := func(prefix string, n, pad int) {
		t.Helper()
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("%s-%d", prefix, i)
			if err := l.append(c, s, []string{k}, [][]byte{diskEntry(k, i%3 != 0, pad)}); err != nil {
				t.Fatalf("append %s: %v", k, err)
			}
		}
	}

	// A canonical file of about 1.5 MiB...
	add("base", 48, 32<<10)
	if _, err := c.Flush(ctx, s); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(canon)
	if err != nil {
		t.Fatal(err)
	}
	base := fi.Size()
	// ...and about 600 KiB journaled, under the 1 MiB floor of a
	// size-triggered compaction.
	add("journaled", 20, 30<<10)
	if fi, err := os.Stat(canon); err != nil || fi.Size() != base {
		t.Fatalf("the canonical file changed before the flush (%v, %v)", fi.Size(), err)
	}
	need := base + 20*(30<<10+100)
	free := freeBytes(t, disk)
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, free-need/2)
	t.Logf("canonical %d bytes, journaled about %d; the temp copy needs about %d, free now %d", base, need-base, need, freeBytes(t, disk))
	if freeBytes(t, disk) >= need {
		t.Fatalf("could not leave less free space (%d) than the compaction needs (%d)", freeBytes(t, disk), need)
	}

	_, err = c.Flush(ctx, s)
	if err == nil {
		t.Fatal("the flush succeeded with less free space than the temp copy needs")
	}
	checkDiskFullError(t, "flush on a full disk", err)
	d.requireSameProcess(t, pid)
	if fi, err := os.Stat(canon); err != nil || fi.Size() != base {
		t.Errorf("the failed compaction changed the canonical file (%v, %v)", fi.Size(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(canon), ".*.tmp")); len(left) > 0 {
		t.Errorf("the failed compaction left temp files: %v", left)
	}

	// show (through sessiond) still serves every entry exactly once.
	out, errOut, code := d.ctl("", "show", s.ID)
	if code != 0 {
		t.Fatalf("show after the failed compaction: exit %d: %s", code, errOut)
	}
	seen := l.counts(t, "show after the failed compaction", []byte(out))
	l.checkExactlyOnce(t, "show after the failed compaction", s.ID, seen)
	if len(seen) != 68 {
		t.Errorf("show served %d entries, want 68", len(seen))
	}

	// The writer survived: a small append (the journal has room) works.
	if err := l.append(c, s, []string{"small"}, [][]byte{diskEntry("small", true, 10)}); err != nil {
		t.Errorf("a small append after the failed compaction failed: %v", err)
	}

	// Free space: the flush now succeeds, without a restart.
	l.freeAndFlush(ctx, t, d, c, s, pid, filler, canon)
}

// TestFullDiskRefusedAppendNotStored: many clients append at once (so the
// writer commits their batches as one group) to a disk with room for only
// part of the group. An append answered ResourceExhausted must not be
// stored: a client retries it once space is freed, and an entry without
// uuid that was stored all the same would then be there twice. Which
// appends share a group depends on timing, so the experiment runs several
// rounds, each on a new session.
func TestFullDiskRefusedAppendNotStored(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "16m")
	d := diskDaemon(t, disk)
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	for round := 1; round <= 5 && !t.Failed(); round++ {
		refusedAppendRound(t, d, c, disk, round)
	}
}

func refusedAppendRound(t *testing.T, d *daemon, c *client.Client, disk string, round int) {
	t.Helper()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	l := newDiskLedger()
	// Two appends one after the other: the log collects the segments
	// the previous round's flush freed after answering a commit, before
	// its next one, so after the second they are retained, and counted
	// below (a collection during the round freed room the count missed,
	// and round 5 of a CI run had nothing refused).
	for _, k := range []string{"first", "second"} {
		if err := l.append(c, s, []string{k}, [][]byte{diskEntry(k, false, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	// The daemon gives room back by itself once the disk is full: the
	// log's retained segments (kept so repair can put back entries
	// another program drops) are removed then, by design, and so are its
	// spares. Earlier rounds' segments are retained, so the group must
	// overflow that room too, or it all fits and nothing is refused.
	giveBack := journalGiveBack(t, filepath.Join(d.state, "journal"))
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, freeBytes(t, disk)-(200<<10))

	const size = 16 << 10
	n := 48 + int(giveBack/size)
	t.Logf("round %d: %d appends at once (the log may give back %d bytes)", round, n, giveBack)
	entries := make(map[string][]byte, n)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("r%d-%03d", round, i)
		entries[k] = diskEntry(k, false, size)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l.append(c, s, []string{k}, [][]byte{e})
		}()
	}
	close(start)
	wg.Wait()
	l.mu.Lock()
	var refused []string
	for k := range l.refused {
		refused = append(refused, k)
	}
	l.mu.Unlock()
	sort.Strings(refused)
	t.Logf("round %d: %d of %d concurrent appends refused", round, len(refused), n)
	if len(refused) == 0 {
		t.Fatalf("round %d: the disk did not fill: nothing was refused", round)
	}
	for _, k := range refused {
		checkDiskFullError(t, "refused append "+k, l.refused[k])
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// What sessiond serves now must not hold any refused entry.
	what := fmt.Sprintf("round %d: read through sessiond after space was freed", round)
	seen := l.counts(t, what, readViaDaemon(t, c, s))
	if ph := l.checkExactlyOnce(t, what, s.ID, seen); len(ph) > 0 {
		t.Errorf("round %d: %d of the %d refused appends were stored all the same: %v", round, len(ph), len(refused), ph)
	}

	// A client retries what was refused; each entry must end up stored
	// exactly once.
	for _, k := range refused {
		if err := l.append(c, s, []string{k}, [][]byte{entries[k]}); err != nil {
			t.Fatalf("retry of %s after space was freed: %v", k, err)
		}
	}
	if _, err := c.Flush(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(d.transcript(pk, s.ID))
	if err != nil {
		t.Fatal(err)
	}
	what = fmt.Sprintf("round %d: canonical file after the retries", round)
	seen = l.counts(t, what, data)
	l.checkExactlyOnce(t, what, s.ID, seen)
	if len(seen) != n+2 {
		t.Errorf("%s holds %d distinct entries, want %d", what, len(seen), n+2)
	}
}

// journalGiveBack is the disk space the files the log removes on a full disk
// take in dir: its retained segments and its spares.
func journalGiveBack(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".wal-retained") && !strings.HasSuffix(e.Name(), ".wal-spare") {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// TestFullDiskFork: a fork writes a whole new transcript (a temp copy
// linked into place). On a full disk it must fail with ResourceExhausted
// and a message saying so, leave no session behind, and the very same
// fork must succeed once space is freed.
func TestFullDiskFork(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "8m")
	d := diskDaemon(t, disk)
	c := d.client(client.WithRetry(1, 0))
	defer c.Close()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	l := newDiskLedger()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("e%d", i)
		if err := l.append(c, s, []string{k}, [][]byte{diskEntry(k, true, 16<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Flush(ctx, s); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, freeBytes(t, disk))

	forkID := uuid.NewString()
	fork := client.Session{Cwd: cwd, ID: forkID}
	_, err = c.Fork(ctx, s, "", "", forkID)
	if err == nil {
		t.Fatal("a fork of 320 KiB succeeded on a full disk")
	}
	checkDiskFullError(t, "fork on a full disk", err)
	if _, err := os.Lstat(d.transcript(pk, forkID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed fork left a transcript behind (%v)", err)
	}
	if _, err := c.Info(ctx, fork); status.Code(err) != codes.NotFound {
		t.Errorf("after the failed fork, info of the new id answers %v, want NotFound", err)
	}
	seen := l.counts(t, "source read through sessiond on a full disk", readViaDaemon(t, c, s))
	l.checkExactlyOnce(t, "source read through sessiond on a full disk", s.ID, seen)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, s, "", "", forkID); err != nil {
		t.Fatalf("the same fork after space was freed: %v", err)
	}
	data, err := os.ReadFile(d.transcript(pk, forkID))
	if err != nil {
		t.Fatal(err)
	}
	// 20 entries plus the custom-title line forkSession appends.
	if n := bytes.Count(data, []byte("\n")); n != 21 || !bytes.Contains(data, []byte(`{"type":"custom-title"`)) {
		t.Errorf("the fork holds %d lines, want the 20 entries and its custom-title line", n)
	}
}

// TestFullDiskAtStart: sessiond is killed with entries only in its
// journal, and comes back on a disk too full for recovery to compact
// them. It must still start and serve every acknowledged entry, show the
// compaction as deferred (not as a failed recovery), take appends, and
// put everything in the canonical file once space is freed, without a
// restart.
func TestFullDiskAtStart(t *testing.T) {
	t.Parallel()
	disk := mountTmpfs(t, "8m")
	d := diskDaemon(t, disk, "--idle-compact", "1h", "--idle-retire", "1h")
	c := d.client(client.WithRetry(1, 0))
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	s := client.Session{Cwd: cwd, ID: uuid.NewString()}
	l := newDiskLedger()
	for i := 0; i < 40; i++ {
		k := fmt.Sprintf("j%d", i)
		if err := l.append(c, s, []string{k}, [][]byte{diskEntry(k, i%2 == 0, 16<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	d.stop(syscall.SIGKILL, 10*time.Second)
	if _, err := os.Stat(d.transcript(pk, s.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the entries reached the canonical file before the kill (%v); the test needs them journaled only", err)
	}
	filler := filepath.Join(disk, "filler")
	writeFiller(t, filler, freeBytes(t, disk)-(100<<10))

	d.start() // fails the test if sessiond does not come up
	// The replay runs once serving: wait for its verdict (it cannot
	// compact on this disk) before looking at status.
	d.waitReplayed()
	pid := d.Pid()
	c = d.client(client.WithRetry(1, 0))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A full disk is no failure of recovery: the session's compaction
	// waits for room, shown as deferred, and no session shows RECOVERY
	// FAILED.
	if len(st.GetRecoveryErrors()) != 0 {
		t.Errorf("status reports recovery errors at start on a full disk: %q; want the compaction deferred instead", st.GetRecoveryErrors())
	}
	if len(st.GetDisk().GetDeferred()) != 1 || st.GetDisk().GetLagSessions() != 1 {
		t.Errorf("status shows %d deferred compactions and %d lagging sessions at start, want the session's replay deferred",
			len(st.GetDisk().GetDeferred()), st.GetDisk().GetLagSessions())
	}
	seen := l.counts(t, "read through sessiond after a start on a full disk", readViaDaemon(t, c, s))
	l.checkExactlyOnce(t, "read through sessiond after a start on a full disk", s.ID, seen)
	if len(seen) != 40 {
		t.Errorf("read %d entries, want 40", len(seen))
	}
	if err := l.append(c, s, []string{"small"}, [][]byte{diskEntry("small", true, 10)}); err != nil {
		t.Errorf("a small append on the nearly full disk failed: %v", err)
	}

	l.freeAndFlush(ctx, t, d, c, s, pid, filler, d.transcript(pk, s.ID))
	// Caught up without a restart: nothing deferred or lagging, and
	// nothing ever reported as failed.
	after, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.GetRecoveryErrors()) > 0 || after.GetPastRecoveryFailures() != 0 {
		t.Errorf("after the flush, status reports recovery errors %q (past %d)", after.GetRecoveryErrors(), after.GetPastRecoveryFailures())
	}
	if len(after.GetDisk().GetDeferred()) != 0 {
		t.Errorf("after the flush, %d compactions are still deferred", len(after.GetDisk().GetDeferred()))
	}
	if out, _, _ := d.ctl("", "status"); strings.Contains(out, "RECOVERY FAILED") {
		t.Errorf("sessionctl status after the catch-up:\n%s", out)
	}
}
