// Package journal is sessiond's write-ahead log: one log, shared by every
// transcript, where a session's appends become durable before they are
// acknowledged. One committer at a time takes everything the session
// writers have queued, from every session at once, writes it with one
// write() and one fdatasync, and then answers each waiter: a machine with a
// thousand live sessions pays one sync where a log per session paid a
// thousand. The committer is a role that passes from goroutine to
// goroutine (the one whose request finds nobody committing, then the
// oldest waiter), so a lone agent's append costs no hand-off to another
// thread (see commit.go). It knows nothing about JSONL; an entry is opaque
// bytes.
//
// # Segments
//
// The journal is a sequence of segment files in one folder, named
// "<seq as 16 hex digits>.wal". A segment is created under a temp name with
// its header record, synced, renamed into place and the folder synced, so a
// segment's name always stands for a readable header. Its space is
// reserved at creation (Options.Prealloc, fallocate), and a segment the
// checkpoint lets go is kept as a spare ("spare-*.wal-spare", at most two)
// that a later segment reuses: a sync after a write into blocks the file
// already has commits no metadata, which cut the latency and CPU of each
// commit by a quarter (reserved) to a half (reused) here (reserve.go,
// BenchmarkCommitReserved). After a crash the last segment therefore ends
// in zeros or in a reused file's old records; neither validates (see
// Records), and recovery cuts them like a torn tail. On a full disk
// (SetLowSpace) the spares are deleted and nothing is reserved ahead until
// the space is back, so the room goes to the compactions waiting for it.
// The committer
// appends to the newest segment only and starts a new one when it passes
// Options.SegmentSize (a write is never split, so a segment may end one
// write past it), when a write or sync of it failed, and at every Open:
// records are never appended to a segment a previous process wrote.
//
// # Records
//
// Frames are internal/frame's, their checksums seeded with the segment's
// random id (the header's own with 0). Every record after the header names
// a stream: one epoch of one transcript, from a Bind to the next Bind of the
// same transcript.
//
//   - Header (1): first frame only. JSON {"v":2,"seq":N,"id":I,"prev_end":E}.
//     prev_end, when not 0, is where the previous segment's last synced
//     write ended: it was sealed after a failed write or sync, and
//     whatever lies past that offset was never acknowledged.
//   - Bind (2): starts stream S for a transcript. JSON {"stream":S,
//     "project_key","session_id","subpath","base_size","base_tail"}: the
//     fingerprint of the canonical file when the epoch began (opaque to
//     the journal). A Bind supersedes every earlier stream of its transcript:
//     recovery ignores them.
//   - Entry (3): stream uint64, then one entry's bytes.
//   - Meta (4): stream uint64, then what the caller says about the batch as
//     a whole (at most MaxMeta bytes); between a batch's last Entry and its
//     Commit.
//   - Commit (5): stream uint64, batch seq uint64 (1, 2, ... within the
//     stream), entry count uint32. It ends one client batch; a batch's
//     entries, meta and commit are always in one write, and the entries of
//     different streams never interleave.
//   - Compacted (6): stream uint64, size int64, tail uint32: the
//     fingerprint of the canonical file the writer is about to install by
//     rename. If the canonical file has it at recovery, every batch of the
//     stream before the marker is already in it.
//   - Pad (7): zeros, the last record of a write, filling the rest of the
//     4 KiB block the write ends in when that rest is at most half a
//     block (padAfter): the next write starts on a fresh block, and the
//     sync of each small commit writes its blocks once, not the last one
//     again at the next commit. Version 1 segments (an older sessiond's,
//     still read) have none; an older sessiond refuses a version 2
//     segment instead of taking a Pad for damage.
//
// # Checkpoints: when a segment goes
//
// A stream holds a reference on every segment that has its Bind, its
// entries or its marker, from its first entry until a later Bind of its
// transcript is durable (the writer binds a new stream right after each
// compaction). Segments are deleted oldest first, one at a time with a
// folder sync after each, and only when no stream and no reader holds
// them: a newer segment, which may hold the Bind that superseded a stream,
// is never gone while an older one holding that stream's entries is still
// there.
//
// A segment the checkpoint lets go is not deleted at once when
// Options.Retention is set: it is renamed "<seq>-<unix ms>.wal-retained",
// out of the journal (recovery does not read it), and kept that long while
// the retained segments stay within Options.RetentionSize, the oldest
// going first; Lookup reads entries back from them by their spans (see
// retain.go). A full disk drops them all: the journal's own writes that find
// it full, and the writers' (DropRetained, SetLowSpace).
//
// An idle transcript whose entries sit in the oldest segment would keep it
// forever. So when the segments add up to more than Options.MaxSize, the
// committer reports, once per new segment, every transcript holding the
// oldest segment (Options.OnPressure); the writers compact them and the
// segment goes. The journal therefore stays within MaxSize plus one segment
// plus what is written while those compactions run, unless they fail (a
// full disk): then it grows, and the failures are reported.
//
// # Recovery
//
// Open reads every segment once, in order, and rebuilds for each
// transcript its current stream: base, committed batches (as spans) and the
// last marker. A torn tail (the last write cut short, zero fill, garbage,
// frames of that write out of order) is cut back to the last complete
// record. A bad frame followed by a valid frame of a later write is
// corruption: the segment is copied aside as "<name>.corrupt-<unix-nanos>"
// for inspection, cut at the damage, reported, and reading goes on with
// the next segment. The rules are the ones internal/frame describes.
// One exception: a bad Pad whose damage lies where a pad holds nothing
// (its zeros or its checksum), ending the write the scan is in, with a
// valid later write right after it or nothing after it, costs no record:
// it is reported as damaged padding (Recovery.PadDamaged) and reading goes
// on (scanner.padUntil).
//
// # Failures
//
// A failed write or sync fails every request of that commit (an fsync
// error is never retried: the kernel may have dropped the pages), cuts the
// segment back to its last synced write (best effort) and seals it; the
// next request starts a new segment whose header records that end, so a
// later recovery cuts the sealed segment there even if the cut failed.
package journal
