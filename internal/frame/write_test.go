package frame

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// fakeFile records the calls WriteSynced makes and fails the ones it is
// told to.
type fakeFile struct {
	calls             []string
	short             bool
	writeErr, syncErr error
}

func (f *fakeFile) Write(b []byte) (int, error) {
	f.calls = append(f.calls, fmt.Sprintf("write %d", len(b)))
	if f.short {
		return len(b) - 1, nil
	}
	if f.writeErr != nil {
		return 0, f.writeErr
	}
	return len(b), nil
}

func (f *fakeFile) Sync() error {
	f.calls = append(f.calls, "sync")
	err := f.syncErr
	f.syncErr = nil // only the first sync fails: the one after the cut works
	return err
}

func (f *fakeFile) Truncate(n int64) error {
	f.calls = append(f.calls, fmt.Sprintf("truncate %d", n))
	return nil
}

func TestWriteSynced(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		f     fakeFile
		calls []string
		err   error  // cause the error must wrap; nil for success
		says  string // what the error must say
	}{
		{"ok", fakeFile{}, []string{"write 24", "sync"}, nil, ""},
		{"write fails", fakeFile{writeErr: boom}, []string{"write 24", "truncate 4096", "sync"}, boom, "write of 24 bytes at offset 4096"},
		{"short write", fakeFile{short: true}, []string{"write 24", "truncate 4096", "sync"}, io.ErrShortWrite, "write of 24 bytes at offset 4096"},
		{"sync fails", fakeFile{syncErr: boom}, []string{"write 24", "sync", "truncate 4096", "sync"}, boom, "sync of 24 bytes at offset 4096"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteSynced(&tc.f, make([]byte, 24), 4096)
			if !reflect.DeepEqual(tc.f.calls, tc.calls) {
				t.Errorf("calls %q, want %q", tc.f.calls, tc.calls)
			}
			switch {
			case tc.err == nil && err != nil:
				t.Fatalf("WriteSynced: %v", err)
			case tc.err != nil && (!errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("error %v, want one wrapping %v that says %q", err, tc.err, tc.says)
			}
		})
	}
}
