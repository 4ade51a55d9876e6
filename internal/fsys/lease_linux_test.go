package fsys_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
)

// TestLease: a write lease on a real file is refused while another open
// file refers to it, stays whole when nobody opens the file (a rename over
// its name included), and is broken by an open, which waits until the
// lease is given up and then reaches the leased file.
func TestLease(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	if err := os.WriteFile(path, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() fsys.File {
		f, err := fsys.OS.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := open()
	if err := fsys.Lease(f); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("this filesystem takes no leases: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	replace := func(content string) {
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	replace("b\n")
	if whole, err := fsys.Unlease(f); err != nil || !whole {
		t.Fatalf("a lease nobody broke: whole %v, %v", whole, err)
	}
	f.Close()

	other, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f = open()
	if err := fsys.Lease(f); !errors.Is(err, fsys.ErrLeaseConflict) {
		t.Fatalf("lease while another file is open: %v, want ErrLeaseConflict", err)
	}
	other.Close()
	if err := fsys.Lease(f); err != nil {
		t.Fatal(err)
	}
	opened := make(chan time.Time, 1)
	go func() {
		g, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			g.WriteString("late\n")
			g.Close()
		}
		opened <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond)
	replace("c\n")
	select {
	case <-opened:
		t.Fatal("an open of a leased file went on before the lease was given up")
	default:
	}
	released := time.Now()
	if whole, err := fsys.Unlease(f); err != nil || whole {
		t.Fatalf("a lease an open broke: whole %v, %v", whole, err)
	}
	if at := <-opened; at.Before(released) {
		t.Fatal("the open went on before the lease was given up")
	}
	b := make([]byte, 16)
	n, _ := f.ReadAt(b, 0)
	if string(b[:n]) != "b\nlate\n" {
		t.Fatalf("the leased file holds %q: the waiting open must reach it", b[:n])
	}
	f.Close()
}
