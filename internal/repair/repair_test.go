package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/clock"
	"github.com/sessiond/sessiond/internal/errdefs"
	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/ledger"
	"github.com/sessiond/sessiond/internal/progress"
	"github.com/sessiond/sessiond/internal/transcript/damage"
)

var (
	bg   = context.Background()
	kSrc = layout.Key{ProjectKey: "-p", SessionID: "6a4c8e2a-0000-4000-8000-000000000001"}
)

func entry(id, parent, content string) string {
	p := "null"
	if parent != "" {
		p = `"` + parent + `"`
	}
	return fmt.Sprintf(`{"type":"user","uuid":"%s","parentUuid":%s,"sessionId":"%s","message":{"role":"user","content":"%s"}}`, id, p, kSrc.SessionID, content)
}

func u(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-9%011d", n) }

var (
	clean   = entry(u(1), "", "one") + "\n" + entry(u(2), u(1), "two") + "\n"
	damaged = clean + entry(u(1), "", "one") + "\n" + `{"type":"user","uu`
)

// fakeWriters keeps each transcript in memory and its file in a folder,
// and records what repair asked of them.
type fakeWriters struct {
	dir     string
	files   map[layout.Key]string
	pending map[layout.Key]string
	calls   []string
}

func newFake(t *testing.T) *fakeWriters {
	return &fakeWriters{dir: t.TempDir(), files: map[layout.Key]string{}, pending: map[layout.Key]string{}}
}

func (f *fakeWriters) View(_ context.Context, key layout.Key, fn func(io.Reader, int) error) error {
	if _, ok := f.files[key]; !ok {
		return f.NotFound(key)
	}
	return fn(strings.NewReader(f.files[key]+f.pending[key]), strings.Count(f.pending[key], "\n"))
}

func (f *fakeWriters) Exists(key layout.Key) (bool, error) {
	_, ok := f.files[key]
	return ok, nil
}

func (f *fakeWriters) NotFound(key layout.Key) error {
	return fmt.Errorf("session %s: %w", key, errdefs.ErrNotFound)
}

func (f *fakeWriters) Exclusive(_ context.Context, key layout.Key, fn func(Session) error) error {
	return fn(&fakeSession{f: f, key: key})
}

type fakeSession struct {
	f   *fakeWriters
	key layout.Key
}

func (s *fakeSession) note(c string) { s.f.calls = append(s.f.calls, c) }

func (s *fakeSession) Exists() bool { _, ok := s.f.files[s.key]; return ok }

func (s *fakeSession) Pending() int { return strings.Count(s.f.pending[s.key], "\n") }

func (s *fakeSession) Compact() error {
	s.note("compact")
	s.f.files[s.key] += s.f.pending[s.key]
	delete(s.f.pending, s.key)
	return nil
}

func (s *fakeSession) Snapshot(fn func(io.Reader) error) error {
	s.note("snapshot")
	return fn(strings.NewReader(s.f.files[s.key] + s.f.pending[s.key]))
}

func (s *fakeSession) PlanPutback() (*ledger.Plan, error) { return nil, nil }

func (s *fakeSession) Open() (fsys.File, error) {
	path := filepath.Join(s.f.dir, "open.jsonl")
	if err := os.WriteFile(path, []byte(s.f.files[s.key]), 0o600); err != nil {
		return nil, err
	}
	return os.Open(path)
}

func (s *fakeSession) PutBack(*ledger.Plan, fsys.File, int64) (fsys.File, int64, func(), error) {
	return nil, 0, nil, errors.New("nothing to put back")
}

func (s *fakeSession) Replace(orig io.ReaderAt, size int64, write func(io.Writer) (bool, error)) (string, error) {
	var buf bytes.Buffer
	changed, err := write(&buf)
	if err != nil || !changed {
		s.note("replace: unchanged")
		return "", err
	}
	kept, err := io.ReadAll(io.NewSectionReader(orig, 0, size))
	if err != nil {
		return "", err
	}
	if string(kept) != s.f.files[s.key] {
		return "", errors.New("the original handed to Replace is not the file")
	}
	s.note("replace")
	s.f.files[s.key] = buf.String()
	return "backup", nil
}

func (s *fakeSession) RecordPutback(plan *ledger.Plan, replaced bool) {
	s.note(fmt.Sprintf("record putback: replaced=%v", replaced))
}

func (s *fakeSession) Create(what string, write func(io.Writer) error) error {
	if s.Exists() {
		return errdefs.ErrAlreadyExists
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	s.note("create " + what)
	s.f.files[s.key] = buf.String()
	return nil
}

func newService(t *testing.T, f *fakeWriters) *Service {
	lay := layout.Layout{Root: filepath.Join(f.dir, "root"), StateDir: filepath.Join(f.dir, "state")}
	return New(Config{
		Writers:  f,
		Ledger:   ledger.NewStore(ledger.Config{FS: fsys.OS, Layout: lay, Clock: clock.Real, Logger: zap.NewNop()}),
		Progress: progress.New(),
		Titles:   func(layout.Key) (string, error) { return "", nil },
	})
}

func TestRepairRewritesThroughTheWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		pending string
		dryRun  bool
		changed bool
		backup  string
		calls   []string
	}{
		{"damaged", damaged, "", false, true, "backup", []string{"compact", "replace", "record putback: replaced=true"}},
		{"clean", clean, "", false, false, "", []string{"compact", "replace: unchanged", "record putback: replaced=false"}},
		{"dry run", damaged, "", true, true, "", []string{"compact"}},
		{"dry run with pending entries", clean, entry(u(1), "", "one") + "\n", true, true, "", []string{"snapshot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.files[kSrc] = tc.file
			if tc.pending != "" {
				f.pending[kSrc] = tc.pending
			}
			out, err := newService(t, f).Repair(bg, kSrc, tc.dryRun)
			if err != nil {
				t.Fatal(err)
			}
			if out.Result.Changed != tc.changed || out.Backup != tc.backup {
				t.Errorf("changed %v, backup %q; want %v, %q", out.Result.Changed, out.Backup, tc.changed, tc.backup)
			}
			if got := strings.Join(f.calls, ", "); got != strings.Join(tc.calls, ", ") {
				t.Errorf("asked the writer: %s; want %s", got, strings.Join(tc.calls, ", "))
			}
			if tc.dryRun && (f.files[kSrc] != tc.file || f.pending[kSrc] != tc.pending) {
				t.Error("a dry run changed the transcript")
			}
			if !tc.dryRun && tc.changed {
				rep, err := damage.Check(strings.NewReader(f.files[kSrc]), damage.CheckOptions{SessionID: kSrc.SessionID})
				if err != nil || !rep.Clean() {
					t.Errorf("the repaired transcript is not clean: %v %+v", err, rep)
				}
			}
		})
	}
}

