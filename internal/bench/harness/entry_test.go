package harness

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func TestEntriesHaveTheirSize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{MinEntry, 1000, 1024, 4096, 65536, MaxEntry} {
		e := AppendEntry(nil, size, NewUUID(r), NewUUID(r), 7)
		if len(e) != size {
			t.Errorf("entry of %d bytes is %d", size, len(e))
		}
		var v map[string]any
		if err := json.Unmarshal(e, &v); err != nil {
			t.Errorf("size %d: %v", size, err)
		}
	}
	d, err := ParseSize("dist:agent")
	if err != nil {
		t.Fatal(err)
	}
	for range 10000 {
		if n := d.Size(r); n < MinEntry || n > MaxEntry {
			t.Fatalf("dist:agent drew %d", n)
		}
	}
	for spec, want := range map[string]int{"1KiB": 1024, "200": 200, "200B": 200, "1MiB": 1 << 20, "4KB": 4000} {
		s, err := ParseSize(spec)
		if err != nil || s.Size(r) != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %d", spec, s, err, want)
		}
	}
	for _, bad := range []string{"100", "2MiB", "x", "dist:nope", "-1"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestLatencyPercentiles(t *testing.T) {
	ns := make([]int64, 100)
	for i := range ns {
		ns[i] = int64(100-i) * 1000 // 100..1 us, unsorted
	}
	l := LatencyOf(ns)
	if l.P50 != 50 || l.P90 != 90 || l.P99 != 99 || l.Max != 100 || l.Mean != 50.5 {
		t.Errorf("latencyOf = %+v", l)
	}
}
