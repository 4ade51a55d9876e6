package throughput

import (
	"context"
	"os"
	"testing"

	"github.com/sessiond/sessiond/internal/bench/harness"
)

// TestRawVerifyCountsLines: the raw target's check fails when the server's
// file does not hold exactly the acknowledged entries.
func TestRawVerifyCountsLines(t *testing.T) {
	d := &rawDriver{dir: t.TempDir()}
	if err := os.WriteFile(d.file(), []byte("{\"a\":1}\n{\"a\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for acked, ok := range map[uint64]bool{1: false, 2: true, 3: false} {
		err := d.Verify(context.Background(), &Tally{PerClient: []harness.Acc{{Entries: acked}}})
		if (err == nil) != ok {
			t.Errorf("%d acknowledged, 2 lines on disk: verify said %v", acked, err)
		}
	}
}
