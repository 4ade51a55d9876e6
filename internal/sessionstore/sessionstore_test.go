package sessionstore

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/fsys"
	"github.com/sessiond/sessiond/internal/layout"
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

// TestLargestStateReadsBack: the largest state an append can build
// (maxBatchIDs ids of maxBatchIDLen bytes and a summary of MaxSummaryBytes
// in the top folder and MaxFolders others, every byte one JSON escapes if
// it can) is saved and read back whole, not taken for damaged: read as
// damaged, its batch ids would be dropped and a resent batch stored twice.
// A file over maxSidecarBytes is damage, reported as such.
func TestLargestStateReadsBack(t *testing.T) {
	L := layout.Layout{Root: t.TempDir(), StateDir: t.TempDir()}
	k := layout.Key{ProjectKey: "-p", SessionID: "dddddddd-0000-4000-8000-000000000004"}
	now := time.Now()
	s := State{Batches: map[string]int64{}, Folders: map[string]Summary{}}
	for i := range maxBatchIDs {
		id := fmt.Sprintf("%06d", i) + strings.Repeat("<", maxBatchIDLen-6)
		if err := (AppendOptions{BatchID: id}).Validate(k); err != nil {
			t.Fatal(err)
		}
		s.Batches[id] = now.UnixMilli()
	}
	summary := func(folder string) Summary {
		data := []byte(`{"s":"` + strings.Repeat("<", MaxSummaryBytes-8) + `"}`)
		if err := (AppendOptions{Summary: &SummaryUpdate{Data: data, Folder: folder}}).Validate(k); err != nil {
			t.Fatal(err)
		}
		return Summary{Data: data, Version: 1, Mtime: now.UnixMilli(), Entries: 1}
	}
	top := summary("")
	s.Summary, s.SummaryVersion, s.SummaryMtime, s.SummaryEntries = top.Data, top.Version, top.Mtime, top.Entries
	for i := range MaxFolders {
		f := fmt.Sprintf("folder-%d", i)
		s.Folders[f] = summary(f)
	}
	if err := Save(fsys.OS, L, k, &s, now); err != nil {
		t.Fatal(err)
	}
	got, err := Read(fsys.OS, L, k)
	if err != nil {
		t.Fatalf("Read of the largest state: %v", err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("read back %d ids and %d folders, want %d and %d", len(got.Batches), len(got.Folders), len(s.Batches), len(s.Folders))
	}
	if err := os.WriteFile(L.StorePath(k), make([]byte, maxSidecarBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	var dmg *DamagedError
	if _, err := Read(fsys.OS, L, k); !errors.As(err, &dmg) || len(dmg.Body) != maxSidecarBytes {
		t.Fatalf("Read of an oversized sidecar: %v", err)
	}
}
