package sessionstore

import (
	"fmt"
	"testing"
	"time"
)

// TestStorePrune: ids older than BatchIDMemory are forgotten, and at most
// maxBatchIDs are kept, the newest.
func TestStorePrune(t *testing.T) {
	now := time.Now()
	s := State{Batches: map[string]int64{
		"old":   now.Add(-BatchIDMemory - time.Second).UnixMilli(),
		"fresh": now.Add(-time.Minute).UnixMilli(),
	}}
	if !s.Seen("fresh", now) || s.Seen("old", now) || s.Seen("never", now) {
		t.Fatal("seen() disagrees with BatchIDMemory")
	}
	s.Prune(now)
	if _, ok := s.Batches["old"]; ok || len(s.Batches) != 1 {
		t.Fatalf("after prune: %v", s.Batches)
	}
	for i := 0; i < maxBatchIDs+10; i++ {
		s.Batches[fmt.Sprintf("b%05d", i)] = now.Add(time.Duration(i) * time.Millisecond).UnixMilli()
	}
	s.Prune(now.Add(time.Second))
	if len(s.Batches) != maxBatchIDs {
		t.Fatalf("%d ids kept, want %d", len(s.Batches), maxBatchIDs)
	}
	if _, ok := s.Batches["fresh"]; ok {
		t.Error("the oldest id survived the cap")
	}
	if _, ok := s.Batches[fmt.Sprintf("b%05d", maxBatchIDs+9)]; !ok {
		t.Error("the newest id was dropped")
	}
}
