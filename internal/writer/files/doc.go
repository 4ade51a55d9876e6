// Package files does the file work of a session writer (package session)
// that needs none of its state:
//
//   - the checksum of a file's last bytes that says it still starts with
//     what was read (TailCRC, Intact, HasPrefix), reading a range of it
//     and its whole lines, where a line starts;
//   - Held: the canonical file a compaction replaced, kept open a while
//     so that what an agent still appends to it is rescued, under a lease
//     that says when nobody opened it, and within Slots shared by every
//     session so that a thousand live sessions never hold a thousand old
//     files;
//   - Unmatched: the lines without uuid that the agent's CLI wrote into a
//     canonical file it shares with sessiond (on the defaults of both
//     sides), which the mirrored copies of those lines then match, the
//     oldest dropped past MaxUnmatched (the writer records each change in
//     the session's ledger and replays them as it opens);
//   - StaleTemps: the temp files a crashed daemon left in a folder;
//   - KeepAside: a synced copy of a file a person should look at.
//
// Everything goes through fsys, so that the crash and fault tests reach
// every file operation.
package files
