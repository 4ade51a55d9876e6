// Package journal reads and writes the per-session journals of sessiond
// releases before the shared write-ahead log (internal/wal): one file per
// transcript, "<state>/journal/<project>/<session>[/<subpath>].wal", where
// the session writer appended client batches (one write and one sync per
// group commit) before acknowledging them. It knows nothing about JSONL; an
// entry is opaque bytes.
//
// sessiond no longer writes these files. At start it opens every journal it
// finds and imports it into the write-ahead log (its committed batches with
// their meta, its base fingerprint and compaction marker, under its
// generation), then removes it (internal/writer's importLegacy): an upgrade
// loses nothing that was acknowledged. Open therefore keeps its full
// recovery: a journal left by a crash of the old daemon gets its torn tail
// cut, or is moved aside as corrupt, exactly as that daemon would have done.
//
// The writing half (Create, Append, AppendMeta, MarkCompacted) stays so that
// tests and the upgrade fixtures can produce old-format journals, byte for
// byte what older releases wrote (testdata/basic.wal pins it); nothing else
// should call it.
//
// The frames are internal/frame's, the same code the write-ahead log uses;
// this package defines the record types and payloads below. The format is
// frozen: it describes files users may still have on disk.
//
// # Files and generations
//
// A journal file belongs to one generation, a random non-zero uint64 chosen
// by Create. Create writes the new file under a temp name, syncs it, renames it
// over the old generation and syncs the folder, so the path always names a
// complete journal. Every record checksum is seeded with the generation, so a
// frame left over from another generation never validates in this one.
//
// # Frames
//
// A file is a sequence of internal/frame frames, laid out as below. Every
// frame starts at an 8-byte aligned offset and is zero-padded to the next
// 8-byte boundary, so the first 8 bytes of a header (length and type) never
// straddle a sector and cannot tear. All integers are little-endian.
//
//	offset size field
//	0      4    payload length n (at most Options.MaxRecord)
//	4      1    record type: 1 Header, 2 Entry, 3 Commit, 4 Compacted, 5 Meta (0 is invalid: zero fill never parses)
//	5      3    reserved, must be zero
//	8      4    CRC32C (Castagnoli)
//	12     4    position in write: (this frame's offset - offset where the write() that carried it began) / 8
//	16     n    payload
//	16+n   0-7  zero padding to a multiple of 8
//
// The CRC covers, in this order: the generation (uint64; 0 for the Header
// record, whose payload carries the generation), bytes 0-7, bytes 12-15 and
// the payload. Reserved bytes and padding are checked to be zero.
//
// # Records
//
//   - Header: always and only the first frame. Payload: JSON object
//     {"v":1,"generation":G,"project_key":…,"session_id":…,"subpath":…,
//     "base_size":…,"base_tail":…} (at most 64 KiB). "v" is the format
//     version; a larger one is refused, not treated as damage.
//   - Entry: payload = one entry's bytes, as given to Append.
//   - Commit: ends one client batch. Payload: batch sequence number uint64
//     (1 for the first batch of a generation, then +1 each) and the number of
//     Entry records right before it uint32. Entries and their Commit are always
//     written by the same write(); entries with no Commit after them were never
//     acknowledged.
//   - Compacted: payload = size int64 and tail fingerprint uint32 of the
//     canonical file the writer is about to install by rename.
//   - Meta: what the caller says about one batch as a whole (its id, the
//     session summary that goes with it), opaque to the journal, at most
//     MaxMeta bytes. Optional; when present it follows the batch's last Entry
//     and precedes its Commit, in the same write, so it is durable exactly
//     when the batch is. Open returns it as Batch.Meta. A journal with Meta
//     records cannot be read by a sessiond older than the record type.
//
// # Recovery: torn tail or corruption
//
// Open walks the frames from the start. At the first frame that is invalid
// it must decide whether the damage is a torn tail, which it truncates, or
// corruption, which it refuses to guess about. Invalid means: partial,
// failing a field check or its checksum, or contradicting the frames before
// it (a Header that is not first, a Commit whose seq is not the previous
// one + 1 or whose count differs from the Entry records before it, a Meta
// record that is not between a batch's entries and its Commit, a new
// write beginning while entries lack their Commit, a position-in-write that
// disagrees with the rest of its write, a Commit or Compacted payload that
// is not 12 bytes).
//
// A torn tail is what a crash during an unsynced write() leaves: a cut, zero
// fill, garbage, and possibly valid frames of that same write after a hole,
// because the page cache may write a multi-page write back out of order. A
// frame written by a later write() is different: the writer only issues the
// next write after the previous one was synced, so a valid frame of this
// generation whose write began after the bad frame proves the bad bytes had
// been synced, and are corruption. The position-in-write field is what tells
// the two apart: Open scans every 8-byte aligned offset after the bad frame
// for such a frame. A damaged Header record is always corruption: Create syncs
// the header before the file gets its name, so it cannot be torn.
//
// The price of not mistaking a torn write for corruption: damage inside the
// last write, with nothing written after it, is cut as a torn tail even if
// that write had been synced and acknowledged. Nothing on disk can tell the
// two apart; Recovery.TruncatedBytes reports the cut.
//
// # Failed writes
//
// The reasoning above needs every write to follow a synced one. A write
// or sync that fails breaks that: Linux marks the pages of a failed
// writeback clean, so the failed records stay readable in the page cache
// while never reaching the disk, and no later sync writes them. Records
// appended after them would sit behind a hole once the power goes, and
// Open would rightly call that corruption. So a failed Append or
// MarkCompacted cuts the file back to the end of the last synced write at
// once (best effort) and fails the journal for good; DurableEnd reports
// that end, and the Open that resumes the journal takes it as
// Options.DurableEnd and cuts whatever lies past it as a torn tail,
// however valid it looks. (A process that dies after a failed sync whose
// cut also failed takes that end with it; the next process cannot tell.)
//
// Corrupt files are renamed to "<path>.corrupt-<unix-nanos>" and Open returns
// an error wrapping errdefs.ErrCorrupt. Torn tails are cut back to the end of
// the last valid Header, Commit or Compacted record. Either way Open syncs
// the file and its folder before returning.
package journal
