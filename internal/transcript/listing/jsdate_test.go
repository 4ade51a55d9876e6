package listing

import (
	"testing"
	"time"
)

func TestJSDateParse(t *testing.T) {
	// Local time is UTC here. Setting time.Local instead raced with the
	// timers of other tests, which read it (the race detector caught it).
	tests := map[string]int64{
		"2026-02-10T21:11:56.906Z":      1770757916906,
		"2026-02-10T21:11:56.9069999Z":  1770757916906,
		"2026-02-10T21:11:56Z":          1770757916000,
		"2026-02-10T21:11Z":             1770757860000,
		"2026-02-10":                    1770681600000,
		"2026-02":                       1769904000000,
		"2026":                          1767225600000,
		"2026-02-10T21:11:56.906+01:00": 1770754316906,
		"2026-02-10T21:11:56.906":       1770757916906,
		"2026-02-10t21:11:56z":          1770757916000,
		"2026-02-10T24:00:00Z":          1770768000000,
		"2026-02-30T00:00:00Z":          1772409600000,
		"+002026-02-10T21:11:56.906Z":   1770757916906,
		"2026-02-10T21:11:56.906+0100":  1770754316906,
	}
	for in, want := range tests {
		if got, ok := jsDateParseIn(in, time.UTC); !ok || got != want {
			t.Errorf("jsDateParse(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"x", "", "2026-02-10T21:11:56.Z", "2026-02-10T21:11:60Z", " 2026-02-10T21:11:56Z", "2026-13-01", "-000000-01-01"} {
		if got, ok := jsDateParseIn(in, time.UTC); ok {
			t.Errorf("jsDateParse(%q) = %d, want NaN", in, got)
		}
	}
}
