package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestCountFDs: the count follows the files a process opens.
func TestCountFDs(t *testing.T) {
	before, err := CountFDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var fs []*os.File
	for i := range 3 {
		f, err := os.Create(filepath.Join(t.TempDir(), strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	after, err := CountFDs(os.Getpid())
	for _, f := range fs {
		f.Close()
	}
	if err != nil || after != before+3 {
		t.Errorf("%d descriptors, %d after opening 3 files (%v)", before, after, err)
	}
	if _, err := CountFDs(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// TestFDUsageCountsDeletedFiles: a file removed while open is counted as
// deleted, one still linked is not.
func TestFDUsageCountsDeletedFiles(t *testing.T) {
	dir := t.TempDir()
	_, before, err := FDUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.Create(filepath.Join(dir, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	gone, err := os.Create(filepath.Join(dir, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if err := os.Remove(gone.Name()); err != nil {
		t.Fatal(err)
	}
	total, deleted, err := FDUsage(os.Getpid())
	if err != nil || deleted != before+1 || total < 2 {
		t.Errorf("%d descriptors, %d deleted (%d before) (%v)", total, deleted, before, err)
	}
	if _, _, err := FDUsage(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
