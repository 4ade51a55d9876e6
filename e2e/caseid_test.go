package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// TestUpperCaseSessionID: one UUID is one session whatever its case. An
// append under the upper-case id is stored under the lower-case file name
// (as every Claude Code writer names its files), an append under the
// lower-case id goes to the same session, and reads, info, sessionctl's
// prefix resolution, delete and restore find it under either case.
// (Before, the upper-case id made a second file for the same UUID.)
func TestUpperCaseSessionID(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "1h")
	d.start()
	c := d.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	lower := uuid.NewString()
	upper := strings.ToUpper(lower)
	U := client.Session{Cwd: cwd, ID: upper}
	L := client.Session{Cwd: cwd, ID: lower}

	if _, err := c.Append(ctx, U, []byte(`{"type":"user","uuid":"`+uuid.NewString()+`","k":"first"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, L, []byte(`{"type":"user","uuid":"`+uuid.NewString()+`","k":"second"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, U, []byte(`{"type":"user","k":"third"}`)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Flush(ctx, U)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetSession().GetSessionId(); got != lower {
		t.Errorf("flush answered %v, want the session under its lower-case id %s", got, lower)
	}
	data, err := os.ReadFile(d.transcript(pk, lower))
	if err != nil {
		t.Fatalf("no transcript under the lower-case id: %v", err)
	}
	if n := strings.Count(string(data), "\n"); n != 3 {
		t.Errorf("the transcript holds %d lines, want the 3 appended under either case:\n%s", n, data)
	}
	if _, err := os.Lstat(d.transcript(pk, upper)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a second file was made for the upper-case id (%v)", err)
	}
	names, _ := filepath.Glob(filepath.Join(d.root, "projects", pk, "*"))
	if len(names) != 1 {
		t.Errorf("the project holds %v, want only %s.jsonl", names, lower)
	}

	// Reads and info under either case, with the project and without.
	for _, s := range []client.Session{U, L, {ID: upper}} {
		n := 0
		if err := c.Read(ctx, s, client.ReadOptions{}, func(*sessiondv1.Entry) error { n++; return nil }); err != nil || n != 3 {
			t.Errorf("read %+v: %d entries, %v; want 3", s, n, err)
		}
		in, err := c.Info(ctx, s)
		if err != nil || in.GetSession().GetSessionId() != lower || in.GetEntries() != 3 {
			t.Errorf("info %+v: %v entries under %q, %v; want 3 under %s", s, in.GetEntries(), in.GetSession().GetSessionId(), err, lower)
		}
	}
	infos, err := c.List(ctx, cwd, "")
	if err != nil || len(infos) != 1 {
		t.Errorf("list: %d sessions, %v; want one", len(infos), err)
	}

	// sessionctl: the whole id in upper case, and an upper-case prefix.
	for _, arg := range []string{upper, upper[:8]} {
		out, errOut, code := d.ctl("", "show", arg)
		if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "third") {
			t.Errorf("sessionctl show %s: exit %d, %q\n%s", arg, code, errOut, out)
		}
	}

	// Delete and restore under the upper-case id.
	if _, err := c.Delete(ctx, U, false); err != nil {
		t.Fatalf("delete under the upper-case id: %v", err)
	}
	if _, err := os.Lstat(d.transcript(pk, lower)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the transcript is still there after the delete (%v)", err)
	}
	if _, err := c.Restore(ctx, client.Session{ID: upper}); err != nil {
		t.Fatalf("restore under the upper-case id: %v", err)
	}
	if data, err := os.ReadFile(d.transcript(pk, lower)); err != nil || strings.Count(string(data), "\n") != 3 {
		t.Errorf("after the restore the transcript holds %q, %v", data, err)
	}
}

// TestUpperCaseSessionIDStoredBefore: a session an earlier release stored
// under an upper-case file name stays one session: appends under that id
// go to its file (no lower-case twin is started) and reads find it.
func TestUpperCaseSessionIDStoredBefore(t *testing.T) {
	t.Parallel()
	d := newDaemon(t, "--idle-compact", "1h")
	cwd := t.TempDir()
	pk, err := layout.ProjectKeyFromCwd(cwd)
	if err != nil {
		t.Fatal(err)
	}
	upper := strings.ToUpper(uuid.NewString())
	old := d.transcript(pk, upper)
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte(`{"type":"user","k":"old"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	U := client.Session{Cwd: cwd, ID: upper}
	if _, err := c.Append(ctx, U, []byte(`{"type":"user","k":"new"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Flush(ctx, U); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(old)
	if err != nil || string(data) != `{"type":"user","k":"old"}`+"\n"+`{"type":"user","k":"new"}`+"\n" {
		t.Errorf("the upper-case file holds %q (%v), want the old line and the new one", data, err)
	}
	if _, err := os.Lstat(d.transcript(pk, strings.ToLower(upper))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lower-case twin was started next to the file stored before (%v)", err)
	}
	n := 0
	if err := c.Read(ctx, client.Session{ID: upper}, client.ReadOptions{}, func(*sessiondv1.Entry) error { n++; return nil }); err != nil || n != 2 {
		t.Errorf("read without the project: %d entries, %v; want 2", n, err)
	}
}
