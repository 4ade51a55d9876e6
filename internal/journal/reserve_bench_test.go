package journal

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
)

// BenchmarkCommitReserved measures one stream committing one entry at a
// time (a lone agent: one write + one fdatasync per append) into a segment
// whose space is reserved (the default), into one that grows with every
// append (Prealloc < 0, the baseline, as before reservation), and into a
// reused segment (every block written before). Besides ns/op it reports
// the process's CPU per commit (user+system), where the sync's own kernel
// work shows. Run: go test -run '^$' -bench CommitReserved ./internal/journal
func BenchmarkCommitReserved(b *testing.B) {
	for _, bc := range []struct {
		name  string
		opt   Options
		reuse bool
	}{
		{"grows (baseline)", Options{Prealloc: -1}, false},
		{"reserved", Options{}, false},
		{"reused", Options{SegmentSize: 256 << 20}, true},
	} {
		for _, size := range []int{1 << 10, 20 << 10} {
			b.Run(bc.name+"/"+byteSize(size), func(b *testing.B) {
				dir := b.TempDir()
				l, _ := openLog(b, fsys.OS, dir, bc.opt)
				defer l.Close()
				if bc.reuse {
					// Fill the first segment, let it go, and make the
					// spare the current segment.
					l = reuseOneSegment(b, l, dir, bc.opt)
				}
				s := l.Stream(key("bench"))
				s.Begin(Fingerprint{}, true)
				entry := batchesOf([]string{strings.Repeat("x", size)})
				var r0, r1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := s.Append(entry, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
				cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// reuseOneSegment writes a whole segment with a throwaway stream, lets
// it go, and returns a log reopened so that its current segment is the
// reused file.
func reuseOneSegment(b *testing.B, l *Log, dir string, opt Options) *Log {
	b.Helper()
	st := l.Stream(key("fill"))
	st.Begin(Fingerprint{}, true)
	big := batchesOf([]string{strings.Repeat("f", 1<<20)})
	for l.Stats().Segments < 2 {
		if _, err := st.Append(big, nil); err != nil {
			b.Fatal(err)
		}
	}
	st.Begin(Fingerprint{Size: 1}, false) // the full segment goes
	l.Close()
	l, _ = openLog(b, fsys.OS, dir, opt) // its first segment is the spare
	return l
}

func byteSize(n int) string { return fmt.Sprintf("%dKiB", n>>10) }
