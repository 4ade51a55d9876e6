package journal

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
)

func key(s string) layout.Key {
	return layout.Key{ProjectKey: "-p", SessionID: s}
}

func batchesOf(groups ...[]string) [][][]byte {
	out := make([][][]byte, len(groups))
	for i, g := range groups {
		out[i] = make([][]byte, len(g))
		for k, e := range g {
			out[i][k] = []byte(e)
		}
	}
	return out
}

func openLog(t testing.TB, fs fsys.FS, dir string, opt Options) (*Log, *Recovery) {
	t.Helper()
	opt.FS, opt.Dir = fs, dir
	l, rec, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	return l, rec
}

// contents reads back key's current stream, batch by batch.
func contents(t testing.TB, l *Log, k layout.Key) [][]string {
	t.Helper()
	e, ok := l.Epoch(k)
	if !ok {
		return nil
	}
	out, err := readBatches(l, e.Batches)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readBatches(l *Log, batches []Batch) ([][]string, error) {
	var spans []Span
	for _, b := range batches {
		spans = append(spans, b.Entries...)
	}
	var flat []string
	if err := l.ReadEntries(spans, func(_ int, e []byte) error {
		flat = append(flat, string(e))
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([][]string, len(batches))
	i := 0
	for bi, b := range batches {
		out[bi] = append([]string{}, flat[i:i+len(b.Entries)]...)
		i += len(b.Entries)
	}
	return out, nil
}

// group commits one request per stream in one commit of the committer's:
// a write that spans many transcripts, deterministically.
func group(l *Log, parts map[*Stream][][][]byte) error {
	var reqs []*request
	streams := make([]*Stream, 0, len(parts))
	for s := range parts {
		streams = append(streams, s)
	}
	slices.SortFunc(streams, func(a, b *Stream) int {
		if a.key.Less(b.key) {
			return -1
		}
		return 1
	})
	for _, s := range streams {
		reqs = append(reqs, &request{st: s, batches: parts[s], done: make(chan struct{})})
	}
	if err := l.submit(&request{group: reqs, done: make(chan struct{})}); err != nil {
		return err
	}
	var errs []error
	for _, r := range reqs {
		<-r.done
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}
