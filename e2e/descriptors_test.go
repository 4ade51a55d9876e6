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
	"github.com/sessiond/sessiond/internal/layout"
)

// Bounds of TestDescriptorsAcrossCompactions. While compactions run, a
// replaced transcript nobody else opened stays open only inside its
// compaction (at most the default --compact-parallel, 8, at once); one
// an agent had open may be held a while for it (at most 16 for the whole
// daemon); once idle, none. The daemon's own descriptors (journal,
// ledger, sockets, gRPC) stay few whatever the number of live sessions.
const (
	inFlightBound = 8
	heldBound     = 16
	idleFDBound   = 100
)

// TestDescriptorsAcrossCompactions: 300 live sessions appended to at
// random (compacted within 100 ms, so each is compacted many times),
// a few of them also appended to by an agent writing the transcript
// itself (open, append, close) to exercise the replaced files held for
// it. Replaced transcripts open ("(deleted)") stay under the bound of
// what compactions in flight and held files may hold at every look, and
// once the load is over none is open and the daemon holds at most
// idleFDBound descriptors, with all 300 sessions still live.
func TestDescriptorsAcrossCompactions(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "100ms", "--compact-within", "100ms", "--idle-retire", "1h")
	d.start()
	c := d.client()
	defer c.Close()
	cwd := t.TempDir()
	pk, _ := layout.ProjectKeyFromCwd(cwd)
	sessions := make([]client.Session, 300)
	for i := range sessions {
		sessions[i] = client.Session{Cwd: cwd, ID: uuid.NewString()}
	}
	ctx := context.Background()
	line := func(sid, who string) string {
		return fmt.Sprintf(`{"type":"user","uuid":%q,"sessionId":%q,"message":{"role":"user","content":"%s %s"}}`,
			uuid.NewString(), sid, who, strings.Repeat("x", 200))
	}
	for _, s := range sessions {
		if _, err := c.Append(ctx, s, []byte(line(s.ID, "first"))); err != nil {
			t.Fatal(err)
		}
	}
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 281))
			for time.Now().Before(stop) {
				s := sessions[rng.IntN(len(sessions))]
				if _, err := c.Append(ctx, s, []byte(line(s.ID, "sessiond"))); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		}()
	}
	// The agent: the first 20 sessions' transcripts, each append a
	// descriptor of its own, opened and closed at once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 281))
		for time.Now().Before(stop) {
			s := sessions[rng.IntN(20)]
			f, err := os.OpenFile(filepath.Join(d.root, "projects", pk, s.ID+".jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			_, err = f.WriteString(line(s.ID, "agent") + "\n")
			f.Close()
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
		}
	}()
	agents := map[string]bool{}
	for _, s := range sessions[:20] {
		agents[s.ID] = true
	}
	peak, peakDeleted, looks := 0, 0, 0
	for time.Now().Before(stop) {
		del, n := heldTranscripts(t, d.Pid())
		peak, peakDeleted, looks = max(peak, n), max(peakDeleted, len(del)), looks+1
		var alone []string
		for _, p := range del {
			if !agents[strings.TrimSuffix(filepath.Base(p), ".jsonl (deleted)")] {
				alone = append(alone, p)
			}
		}
		if len(del) > inFlightBound+heldBound || len(alone) > inFlightBound {
			t.Errorf("the daemon holds %d replaced transcripts open (%d of sessions no agent opens), over %d (%d), e.g. %s",
				len(del), len(alone), inFlightBound+heldBound, inFlightBound, del[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetActiveSessions() < 290 || st.GetCompactions() < 300 {
		t.Fatalf("%d live sessions and %d compactions: the load did not make what the test needs", st.GetActiveSessions(), st.GetCompactions())
	}
	// Idle: each session's last idle compaction (100 ms) and the files
	// held for the agent (200 ms) are over well within a second.
	time.Sleep(time.Second)
	idlePeak := 0
	for range 20 {
		del, n := heldTranscripts(t, d.Pid())
		idlePeak = max(idlePeak, n)
		if len(del) > 0 {
			t.Fatalf("idle, the daemon still holds %d replaced transcripts open, e.g. %s", len(del), del[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d live sessions, %d compactions; descriptors over %d looks under load: peak %d, replaced transcripts at the peak %d; idle: at most %d",
		st.GetActiveSessions(), st.GetCompactions(), looks, peak, peakDeleted, idlePeak)
	if idlePeak > idleFDBound {
		t.Errorf("idle with %d live sessions, the daemon holds %d descriptors, over %d", st.GetActiveSessions(), idlePeak, idleFDBound)
	}
}
