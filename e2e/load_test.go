package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// load is a set of clients appending until told to stop or refused.
type load struct {
	cwd      string
	sessions []string
	mu       sync.Mutex
	acked    map[string]bool // entry keys the daemon acknowledged
	sent     map[string]bool // every key ever sent
}

func newLoad(t *testing.T, sessions int) *load {
	l := &load{cwd: t.TempDir(), acked: map[string]bool{}, sent: map[string]bool{}}
	for i := 0; i < sessions; i++ {
		l.sessions = append(l.sessions, uuid.NewString())
	}
	return l
}

// run starts n clients; each appends batches of 1-3 entries of random size
// until stop is closed or the daemon refuses it. It returns when all
// clients are done.
func (l *load) run(t *testing.T, d *daemon, n int, round int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := d.client(client.WithRetry(1, 0))
			defer cl.Close()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(round)))
			s := client.Session{Cwd: l.cwd, ID: l.sessions[c%len(l.sessions)]}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var batch [][]byte
				var keys []string
				for j := 0; j < 1+rng.IntN(3); j++ {
					key := fmt.Sprintf("r%d-c%d-i%d-j%d", round, c, i, j)
					size := 1 + rng.IntN(4<<10)
					if rng.IntN(50) == 0 {
						size = 64<<10 + rng.IntN(192<<10)
					}
					id := `"uuid":"` + uuid.NewString() + `",`
					if rng.IntN(4) == 0 {
						id = "" // entries without uuid must not be duplicated either
					}
					batch = append(batch, []byte(`{"type":"user",`+id+`"k":"`+key+`","pad":"`+strings.Repeat("x", size)+`"}`))
					keys = append(keys, key)
				}
				l.mu.Lock()
				for _, k := range keys {
					l.sent[k] = true
				}
				l.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := cl.Append(ctx, s, batch...)
				cancel()
				if err != nil {
					return
				}
				l.mu.Lock()
				for _, k := range keys {
					l.acked[k] = true
				}
				l.mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
}

// verify reads the canonical files: every line whole, every acknowledged
// entry present exactly once, nothing present twice.
func (l *load) verify(t *testing.T, d *daemon) {
	t.Helper()
	pk, err := layout.ProjectKeyFromCwd(l.cwd)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, sid := range l.sessions {
		f, err := os.Open(d.transcript(pk, sid))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for n := 1; ; n++ {
			line, err := r.ReadBytes('\n')
			if len(line) == 0 {
				break
			}
			if line[len(line)-1] != '\n' {
				t.Fatalf("%s: torn last line %d", sid, n)
			}
			var v struct{ K string }
			if err := json.Unmarshal(line, &v); err != nil || v.K == "" {
				t.Fatalf("%s line %d is not a whole entry: %v", sid, n, err)
			}
			seen[v.K]++
			if err != nil {
				break
			}
		}
		f.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, dup := 0, 0
	for k := range l.acked {
		if seen[k] == 0 {
			lost++
		}
	}
	for k, n := range seen {
		if n > 1 {
			dup++
		}
		if !l.sent[k] {
			t.Fatalf("entry %s was never sent", k)
		}
	}
	t.Logf("acknowledged %d, on disk %d, lost %d, duplicated %d", len(l.acked), len(seen), lost, dup)
	if lost > 0 || dup > 0 {
		t.Fatalf("lost %d acknowledged entries, duplicated %d", lost, dup)
	}
	if len(l.acked) == 0 {
		t.Fatal("no entry was acknowledged: the load did not run")
	}
}

// TestSigtermUnderLoad: SIGTERM while 32 clients append and one follows:
// sessiond exits 0 in time and every acknowledged entry is in the
// canonical files, without any recovery.
func TestSigtermUnderLoad(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--shutdown-timeout", "20s")
	d.start()
	l := newLoad(t, 4)
	// A follower must not hold up the exit.
	fc := d.client()
	defer fc.Close()
	followErr := make(chan error, 1)
	go func() {
		c := fc
		s := client.Session{Cwd: l.cwd, ID: l.sessions[0]}
		for { // wait until the session exists
			if _, err := c.Info(context.Background(), s); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		followErr <- c.Follow(context.Background(), s, client.ReadOptions{}, func(*sessiondv1.Entry) error { return nil })
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { l.run(t, d, 32, 0, stop); close(done) }()
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	code := d.stop(syscall.SIGTERM, 30*time.Second)
	took := time.Since(start)
	close(stop)
	<-done
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, d.LogTail(logTail))
	}
	t.Logf("drained in %v", took)
	select {
	case err := <-followErr:
		if err == nil {
			t.Fatal("follow stream ended without an error; it should report the shutdown")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow stream still open after the daemon exited")
	}
	l.verify(t, d)
}

// TestKill9UnderLoad: kill -9 at a random moment while 32 clients append,
// restart, and check every acknowledged entry is there exactly once with no
// torn line. Several cycles on the same folders.
func TestKill9UnderLoad(t *testing.T) {
	t.Parallel()
	d := newDaemon(t)
	l := newLoad(t, 4)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for cycle := 0; cycle < 3; cycle++ {
		d.start()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { l.run(t, d, 32, cycle, stop); close(done) }()
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		d.stop(syscall.SIGKILL, 10*time.Second)
		close(stop)
		<-done
		// Restart: recovery checks the journals before serving and
		// replays them into the canonical files in the background.
		d.start()
		d.waitReplayed()
		l.verify(t, d)
		if code := d.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
		l.verify(t, d)
	}
	entries, _ := filepath.Glob(filepath.Join(d.root, "projects", "*", "*.tmp"))
	if len(entries) > 0 {
		t.Fatalf("temp files left: %v", entries)
	}
}

// TestDrainEndsIdleAppendStreams: the Go client keeps AppendStream streams
// open between appends. SIGTERM must end them at once (not wait out
// --shutdown-timeout), and an append with a uuid made on the client across
// the restart is stored exactly once.
func TestDrainEndsIdleAppendStreams(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--shutdown-timeout", "60s")
	d.start()
	c := d.client(client.WithRetry(12, 100*time.Millisecond))
	defer c.Close()
	ctx := context.Background()
	s := client.Session{Cwd: t.TempDir(), ID: uuid.NewString()}
	// Several idle streams in the client's pool.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Append(ctx, s, []byte(`{"type":"user","uuid":"`+uuid.NewString()+`"}`)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	if code := d.stop(syscall.SIGTERM, 50*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, d.LogTail(logTail))
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("drain took %v: idle append streams held it up to the shutdown timeout", took)
	}
	d.start()
	id := uuid.NewString()
	resp, err := c.Append(ctx, s, []byte(`{"type":"user","uuid":"`+id+`"}`))
	if err != nil {
		t.Fatalf("append on the old client after a restart: %v", err)
	}
	if resp.GetEntries() != 5 {
		t.Fatalf("session holds %d entries, want 5", resp.GetEntries())
	}
}
