package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
)

// The tests sit beside the code of the job they test. Many replay,
// deterministically, one case the crash and fault tests (crash_test.go,
// fault_test.go) can meet, so that a change that breaks it fails with a
// plain story, not only somewhere in the exhaustive sweeps.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const project = "-tmp-project"

func newKey() layout.Key {
	return layout.Key{ProjectKey: project, SessionID: uuid.NewString()}
}

type env struct {
	t   *testing.T
	lay layout.Layout
	fs  fsys.FS
	cfg Config
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	e := &env{t: t, lay: layout.Layout{Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")}, fs: fsys.OS}
	e.cfg = Config{Layout: e.lay, Logger: zaptest.NewLogger(t), IdleCompact: time.Hour, IdleRetire: time.Hour}
	return e
}

func (e *env) manager() *Manager {
	e.t.Helper()
	cfg := e.cfg
	cfg.FS = e.fs
	m, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func closeManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func entry(id string, fields ...string) []byte {
	s := `{"type":"user"`
	if id != "" {
		s += `,"uuid":"` + id + `"`
	}
	for i := 0; i+1 < len(fields); i += 2 {
		s += fmt.Sprintf(",%q:%q", fields[i], fields[i+1])
	}
	return []byte(s + "}")
}

// canonicalLines reads the canonical file and checks every line is a whole
// JSON object.
func (e *env) canonicalLines(k layout.Key) []string {
	e.t.Helper()
	b, err := os.ReadFile(e.lay.TranscriptPath(k))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		e.t.Fatalf("canonical file does not end in a newline")
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		if !json.Valid([]byte(l)) {
			e.t.Fatalf("canonical line is not valid JSON: %.100s", l)
		}
		out = append(out, l)
	}
	return out
}

// crash stops every writer at once, without the shutdown compaction, as a
// killed process would leave things (the journals are already synced).
func crash(t *testing.T, m *Manager) {
	t.Helper()
	for _, s := range m.reg.live(nil) {
		s.Abort()
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	m.Close(expired)
}

var bg = context.Background()

func mustAppendTo(t *testing.T, m *Manager, k layout.Key, lines ...string) {
	t.Helper()
	raw := make([][]byte, len(lines))
	for i, l := range lines {
		raw[i] = []byte(l)
	}
	if _, err := m.Append(bg, k, raw); err != nil {
		t.Fatalf("append to %s: %v", k, err)
	}
}

// abortManager stops m as kill -9 would: no shutdown compaction.
func abortManager(m *Manager) { (&world{m: m}).stop() }

// recoverAndRead recovers v with a new Manager, closes it, and returns
// key's canonical file.
func recoverAndRead(t *testing.T, v *fstest.CrashFS, k layout.Key) string {
	t.Helper()
	m := newCrashManager(t, v, nil)
	rep, err := m.Recover(bg)
	if err != nil || len(rep.Failed) > 0 {
		t.Fatalf("Recover: %v %v", err, rep.Failed)
	}
	closeManager(t, m)
	b, _ := v.ReadFile(crashLayout.TranscriptPath(k))
	return string(b)
}

// opIndex runs fn on a copy of c and returns the index, as c counts, of
// the first operation match selects.
func opIndex(t *testing.T, c *fstest.CrashFS, fn func(c *fstest.CrashFS), match func(fstest.Event) bool) int64 {
	t.Helper()
	probe := c.KillClone()
	var at int64
	probe.Trace(func(ev fstest.Event) {
		if at == 0 && match(ev) {
			at = ev.N
		}
	})
	fn(probe)
	if at == 0 {
		t.Fatal("the operation to crash at never ran")
	}
	return c.Ops() + at // the copy counts from zero
}
