package throughput

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/bench/benchtest"
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

// TestRawSyncTarget: (g), a plain socket and an fdatasync per request,
// holds every acknowledged entry in its file.
func TestRawSyncTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	t.Parallel()
	def, err := Single{Target: TargetRawSync, Clients: 3, Sessions: 1, Size: "1KiB"}.Def()
	if err != nil {
		t.Fatal(err)
	}
	sizer, err := harness.ParseSize("1KiB")
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{Dir: t.TempDir(), Size: sizer, Duration: benchtest.RunFor(500 * time.Millisecond), Verify: true, Log: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc, err := o.Run(ctx, def, 0, rand.New(rand.NewPCG(7, 0)))
	if err != nil {
		t.Fatal(err)
	}
	r := sc.Results[0]
	if r.Error != "" || r.Verified == nil || !*r.Verified || r.Target != TargetRawSync || r.Entries == 0 || !strings.HasPrefix(r.CPUOf, "raw server") {
		t.Fatalf("raw-sync run: %+v", r)
	}
}
