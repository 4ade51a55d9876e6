package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// TestSharesRoot: an agent whose config dir is sessiond's root, under any
// name that leads there, writes into sessiond's files itself (its appends
// are marked shared-file); any other dir does not; a relative one is
// refused, naming what to send.
func TestSharesRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "claude")
	other := filepath.Join(base, "agent")
	alias := filepath.Join(base, "alias")
	for _, d := range []string{root, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root, alias); err != nil {
		t.Fatal(err)
	}
	s := New(nil, zap.NewNop(), Info{Root: root})
	for _, c := range []struct {
		dir  string
		want bool
	}{{"", false}, {root, true}, {root + "/", true}, {alias, true}, {other, false}, {filepath.Join(base, "missing"), false}, {root, true}} {
		got, err := s.sharesRoot(c.dir)
		if err != nil || got != c.want {
			t.Errorf("sharesRoot(%q) = %v, %v; want %v", c.dir, got, err, c.want)
		}
	}
	if _, err := s.sharesRoot("rel/claude"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a relative dir: %v, want INVALID_ARGUMENT", err)
	}
}
