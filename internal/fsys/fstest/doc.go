// Package fstest holds test implementations of fsys.FS, importable by the
// tests of any package:
//
//   - CrashFS is an in-memory filesystem that remembers, for every file, what
//     File.Sync made durable and which writes came after, and for every
//     folder, what SyncDir made durable and which entry changes came after.
//     CrashClone returns the filesystem a power loss would leave: only what
//     was synced, or (with a random source) that plus a random part of the
//     rest, with writes torn at any byte or missing whole sectors. CrashAt
//     stops the filesystem at a chosen operation, so a test can enumerate
//     every crash point of a workload. KillClone returns what a new process
//     sees after kill -9: everything, synced or not, still at risk of a
//     later power loss.
//   - FaultFS wraps any FS and fails chosen operations: the Nth operation,
//     the Nth of a kind, or those on chosen paths, with EIO, ENOSPC, EROFS or
//     any error, optionally as a short write, once or from then on.
//   - HookFS wraps any FS and calls a test's hooks before and after every
//     operation of the filesystem and of its files: to watch them, run
//     something at a chosen moment, delay or fail chosen ones, or make a
//     file look another size to Stat (Resized).
//
// CrashFS and FaultFS count the operations that touch the disk, so a test
// first runs a workload to learn how many it does, then runs it again once
// per operation, crashing or failing at that one.
package fstest

import (
	"fmt"
	"io/fs"
	"time"
)

// Op is a kind of filesystem operation.
type Op int

// Operation kinds. The read kinds (OpRead, OpStat, OpReadDir, OpLock) are counted
// only when a filesystem is told to count reads: they never change what is
// on disk, so a crash at a read is the same as a crash at the next write.
const (
	OpOpen     Op = iota + 1 // FS.OpenFile
	OpWrite                  // File.Write
	OpSync                   // File.Sync
	OpTruncate               // File.Truncate
	OpRename                 // FS.Rename
	OpLink                   // FS.Link
	OpRemove                 // FS.Remove
	OpMkdir                  // FS.Mkdir
	OpSyncDir                // FS.SyncDir
	OpRead                   // File.Read, File.ReadAt
	OpStat                   // FS.Stat, FS.Lstat, File.Stat
	OpReadDir                // FS.ReadDir
	OpLock                   // FS.Lock
)

var opNames = map[Op]string{
	OpOpen: "open", OpWrite: "write", OpSync: "sync", OpTruncate: "truncate",
	OpRename: "rename", OpLink: "link", OpRemove: "remove", OpMkdir: "mkdir",
	OpSyncDir: "syncdir", OpRead: "read", OpStat: "stat", OpReadDir: "readdir", OpLock: "lock",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// IsRead reports whether o only reads.
func (o Op) IsRead() bool {
	return o == OpRead || o == OpStat || o == OpReadDir || o == OpLock
}

// Event is one counted operation, for traces and error messages.
type Event struct {
	N    int64  // 1-based index among the counted operations
	Op   Op     // its kind
	Path string // the file or folder it touched (the new name for rename and link)
}

func (e Event) String() string { return fmt.Sprintf("#%d %s %s", e.N, e.Op, e.Path) }

// fileInfo is the fs.FileInfo of both filesystems' in-memory files.
type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi fileInfo) ModTime() time.Time { return fi.mtime }
func (fi fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi fileInfo) Sys() any           { return nil }
