package main

import (
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/api/proto/sessiond/v1"
)

// TestDescribeMirror: status says nothing of a mirror not configured, and
// of one configured where it writes, whether it is connected, how far
// behind and since when, and its last error.
func TestDescribeMirror(t *testing.T) {
	var b strings.Builder
	describeMirror(&b, &sessiondv1.MirrorStatus{}, time.Now())
	if b.Len() != 0 {
		t.Fatalf("lines for a mirror not configured: %q", b.String())
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	describeMirror(&b, &sessiondv1.MirrorStatus{Configured: true, Target: "user=u database=d host=h port=5432 table=t",
		EntriesBehind: 40, BytesBehind: 4096, OldestBehindMs: now.Add(-65 * time.Second).UnixMilli(), Transcripts: 3,
		Unchecked: 2, RowsWritten: 7, LastError: "postgresql: connection refused", LastErrorMs: now.UnixMilli()}, now)
	out := b.String()
	for _, want := range []string{"NOT CONNECTED to user=u database=d host=h port=5432 table=t", "3 transcripts up to date",
		"40 entries (4.0 KiB), the oldest for 1m5s", "2 transcripts not yet compared with PostgreSQL (since start, since their lines moved, or since a delete, restore, title or archive mark)", "postgresql: connection refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lines lack %q:\n%s", want, out)
		}
	}
	b.Reset()
	describeMirror(&b, &sessiondv1.MirrorStatus{Configured: true, Connected: true, Target: "x", Transcripts: 1}, now)
	if out := b.String(); !strings.Contains(out, "connected to x: 1 transcript up to date") || strings.Contains(out, "behind") {
		t.Errorf("an up-to-date mirror: %q", out)
	}
}
