package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/client"
)

// heldTranscripts lists the daemon's descriptors of transcripts a
// compaction already replaced ("(deleted)").
func heldTranscripts(t *testing.T, pid int) (deleted []string, total int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(target, ".jsonl") && strings.HasSuffix(target, "(deleted)") {
			deleted = append(deleted, target)
		}
	}
	return deleted, len(ents)
}

// TestNoReplacedTranscriptHeld: 300 live sessions appended to at random
// times, each compacted many times (idle compaction every 100 ms). At
// every look, the daemon holds few descriptors (not one per live
// session), and once the load stops no replaced transcript stays open:
// a compaction lets the file it replaced go within a fraction of a second, even while
// the session lives on.
func TestNoReplacedTranscriptHeld(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "100ms", "--compact-within", "100ms", "--idle-retire", "1h")
	d.start()
	c := d.client()
	defer c.Close()
	baseline := openFDs(t, d.Pid())
	cwd := t.TempDir()
	sessions := make([]client.Session, 300)
	for i := range sessions {
		sessions[i] = client.Session{Cwd: cwd, ID: uuid.NewString()}
	}
	ctx := context.Background()
	// Every session is written once first, so all of them are live
	// whatever the machine's speed; then at random for the duration.
	for i, s := range sessions {
		e := fmt.Sprintf(`{"type":"user","uuid":"%s","n":%d}`, uuid.NewString(), i)
		if _, err := c.Append(ctx, s, []byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	peak, peakDeleted := 0, 0
	var mu sync.Mutex
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 28))
			for time.Now().Before(stop) {
				s := sessions[rng.IntN(len(sessions))]
				e := fmt.Sprintf(`{"type":"user","uuid":"%s","pad":"%s"}`, uuid.NewString(), strings.Repeat("x", 200))
				if _, err := c.Append(ctx, s, []byte(e)); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		}(w)
	}
	go func() {
		for time.Now().Before(stop) {
			del, n := heldTranscripts(t, d.Pid())
			mu.Lock()
			peak, peakDeleted = max(peak, n), max(peakDeleted, len(del))
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetActiveSessions() < 290 || st.GetCompactions() < 150 {
		t.Fatalf("%d live sessions and %d compactions: the load did not make what the test needs", st.GetActiveSessions(), st.GetCompactions())
	}
	mu.Lock()
	t.Logf("%d live sessions, %d compactions; descriptors: baseline %d, peak %d, replaced transcripts held at the peak %d",
		st.GetActiveSessions(), st.GetCompactions(), baseline, peak, peakDeleted)
	if peak > baseline+150 {
		t.Errorf("the daemon held %d descriptors with %d live sessions (baseline %d): one per live session", peak, st.GetActiveSessions(), baseline)
	}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		del, _ := heldTranscripts(t, d.Pid())
		if len(del) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the load, the daemon still holds %d replaced transcripts open, e.g. %s", len(del), del[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
