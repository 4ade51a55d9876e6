package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/owner"
	"github.com/sessiond/sessiond/internal/testharness"
)

// orderFS records every operation Run makes on the real filesystem, and
// whether the socket existed when the first operation of the log ran.
type orderFS struct {
	*fstest.HookFS
	socket string
	wal    string

	mu           sync.Mutex
	ops          []string
	socketBefore *bool
}

func (o *orderFS) note(op, path string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, op+" "+path)
	if o.socketBefore == nil && (path == o.wal || strings.HasPrefix(path, o.wal+"/")) {
		_, err := os.Stat(o.socket)
		up := err == nil
		o.socketBefore = &up
	}
}

func newOrderFS(socket, wal string) *orderFS {
	o := &orderFS{socket: socket, wal: wal}
	o.HookFS = fstest.NewHookFS(fsys.OS, fstest.Hooks{Before: func(c fstest.Call) error {
		if c.File == nil { // the filesystem's operations, not an open file's
			o.note(c.Name, c.Path)
		}
		return nil
	}})
	return o
}

func (o *orderFS) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ops...)
}

func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// TestStartOrder: Run locks the state folder before it reads or changes
// anything in it, and the root before anything in the root; the log
// (recovery) is opened only once the socket is held. A Run refused at the
// state folder's lock does nothing else but read the holder's record.
func TestStartOrder(t *testing.T) {
	base := t.TempDir()
	cfg := Config{Socket: filepath.Join(base, "run", "s.sock"), Root: filepath.Join(base, "root"),
		StateDir: filepath.Join(base, "state"), Version: "order-test"}
	ofs := newOrderFS(cfg.Socket, filepath.Join(cfg.StateDir, "journal"))
	cfg.FS = ofs
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	waitServing(t, cfg.Socket)

	ops := ofs.list()
	stateLock, rootLock := -1, -1
	for i, op := range ops {
		kind, path, _ := strings.Cut(op, " ")
		switch {
		case kind == "lock" && path == cfg.StateDir && stateLock < 0:
			stateLock = i
		case kind == "lock" && path == cfg.Root && rootLock < 0:
			rootLock = i
		case under(path, cfg.StateDir) && stateLock < 0:
			t.Errorf("operation %d (%s) in the state folder before its lock", i, op)
		case under(path, cfg.Root) && rootLock < 0:
			t.Errorf("operation %d (%s) in the root before its lock", i, op)
		}
	}
	if stateLock < 0 || rootLock < 0 || stateLock > rootLock {
		t.Errorf("locks at %d (state) and %d (root), want the state folder's first:\n%s", stateLock, rootLock, strings.Join(ops, "\n"))
	}
	if ofs.socketBefore == nil || !*ofs.socketBefore {
		t.Error("the log was opened before the socket was held")
	}

	// A second Run on the same folders (another socket): refused at the
	// first lock, with nothing else done.
	second := newOrderFS(filepath.Join(base, "run", "t.sock"), ofs.wal)
	cfg2 := cfg
	cfg2.Socket, cfg2.FS = second.socket, second
	err := Run(context.Background(), cfg2)
	if !errors.Is(err, owner.ErrOwned) {
		t.Fatalf("second Run: %v, want ErrOwned", err)
	}
	got := second.list()
	if len(got) == 0 || got[0] != "lock "+cfg.StateDir {
		t.Fatalf("the refused Run did %q, want the state folder's lock first", got)
	}
	for _, op := range got[1:] {
		if op != "open "+filepath.Join(cfg.StateDir, owner.InfoName) {
			t.Errorf("the refused Run did %q besides reading the holder's record", op)
		}
	}
	if _, err := os.Stat(second.socket); err == nil {
		t.Fatal("the refused Run made a socket")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Stopped: the folders are free again.
	c, err := owner.Acquire(fsys.OS, layout.Layout{Root: cfg.Root, StateDir: cfg.StateDir}, owner.Self("", ""))
	if err != nil {
		t.Fatalf("after the stop: %v", err)
	}
	c.Release()
}

func waitServing(t *testing.T, socket string) {
	t.Helper()
	if err := testharness.WaitStatus(socket, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
