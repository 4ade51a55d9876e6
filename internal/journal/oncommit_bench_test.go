package journal

import (
	"strings"
	"testing"

	"github.com/sessiond/sessiond/internal/fsys/fstest"
)

// BenchmarkCommitCPU is BenchmarkCommitReserved's lone stream on an
// in-memory filesystem, whose sync costs nothing: what is left is the
// commit path's own CPU, where the OnCommit hook (the metrics' fsync
// timing and entry count) would show, with the hook unset and set to a
// function that does nothing. Run: go test -run '^$' -bench CommitCPU
// ./internal/journal
func BenchmarkCommitCPU(b *testing.B) {
	for _, bc := range []struct {
		name string
		hook func(Commit)
	}{
		{"no hook", nil},
		{"hook", func(Commit) {}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, _ := openLog(b, fstest.NewCrashFS(), "/wal", Options{Prealloc: -1, SegmentSize: 4 << 20, OnCommit: bc.hook})
			defer l.Close()
			s := l.Stream(key("bench"))
			s.Begin(Fingerprint{}, true)
			entry := batchesOf([]string{strings.Repeat("x", 1<<10)})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Append(entry, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
