package frame

import (
	"fmt"
	"io"
	"time"
)

// SyncFile is what WriteSynced needs of a log file.
type SyncFile interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
}

// WriteSynced puts b in f with one Write at the file's offset, which must
// be end (where the last synced write ended), then syncs. Every write
// must follow a synced one: that is what FindLaterWrite's proof rests on.
//
// A failed write or sync breaks that rule. Linux marks the pages of a
// failed writeback clean, so the failed bytes stay readable in the page
// cache while never reaching the disk, and frames appended after them
// would sit behind a hole once the power goes: recovery would rightly call
// that corruption. So on failure WriteSynced cuts f back to end at once
// and syncs that, best effort, and the caller must append nothing more to
// f without reading it back from disk; a recovery that knows end should
// cut there in case the cut failed. The error says which call failed, the
// size of b and end.
func WriteSynced(f SyncFile, b []byte, end int64) error {
	_, err := WriteSyncedTimed(f, b, end)
	return err
}

// WriteSyncedTimed is WriteSynced that also says how long the sync took
// (0 when the write failed before it), for the log's fsync histogram: the
// sync alone, as etcd's wal_fsync_duration_seconds, since it is what a
// slow or failing disk stretches.
func WriteSyncedTimed(f SyncFile, b []byte, end int64) (time.Duration, error) {
	op := "write"
	var took time.Duration
	n, err := f.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err == nil {
		op = "sync"
		t := time.Now()
		err = f.Sync()
		took = time.Since(t)
	}
	if err == nil {
		return took, nil
	}
	if terr := f.Truncate(end); terr == nil {
		_ = f.Sync()
	}
	return took, fmt.Errorf("%s of %d bytes at offset %d: %w", op, len(b), end, err)
}
