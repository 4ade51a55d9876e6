package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/catalog"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/fsys/fstest"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/reader"
)

// Entry and ReadOptions are package reader's: the tests here read what
// the writers did through it, over NewSnapshots.
type (
	Entry       = reader.Entry
	ReadOptions = reader.ReadOptions
)

// Read is reader.Reader.Read over m.
func (m *Manager) Read(ctx context.Context, key layout.Key, opt ReadOptions, send func([]Entry) error) error {
	return reader.New(NewSnapshots(m)).Read(ctx, key, opt, send)
}

// ReadLines is reader.Reader.ReadLines over m.
func (m *Manager) ReadLines(ctx context.Context, key layout.Key, from, under uint64, send func([]Entry) error) (lineage, total uint64, err error) {
	return reader.New(NewSnapshots(m)).ReadLines(ctx, key, from, under, send)
}

func TestReadAndFollow(t *testing.T) {
	e := newEnv(t)
	e.cfg.MinCompactBytes = 1 // compact on every append, moving entries under the follower
	e.cfg.CompactRatio = 0.01
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	collect := func(es []Entry) error {
		for _, e := range es {
			got = append(got, fmt.Sprintf("%d:%s", e.Index, e.Data))
		}
		return nil
	}
	if err := m.Read(ctx, k, ReadOptions{From: 3}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], `3:{"type":"user","n":"3"}`) {
		t.Fatalf("read from 3: %v", got)
	}
	got = nil
	if err := m.Read(ctx, k, ReadOptions{Tail: 1}, collect); err != nil || len(got) != 1 || !strings.HasPrefix(got[0], "4:") {
		t.Fatalf("tail 1: %v %v", got, err)
	}
	if err := m.Read(ctx, newKey(), ReadOptions{}, collect); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown session: want not found, got %v", err)
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan Entry, 100)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(fctx, k, ReadOptions{From: 4, Follow: true}, func(es []Entry) error {
			for _, e := range es {
				// Data is only valid during the call.
				e.Data = bytes.Clone(e.Data)
				followed <- e
			}
			return nil
		})
	}()
	want := uint64(4)
	next := func() Entry {
		select {
		case e := <-followed:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("follower got nothing")
		}
		return Entry{}
	}
	if e := next(); e.Index != want {
		t.Fatalf("first followed index %d", e.Index)
	}
	for i := 5; i < 25; i++ {
		if _, err := m.Append(ctx, k, [][]byte{entry("", "n", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		e := next()
		if e.Index != uint64(i) || !bytes.Contains(e.Data, []byte(fmt.Sprintf(`"n":"%d"`, i))) {
			t.Fatalf("followed %d: %s", e.Index, e.Data)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
}

// TestFollowSurvivesWriterFailure: a writer that fails and reopens does not
// strand a follower, and does not wait for it to exit.
func TestFollowSurvivesWriterFailure(t *testing.T) {
	e := newEnv(t)
	ff := fstest.NewHookFS(fsys.OS, fstest.Hooks{})
	e.fs = ff
	m := e.manager()
	defer closeManager(t, m)
	k := newKey()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "0")}); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 10)
	done := make(chan error, 1)
	go func() {
		done <- m.Read(ctx, k, ReadOptions{Follow: true}, func(es []Entry) error {
			for _, e := range es {
				got <- e.Index
			}
			return nil
		})
	}()
	expect := func(i uint64) {
		t.Helper()
		select {
		case n := <-got:
			if n != i {
				t.Fatalf("followed index %d, want %d", n, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("follower did not get entry %d", i)
		}
	}
	expect(0)
	ff.SetHooks(failOn(func(op, path string) bool { return op == "rename" && strings.HasSuffix(path, ".jsonl") }))
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "1")}); err != nil {
		t.Fatal(err)
	}
	expect(1)
	if _, err := m.Flush(ctx, k); !errors.Is(err, errInjected) {
		t.Fatalf("flush: %v", err)
	}
	ff.SetHooks(fstest.Hooks{})
	if _, err := m.Append(ctx, k, [][]byte{entry("", "n", "2")}); err != nil {
		t.Fatal(err)
	}
	expect(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadKeepsModifiedTime: a writer opened to read a session (show,
// check, info) published it as modified at time 0 until its next append,
// so the listing put it last and --continue picked an older session.
func TestReadKeepsModifiedTime(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	old, recent := newKey(), newKey()
	mustAppendTo(t, m, old, string(entry(uuid.NewString())))
	mustAppendTo(t, m, recent, string(entry(uuid.NewString())))
	closeManager(t, m)
	then := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	if err := os.Chtimes(e.lay.TranscriptPath(old), then, then); err != nil {
		t.Fatal(err)
	}
	m = e.manager()
	defer closeManager(t, m)
	// The writer opens for the read and stays (a live writer, as after
	// show or tail).
	if err := m.Read(bg, recent, ReadOptions{}, func([]Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !m.IsActive(recent) {
		t.Fatal("the read opened no writer: the test proves nothing")
	}
	infos, _, err := catalogOf(m).List(bg, catalog.ListOptions{})
	if err != nil || len(infos) != 2 {
		t.Fatalf("listing: %d sessions, %v", len(infos), err)
	}
	if infos[0].Key != recent || infos[1].Key != old {
		t.Fatalf("listed %s then %s; want the recently written one first", infos[0].Key, infos[1].Key)
	}
	fi, err := os.Stat(e.lay.TranscriptPath(recent))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infos[0].ModifiedMs, fi.ModTime().UnixMilli(); got != want {
		t.Fatalf("the session being read is listed as modified at %d, want its file's %d", got, want)
	}
	if got := infos[1].ModifiedMs; got != then.UnixMilli() {
		t.Fatalf("the old session is listed as modified at %d, want %d", got, then.UnixMilli())
	}
	if cont, _, err := catalogOf(m).List(bg, catalog.ListOptions{Continue: true}); err != nil || len(cont) != 1 || cont[0].Key != recent {
		t.Fatalf("--continue picks %v (%v), want %s", cont, err, recent)
	}
}
