package health

import (
	"slices"
	"testing"

	"github.com/sessiond/sessiond/internal/layout"
)

// TestSessionFailureLeavesOnceHealthy: a session's failure is listed until
// it is healthy, then only counted as past; a failure that is not a
// session's stays.
func TestSessionFailureLeavesOnceHealthy(t *testing.T) {
	var h Health
	a, b := layout.Key{ProjectKey: "p", SessionID: "a"}, layout.Key{ProjectKey: "p", SessionID: "b"}
	h.Failed("segment 3 damaged")
	h.SessionFailed(a, "a: disk full")
	h.SessionFailed(b, "b: disk full")
	h.SessionFailed(a, "a: disk still full")
	if cur, past := h.Report(); !slices.Equal(cur, []string{"segment 3 damaged", "a: disk still full", "b: disk full"}) || past != 0 {
		t.Fatalf("report = %q, %d past", cur, past)
	}
	h.Healthy(a)
	h.Healthy(a) // once past, it is not counted again
	if cur, past := h.Report(); !slices.Equal(cur, []string{"segment 3 damaged", "b: disk full"}) || past != 1 {
		t.Fatalf("report after a is healthy = %q, %d past", cur, past)
	}
}