func TestRepairRefusals(t *testing.T) {
	f := newFake(t)
	s := newService(t, f)
	if _, err := s.Repair(bg, kSrc, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("repair of a missing transcript: %v, want not found", err)
	}
	if _, err := s.Check(bg, kSrc); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("check of a missing transcript: %v, want not found", err)
	}
	sub := kSrc
	sub.Subpath = "subagents/agent-a1"
	if _, err := s.Fork(bg, sub, "", "", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("fork of a subagent transcript: %v, want invalid argument", err)
	}
	f.files[kSrc] = clean
	if _, err := s.Fork(bg, kSrc, "", "", kSrc.SessionID); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("fork over an existing session: %v, want already exists", err)
	}
}

func TestCheckAllSkipsGoneAndFork(t *testing.T) {
	f := newFake(t)
	s := newService(t, f)
	f.files[kSrc] = damaged
	gone := layout.Key{ProjectKey: kSrc.ProjectKey, SessionID: "6a4c8e2a-0000-4000-8000-000000000002"}
	var got []CheckResult
	if err := s.CheckAll(bg, []layout.Key{gone, kSrc}, func(r CheckResult) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key != kSrc || got[0].Report.Clean() {
		t.Fatalf("CheckAll: %+v, want one damaged result for %s", got, kSrc)
	}
	f.files[kSrc] = clean
	out, err := s.Fork(bg, kSrc, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Entries != 2 || !strings.Contains(f.files[out.Key], out.Key.SessionID) || strings.Join(f.calls, ",") != "create fork" {
		t.Errorf("fork: %+v, calls %v, file %q", out, f.calls, f.files[out.Key])
	}
}
