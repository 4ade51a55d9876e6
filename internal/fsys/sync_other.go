//go:build !linux

package fsys

import (
	"os"
	"syscall"
)

const oNoFollow = syscall.O_NOFOLLOW

// datasync falls back to fsync where fdatasync is not available. On macOS
// this is what the standard library's Sync does (F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }

func copyRange(dst, src *os.File, off, n int64) (int64, error, bool) { return 0, nil, false }
