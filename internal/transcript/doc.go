// Package transcript knows the JSONL transcript format: what a valid entry
// is (Normalize), the metadata lines sessiond appends (titles, tags) and a
// subagent's .meta.json sidecar, the entry types that link into the
// parentUuid chain, and how to read transcript files line by line whatever
// their size (LineScanner). Checking and repairing a file (damage), forking
// a session (fork) and its listing metadata (listing) build on it.
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
package transcript
