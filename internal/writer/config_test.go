package writer

import (
	"testing"

	"github.com/sessiond/sessiond/internal/journal"
)

// TestSizesFor: the disk-bound defaults are the fixed ones on a large
// disk and shares of a small one, never under a MiB.
func TestSizesFor(t *testing.T) {
	for _, tc := range []struct {
		total int64
		want  DiskSizes
	}{
		{0, DiskSizes{DefaultBallastSize, journal.DefaultSegmentSize, journal.DefaultMaxSize, DefaultJournalRetentionSize}},
		{500 << 30, DiskSizes{DefaultBallastSize, journal.DefaultSegmentSize, journal.DefaultMaxSize, DefaultJournalRetentionSize}},
		{64 << 20, DiskSizes{4 << 20, 4 << 20, 16 << 20, 8 << 20}},
		{4 << 20, DiskSizes{1 << 20, 1 << 20, 1 << 20, 1 << 20}},
	} {
		if got := SizesFor(tc.total); got != tc.want {
			t.Errorf("SizesFor(%d) = %+v, want %+v", tc.total, got, tc.want)
		}
	}
}
