package writer

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/layout"
)

// recoverFixture builds, once per process, a state folder of sessions
// whose entries sit in their journals only (nothing compacted), as a
// SIGKILL leaves it. Each benchmark iteration recovers a copy.
func recoverFixture(b *testing.B, sessions, perSession int) (string, int64) {
	b.Helper()
	dir := b.TempDir()
	lay := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
	m, err := New(Config{Layout: lay, IdleCompact: time.Hour, IdleRetire: time.Hour, MinCompactBytes: 1 << 40, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	text := make([]byte, 64<<10)
	for i := range text {
		text[i] = 'a' + byte(rng.Intn(26))
	}
	var total int64
	for s := 0; s < sessions; s++ {
		key := layout.Key{ProjectKey: project, SessionID: uuid.NewString()}
		var n int
		parent := "null"
		for n < perSession {
			var batch [][]byte
			for len(batch) < 16 && n < perSession {
				id := uuid.NewString()
				size := 200 + rng.Intn(12<<10)
				line := fmt.Sprintf(`{"parentUuid":%s,"isSidechain":false,"userType":"external","cwd":"/tmp/project","sessionId":%q,"version":"2.0.1","type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":%q}]},"uuid":%q,"timestamp":"2026-11-21T12:00:00.000Z"}`,
					parent, key.SessionID, text[:size], id)
				parent = strconv.Quote(id)
				batch = append(batch, []byte(line))
				n += len(line) + 1
			}
			if _, err := m.Append(context.Background(), key, batch); err != nil {
				b.Fatal(err)
			}
		}
		total += int64(n)
	}
	// Copy the folder while the writers are idle (every append is synced),
	// which is what a SIGKILL leaves; then close the originals normally.
	snap := filepath.Join(b.TempDir(), "snap")
	if out, err := exec.Command("cp", "-a", dir, snap).CombinedOutput(); err != nil {
		b.Fatalf("copy: %v: %s", err, out)
	}
	if err := m.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	return snap, total
}

// BenchmarkRecover measures recovery over 100 sessions of ~1 MB of
// journal each, from the page cache (the bench tool's recovery scenario
// measures the daemon from a cold cache): MB/s for the whole of it,
// check-MB/s for CheckJournals, the part done before serving.
func BenchmarkRecover(b *testing.B) {
	snap, total := recoverFixture(b, 100, 1<<20)
	b.SetBytes(total)
	var check time.Duration
	defer func() {
		b.ReportMetric(float64(total)*float64(b.N)/1e6/check.Seconds(), "check-MB/s")
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "run")
		if out, err := exec.Command("cp", "-a", snap, dir).CombinedOutput(); err != nil {
			b.Fatalf("copy: %v: %s", err, out)
		}
		lay := layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}
		m, err := New(Config{Layout: lay, IdleCompact: time.Hour, IdleRetire: time.Hour, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t := time.Now()
		rep, keys, err := m.CheckJournals(context.Background())
		check += time.Since(t)
		if err != nil || len(rep.Failed) > 0 || len(keys) != 100 {
			b.Fatalf("check: %+v %v", rep, err)
		}
		r := m.Replay(context.Background(), keys)
		b.StopTimer()
		if len(r.Failed) > 0 || r.Sessions != 100 {
			b.Fatalf("replay: %+v", r)
		}
		if err := m.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
		b.StartTimer()
	}
}
