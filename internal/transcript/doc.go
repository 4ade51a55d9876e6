// Package transcript knows the JSONL transcript format: what a valid entry
// is, how to read a field of a stored line without decoding all of it, and
// how to read transcript files line by line whatever their size.
//
// A transcript is one JSON object per '\n'-terminated line, read by the
// Claude Code CLI and the Claude Agent SDKs. Those readers skip lines that do
// not parse, and the Anthropic API later rejects conversations with damage
// that a JSON parser lets through (lone UTF-16 surrogates), so sessiond
// refuses such entries up front, with an error that says what is wrong and
// where, instead of storing a line that makes a session unresumable.
//
// Entries are kept as the agent wrote them: key order and string bytes are
// never changed (readers rely on lines starting with {"type":...}); only
// insignificant whitespace is removed so an entry fits on one line.
//
// # Jobs and files
//
// Entries and lines:
//   - entry.go: Normalize, the check every appended entry passes.
//   - scan.go: the JSON scanner behind it (errors that say where), and
//     reading one top-level field of a stored line (TopLevelString).
//   - lines.go: LineScanner, lines of any size, a torn last one included.
//   - meta.go: the metadata lines sessiond appends (titles, tags), a
//     subagent's .meta.json sidecar, and the JavaScript string rules they
//     follow.
//
// Checking and repairing a transcript file:
//   - classify.go: what is wrong with one line (ClassifyLine).
//   - check.go: Check, the problems of a whole file.
//   - chain.go: the parentUuid chain as the official readers follow it.
//   - pairing.go: tool_use / tool_result pairing across turns.
//   - repair.go: Repair, which rewrites a file without the damage.
//   - jsonedit.go: the JSON grammar and in-place edits check and repair use.
//
// Forking a session as the TypeScript SDK's forkSession does (Fork):
//   - fork.go: the API and the wiring of the two passes.
//   - fork_index.go: the first pass, what is kept of each entry and record.
//   - fork_chain.go: the chain a resume would load ($p, NMe).
//   - fork_cut.go: where a fork up to a uuid ends, and what it copies.
//   - fork_write.go: the second pass, which rewrites the copied entries.
//   - jsobject.go: ordered JSON objects as JavaScript sees them (Fork and
//     Summary).
//
// Listing metadata as the SDK's listSessions reads it (Summary):
//   - summary.go: the fields and the rules combining them; the reader over
//     a file's head and tail (SummaryFromHeadTail).
//   - summary_lookup.go: the text lookups over a window (DR, sc, kR).
//   - summary_prompt.go: the first prompt and media fallback.
//   - summary_stream.go: the streaming reader behind Summary.Add.
//   - jsdate.go: Date.parse, for CreatedAt.
//
// Goldens recorded from the official SDK are under testdata/fork and
// testdata/summary (see goldens_test.go), repair's under testdata/damaged.
package transcript
